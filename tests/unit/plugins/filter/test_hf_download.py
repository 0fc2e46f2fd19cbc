# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the hf_download filter (the argv and environment the model_sync role runs)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.hf_download import FilterModule


def test_filter_renders_argv_and_environment():
    f = FilterModule().filters()["hf_download"]
    cmd = f("Qwen/Qwen3.5-122B-A10B-FP8", "/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8", token="hf_x")
    assert cmd == {"argv": ["hf", "download", "Qwen/Qwen3.5-122B-A10B-FP8", "--local-dir",
                            "/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8"],
                   "environment": {"HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN": "hf_x"}}
    boxed = f("Qwen/X", "/srv/m/X", where="container", image="img:1", cli="huggingface-cli", token="")
    assert boxed["argv"][:7] == ["docker", "run", "--rm", "--network", "host", "--entrypoint", "huggingface-cli"]
    assert "HF_TOKEN" not in boxed["environment"] and "HF_TOKEN" not in boxed["argv"]
    with pytest.raises(AnsibleFilterError, match="hf_download: .*repository id"):
        f("$(id)", "/srv/m/X")
