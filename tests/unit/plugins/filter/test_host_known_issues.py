# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the host_known_issues filter: a node_facts result in, warnings shown, errors for the preflight to stop on.

Fails at 13f6075, which had no such filter (the import below fails).
"""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter import host_known_issues as plugin


def node(kernel, driver="580.95.05", dgx_os="7.2.3"):
    """What dgxspark.vllm.node_facts registers (the parts the filter reads)."""
    return {"changed": False, "gpus": {"rc": 0, "lines": [f"NVIDIA GB10, [N/A], {driver}, GPU-5d1c"]},
            "host": {"kernel": kernel, "driver": driver, "dgx_os": dgx_os,
                     "os": {"id": "ubuntu", "version_id": "24.04", "pretty_name": "Ubuntu 24.04.3 LTS"}}}


def test_a_stop_row_is_an_error_not_a_warning(monkeypatch):
    shown = []
    monkeypatch.setattr(plugin.display, "warning", shown.append)
    f = plugin.FilterModule().filters()["host_known_issues"]
    result = f(node("7.0.0-1019-nvidia"), nodes="2", transport="roce", ignore=[], host="spark-1")
    assert shown == []
    (error,) = result["errors"]
    assert error.startswith("spark-1: kernel 7.0.0-1019-nvidia breaks NCCL's memory registration over RoCE")
    assert "https://github.com/eugr/spark-vllm-docker/issues/392" in error and "(uname -r)" in error
    assert result["facts"] == {"kernel": "7.0.0-1019-nvidia", "driver": "580.95.05", "dgx_os": "7.2.3", "nodes": 2,
                               "transport": "roce"}


def test_a_warn_row_and_an_acknowledged_stop_row_are_shown_as_warnings(monkeypatch):
    shown = []
    monkeypatch.setattr(plugin.display, "warning", shown.append)
    f = plugin.FilterModule().filters()["host_known_issues"]
    result = f(node("6.17.0-1008-nvidia"), host="solo-1")
    assert result["errors"] == [] and len(shown) == 1
    assert shown[0].startswith("solo-1: kernel 6.17.0-1008-nvidia has documented kernel panics")
    assert "https://forums.developer.nvidia.com/t/366026" in shown[0]
    shown.clear()
    result = f(node("7.0.0-1019-nvidia"), nodes=2, transport="roce", ignore=["kernel-7.0.0-1019-nccl-roce-reg-mr"],
               host="spark-1")
    assert result["errors"] == [] and len(shown) == 1
    assert shown[0].endswith("ignored because preflight_known_issues_ignore lists kernel-7.0.0-1019-nccl-roce-reg-mr")


def test_a_good_node_gives_nothing(monkeypatch):
    shown = []
    monkeypatch.setattr(plugin.display, "warning", shown.append)
    f = plugin.FilterModule().filters()["host_known_issues"]
    result = f(node("6.17.0-1032-nvidia"), nodes=2, transport="roce", host="spark-1")
    assert (result["matches"], result["warnings"], result["errors"], shown) == ([], [], [], [])


def test_bad_input_is_a_filter_error():
    f = plugin.FilterModule().filters()["host_known_issues"]
    with pytest.raises(AnsibleFilterError, match="expects the result of dgxspark.vllm.node_facts"):
        f({"changed": False})
    with pytest.raises(AnsibleFilterError, match="unknown host known-issue ids"):
        f(node("6.17.0-1032-nvidia"), ignore=["nccl-two-copies"])
