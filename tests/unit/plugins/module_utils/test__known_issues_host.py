# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the known-bad host platforms (HOST_ISSUES) and their check against a node's facts.

Written against the collection at 13f6075, where these fail: _known_issues.py kept image/settings combinations
only (no HOST_ISSUES, no check_host), so the import below fails.
"""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils._known_issues import (
    HOST_ISSUES, SEVERITIES, check_host, release_tuple, validate_host_issue)

REG_MR, PANICS = "kernel-7.0.0-1019-nccl-roce-reg-mr", "kernel-6.17.0-1008-panics"

# What the sources document for each row (shared/notes/anchors-field.md, section f, row 48): the releases that broke,
# and the ones reported working (or simply other releases the row must leave alone).
DOCUMENTED = {
    REG_MR: {"bad": ["7.0.0-1019-nvidia"], "good": ["6.17.0-1032-nvidia", "6.17.0-1008-nvidia"],
             "source": "https://github.com/eugr/spark-vllm-docker/issues/392", "severity": "stop"},
    PANICS: {"bad": ["6.17.0-1008-nvidia"], "good": ["6.17.0-1032-nvidia", "7.0.0-1019-nvidia"],
             "source": "https://forums.developer.nvidia.com/t/366026", "severity": "warn"},
}


def facts(kernel="6.17.0-1032-nvidia", driver="580.95.05", dgx_os="7.2.3", nodes=2, transport="roce"):
    return {"kernel": kernel, "driver": driver, "dgx_os": dgx_os, "nodes": nodes, "transport": transport}


def test_every_row_is_well_formed_and_documented_here():
    assert len({issue["id"] for issue in HOST_ISSUES}) == len(HOST_ISSUES)
    assert sorted(issue["id"] for issue in HOST_ISSUES) == sorted(DOCUMENTED)
    for issue in HOST_ISSUES:
        validate_host_issue(issue)
        assert issue["source"] == DOCUMENTED[issue["id"]]["source"]
        assert issue["severity"] == DOCUMENTED[issue["id"]]["severity"] and issue["severity"] in SEVERITIES
        assert issue["advice"] and issue["summary"]


@pytest.mark.parametrize("issue_id", sorted(DOCUMENTED))
def test_each_row_matches_its_documented_bad_releases_and_not_the_others(issue_id):
    (issue,) = [i for i in HOST_ISSUES if i["id"] == issue_id]
    for kernel in DOCUMENTED[issue_id]["bad"]:
        result = check_host(facts(kernel=kernel), issues=[issue])
        assert [(m["id"], m["action"]) for m in result["matches"]] == [(issue_id, issue["severity"])], kernel
    for kernel in DOCUMENTED[issue_id]["good"]:
        assert check_host(facts(kernel=kernel), issues=[issue])["matches"] == [], kernel


def test_the_roce_kernel_stops_a_multinode_cluster_naming_host_fact_source_and_fix():
    result = check_host(facts(kernel="7.0.0-1019-nvidia"), host="spark-1")
    assert result["warnings"] == []
    (error,) = result["errors"]
    assert error.startswith("spark-1: kernel 7.0.0-1019-nvidia breaks NCCL's memory registration over RoCE")
    assert "(https://github.com/eugr/spark-vllm-docker/issues/392)" in error
    assert "this node has kernel 7.0.0-1019-nvidia (uname -r), 2 nodes serving together, roce transport" in error
    assert "Fix: boot the node into a kernel reported to work (6.17.0-1032-nvidia" in error
    assert f"list {REG_MR} in preflight_known_issues_ignore to go on anyway" in error
    (match,) = result["matches"]
    assert match == {"id": REG_MR, "summary": HOST_ISSUES[0]["summary"], "source": DOCUMENTED[REG_MR]["source"],
                     "because": "kernel 7.0.0-1019-nvidia (uname -r), 2 nodes serving together, roce transport on "
                                "the fabric", "severity": "stop", "action": "stop"}


@pytest.mark.parametrize("nodes,transport", [(1, "none"), (2, "socket"), (1, "roce")])
def test_the_roce_kernel_is_no_matter_without_nccl_over_roce_across_nodes(nodes, transport):
    result = check_host(facts(kernel="7.0.0-1019-nvidia", nodes=nodes, transport=transport))
    assert result == {"matches": [], "warnings": [], "errors": []}


def test_the_panicking_kernel_warns_even_on_a_single_spark():
    result = check_host(facts(kernel="6.17.0-1008-nvidia", nodes=1, transport="none"), host="solo-1")
    assert result["errors"] == []
    (warning,) = result["warnings"]
    assert warning.startswith("solo-1: kernel 6.17.0-1008-nvidia has documented kernel panics on DGX Spark "
                              "(https://forums.developer.nvidia.com/t/366026): this node has kernel "
                              "6.17.0-1008-nvidia (uname -r). Fix: ")
    assert f"list {PANICS} in preflight_known_issues_ignore to silence this warning" in warning
    assert [(m["id"], m["action"]) for m in result["matches"]] == [(PANICS, "warn")]


def test_an_acknowledged_row_is_a_warning_only_and_says_why():
    result = check_host(facts(kernel="7.0.0-1019-nvidia"), host="spark-2", ignore=[REG_MR])
    assert result["errors"] == []
    (warning,) = result["warnings"]
    assert warning.startswith("spark-2: kernel 7.0.0-1019-nvidia breaks")
    assert warning.endswith(f"; ignored because preflight_known_issues_ignore lists {REG_MR}")
    assert [(m["id"], m["severity"], m["action"]) for m in result["matches"]] == [(REG_MR, "stop", "ignored")]
    # the variable named is the caller's
    other = check_host(facts(kernel="7.0.0-1019-nvidia"), ignore=[REG_MR], ignore_variable="my_ignore")
    assert other["warnings"][0].endswith(f"; ignored because my_ignore lists {REG_MR}")


def test_an_unknown_id_in_the_ignore_list_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown host known-issue ids \['kernel-typo'\] in "
                                         r"preflight_known_issues_ignore; known: \['kernel-6"):
        check_host(facts(), ignore=["kernel-typo"])


# The driver and DGX OS conditions, on a table of the test's own (no driver or DGX OS release has documented
# breakage in the notes yet, so the shipped table has none).
TABLE = [
    {"id": "driver-range", "summary": "driver range", "source": "https://example.invalid/driver",
     "when": {"driver": {"min": "580.95", "below": "580.126"}}, "severity": "stop", "advice": "change the driver"},
    {"id": "dgx-os-exact", "summary": "DGX OS release", "source": "https://example.invalid/dgx",
     "when": {"dgx_os": {"is": ["7.4.0"]}, "nodes_min": 2}, "severity": "warn", "advice": "update DGX OS"},
    {"id": "kernel-from", "summary": "kernels from", "source": "https://example.invalid/kernel",
     "when": {"kernel": {"min": "6.17.0-1014"}}, "severity": "warn", "advice": "another kernel"},
]


@pytest.mark.parametrize("fact,value,expected", [
    ({"driver": "580.95.05"}, None, ["driver-range"]),
    ({"driver": "580.126.09"}, None, []),          # "below" is the first release without it
    ({"driver": "580.82.09"}, None, []),           # older than "min"
    ({"driver": ""}, None, []),                    # nvidia-smi failed: nothing is known, nothing matches
    ({"dgx_os": "7.4.0"}, None, ["dgx-os-exact"]),
    ({"dgx_os": "7.4.0", "nodes": 1}, None, []),
    ({"dgx_os": "7.4.1"}, None, []),
    ({"kernel": "6.17.0-1014-nvidia"}, None, ["kernel-from"]),
    ({"kernel": "7.0.0-31-generic"}, None, ["kernel-from"]),
    ({"kernel": "6.17.0-1013-nvidia"}, None, []),
    ({"kernel": "6.1.0-18-amd64"}, None, []),
])
def test_version_conditions(fact, value, expected):
    base = facts(driver="535.1", dgx_os="7.2.3", kernel="6.8.0-1-generic")
    result = check_host(dict(base, **fact), issues=TABLE)
    assert [m["id"] for m in result["matches"]] == expected
    assert len(result["errors"]) == expected.count("driver-range")


def test_the_reason_names_the_driver_and_dgx_os_where_they_were_read():
    result = check_host(facts(driver="580.95.05", dgx_os="7.4.0", kernel="6.8.0-1-generic"), issues=TABLE, host="h")
    assert [m["because"] for m in result["matches"]] == [
        "NVIDIA driver 580.95.05 (nvidia-smi)", "DGX OS 7.4.0 (/etc/dgx-release), 2 nodes serving together"]
    assert result["errors"] == ["h: driver range (https://example.invalid/driver): this node has NVIDIA driver "
                                "580.95.05 (nvidia-smi). Fix: change the driver (or list driver-range in "
                                "preflight_known_issues_ignore to go on anyway)"]


@pytest.mark.parametrize("bad,message", [
    ({"severity": "fatal"}, "severity must be one of"),
    ({"when": {"kernel_version": {"is": ["1"]}}}, "unknown host conditions"),
    ({"when": {}}, "unknown host conditions"),
    ({"when": {"kernel": {"max": "7"}}}, "the kernel condition has is, min and/or below"),
    ({"advice": "drop"}, r"missing \['advice'\]"),
])
def test_a_malformed_row_is_refused(bad, message):
    row = {key: value for key, value in dict(TABLE[0], **bad).items() if value != "drop"}
    with pytest.raises(ValueError, match=message):
        check_host(facts(), issues=[row])


def test_release_tuple():
    assert release_tuple("7.0.0-1019-nvidia") == (7, 0, 0, 1019)
    assert release_tuple("7.0.0-1019-nvidia-64k") == (7, 0, 0, 1019)
    assert release_tuple("580.95.05") == (580, 95, 5)
    assert release_tuple(" 7.2.3\n") == (7, 2, 3)
    assert release_tuple("") == () and release_tuple("unknown") == ()
