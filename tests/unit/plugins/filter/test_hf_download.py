# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the hf_download filter (the argv and environment the model_sync role runs)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.hf_download import FilterModule


def test_filter_renders_argv_and_environment():
    f = FilterModule().filters()["hf_download"]
    cmd = f("Qwen/Qwen3.5-122B-A10B-FP8", "/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8", token_file="/etc/dgxspark/hf/token")
    assert cmd == {"argv": ["/bin/sh", "-c", 'token=$1; shift; "$@"; rc=$?; rm -f -- "$token"; exit "$rc"',
                            "dgxspark-hf-download", "/etc/dgxspark/hf/token", "hf", "download", "Qwen/Qwen3.5-122B-A10B-FP8", "--local-dir",
                            "/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8"],
                   "environment": {"HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN_PATH": "/etc/dgxspark/hf/token"}}
    boxed = f("Qwen/X", "/srv/m/X", where="container", image="img:1", cli="huggingface-cli", token_file="")
    assert boxed["argv"][:9] == ["docker", "run", "--rm", "--network", "host", "--cap-drop", "ALL", "--entrypoint",
                                 "huggingface-cli"]
    assert not {"HF_TOKEN", "HF_TOKEN_PATH"} & set(boxed["environment"]) and "HF_TOKEN_PATH" not in boxed["argv"]
    with pytest.raises(TypeError):
        f("Qwen/X", "/srv/m/X", token="hf_x")  # the token itself is no longer taken: it would reach an environment
    with pytest.raises(AnsibleFilterError, match="hf_download: .*repository id"):
        f("$(id)", "/srv/m/X")
