# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of plugins/module_utils/_docker.py: which SDK client is made, and how a failure reads."""

from __future__ import annotations

import types
from unittest import mock

import pytest
from docker.errors import DockerException

from ansible_collections.dgxspark.vllm.plugins.module_utils import _docker


class Failed(Exception):
    pass


def fail_json(**kwargs):
    raise Failed(kwargs)


def fake_module():
    return mock.Mock(fail_json=mock.Mock(side_effect=fail_json))


def fake_sdk(error=None):
    return types.SimpleNamespace(
        DockerClient=mock.Mock(return_value="high", side_effect=error), from_env=mock.Mock(return_value="env", side_effect=error),
        APIClient=mock.Mock(return_value="low", side_effect=error), errors=types.SimpleNamespace(DockerException=DockerException))


def test_client_per_option():
    sdk = fake_sdk()
    assert _docker.client(fake_module(), sdk, "unix:///run/docker.sock") == "high"
    sdk.DockerClient.assert_called_once_with(base_url="unix:///run/docker.sock")
    assert _docker.client(fake_module(), sdk, None, timeout=30) == "env"
    sdk.from_env.assert_called_once_with(timeout=30)
    assert _docker.client(fake_module(), sdk, "tcp://10.0.0.1:2375", timeout=60, low_level=True) == "low"
    sdk.APIClient.assert_called_once_with(base_url="tcp://10.0.0.1:2375", version="auto", timeout=60)


def test_engine_that_does_not_answer_names_the_address():
    module = fake_module()
    with pytest.raises(Failed) as exc:
        _docker.client(module, fake_sdk(DockerException("Error while fetching server API version")), "unix:///x.sock")
    assert exc.value.args[0]["msg"] == ("cannot talk to the Docker daemon at unix:///x.sock on this node: Error while fetching "
                                        "server API version; is Docker running and may this user use it?")
    assert "Traceback" in exc.value.args[0]["exception"]
    with pytest.raises(Failed) as exc:
        _docker.client(fake_module(), fake_sdk(DockerException("refused")), None)
    assert exc.value.args[0]["msg"].startswith("cannot talk to the Docker daemon on this node: refused;")


def test_missing_sdk():
    with pytest.raises(Failed) as exc:
        _docker.client(fake_module(), None, None, import_error="ImportError: No module named docker")
    assert "Failed to import the required Python library (docker)" in exc.value.args[0]["msg"]
    assert exc.value.args[0]["exception"] == "ImportError: No module named docker"
