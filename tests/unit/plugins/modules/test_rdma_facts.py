# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of main() of the rdma_facts module, pointed at fixture sysfs trees."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import rdma_facts
from ansible_collections.dgxspark.vllm.tests.unit.plugins.module_utils import fabric_trees as trees

IP = "/usr/sbin/ip"
FACT_KEYS = ["env", "fabric_hcas", "fabric_interface", "fabric_ip", "fabric_mtu", "fabric_rails", "lan_interface", "lan_ip", "netdevs",
             "rdma_devices", "transport", "verbs_devices", "warnings"]


def run_main(capsys, tmp_path, layout, args=None, ip_result=None):
    """Run main() on a fixture tree; return (result dict, run_command mock, warn mock).

    ``AnsibleModule.warn`` is recorded rather than run: once controller code is
    imported in the test process (filter plugin tests), ansible-core sends module
    warnings to the controller's display instead of the result.
    """
    ip_json = trees.write_layout(tmp_path, layout)
    run_command = mock.Mock(return_value=ip_result or (0, ip_json, ""))
    warn = mock.Mock()
    with patch_module_args(args or {}), \
            mock.patch.object(rdma_facts, "_FS_ROOT", str(tmp_path)), \
            mock.patch.object(AnsibleModule, "get_bin_path", return_value=IP), \
            mock.patch.object(AnsibleModule, "run_command", run_command), \
            mock.patch.object(AnsibleModule, "warn", warn):
        with pytest.raises(SystemExit):
            rdma_facts.main()
    return json.loads(capsys.readouterr().out), run_command, warn


def test_spark_facts(capsys, tmp_path):
    result, run_command, warn = run_main(capsys, tmp_path, trees.spark_layout())
    run_command.assert_called_once_with([IP, "-j", "-4", "addr", "show"])
    assert result["changed"] is False
    assert "failed" not in result
    warn.assert_not_called()
    facts = result["ansible_facts"]["dgxspark_fabric"]
    assert sorted(facts) == FACT_KEYS
    for key in FACT_KEYS[:-1]:
        assert result[key] == facts[key], key
    assert facts["warnings"] == []
    assert (result["fabric_interface"], result["fabric_ip"], result["fabric_mtu"], result["transport"]) == (
        "enp1s0f1np1", "192.168.100.10", 9000, "roce")
    assert result["env"]["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert result["env"]["NCCL_IB_GID_INDEX"] == "3"
    assert result["env"]["RAY_OVERRIDE_NODE_IP_ADDRESS"] == "192.168.100.10"
    assert result["rdma_devices"]["rocep1s0f1"]["ports"][0]["roce_v2_gid_index"] == 3


def test_verbs_devices_are_listed_from_verbs_dir(capsys, tmp_path):
    verbs = tmp_path / "dev" / "infiniband"
    verbs.mkdir(parents=True)
    for name in ("uverbs1", "rdma_cm", "uverbs0"):
        (verbs / name).write_text("")
    result, _run, _warn = run_main(capsys, tmp_path, trees.spark_layout())
    assert result["verbs_devices"] == ["uverbs0", "uverbs1"]
    assert result["ansible_facts"]["dgxspark_fabric"]["verbs_devices"] == ["uverbs0", "uverbs1"]
    other = tmp_path / "other"
    other.mkdir()
    result, _run, _warn = run_main(capsys, other, trees.spark_layout(), args={"verbs_dir": "/dev/none"})
    assert result["verbs_devices"] == []


def test_check_mode_gives_the_same_facts(capsys, tmp_path):
    normal, _rc, _warn = run_main(capsys, tmp_path / "a", trees.spark_layout())
    checked, run_command, _warn = run_main(capsys, tmp_path / "b", trees.spark_layout(), {"_ansible_check_mode": True})
    run_command.assert_called_once_with([IP, "-j", "-4", "addr", "show"])
    assert checked["changed"] is False
    assert checked["ansible_facts"] == normal["ansible_facts"]


def test_override_and_options(capsys, tmp_path):
    result, _rc, _warn = run_main(capsys, tmp_path, trees.spark_layout(), {
        "interface": "enP2p1s0f1np1", "fabric_cidr": "192.168.101.0/24", "mtu": 9000, "require_rdma": True,
        "debug": True, "extra_env": {"NCCL_IB_TIMEOUT": 22},
    })
    env = result["env"]
    assert (result["fabric_interface"], result["fabric_ip"]) == ("enP2p1s0f1np1", "192.168.101.10")
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"], env["VLLM_HOST_IP"]) == (
        "enP2p1s0f1np1", "enP2p1s0f1np1", "192.168.101.10")
    assert (env["NCCL_DEBUG"], env["NCCL_IB_TIMEOUT"]) == ("INFO", "22")


def test_lab_fallback_warns(capsys, tmp_path):
    result, _rc, warn = run_main(capsys, tmp_path, trees.lab_layout())
    assert result["changed"] is False
    assert (result["transport"], result["fabric_interface"], result["fabric_ip"]) == ("socket", "enp1s0f1np1", "192.168.100.11")
    assert result["env"]["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" not in result["env"]
    expected = ("no usable RDMA device: /sys/class/infiniband does not exist (no RDMA driver or device). NCCL falls back to"
                " socket transport (NCCL_IB_DISABLE=1) over enp1s0f1np1 (192.168.100.11); expected in the GPU-free lab,"
                " on a DGX Spark check the CX7 link with ibdev2netdev")
    assert warn.call_args_list == [mock.call(expected)]
    assert result["ansible_facts"]["dgxspark_fabric"]["warnings"] == [expected]


def test_bad_override_fails_naming_it(capsys, tmp_path):
    result, _rc, _warn = run_main(capsys, tmp_path, trees.spark_layout(), {"interface": "eth7"})
    assert result["failed"] is True
    assert result["msg"].startswith("rdma_facts: fabric interface 'eth7' (option interface) does not exist on this node;"
                                    " candidates: enp1s0f1np1 (192.168.100.10/24; up, RoCE rocep1s0f1); enP2p1s0f1np1")
    assert "ansible_facts" not in result


def test_require_rdma_fails_in_the_lab(capsys, tmp_path):
    result, _rc, _warn = run_main(capsys, tmp_path, trees.lab_layout(), {"require_rdma": True})
    assert result["failed"] is True
    assert result["msg"] == ("rdma_facts: RDMA is required (require_rdma=true) but no RoCE port can be used:"
                             " /sys/class/infiniband does not exist (no RDMA driver or device)")


def test_ip_command_failure(capsys, tmp_path):
    result, _rc, _warn = run_main(capsys, tmp_path, trees.spark_layout(), ip_result=(255, "", "Option \"-j\" is unknown\n"))
    assert result["failed"] is True
    assert result["msg"] == "'/usr/sbin/ip -j -4 addr show' failed with rc=255: Option \"-j\" is unknown"
    assert result["rc"] == 255


def test_bad_option_type_is_rejected(capsys, tmp_path):
    result, _rc, _warn = run_main(capsys, tmp_path, trees.spark_layout(), {"mtu": "jumbo"})
    assert result["failed"] is True
    assert "mtu" in result["msg"]
