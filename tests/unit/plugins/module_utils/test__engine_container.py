# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One engine container brought to its spec: the container module's options made from the definition, and the
outcome told in the collection's words, in check mode and out of it."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _engine_container as ec
from ansible_collections.dgxspark.vllm.plugins.module_utils._node_container import node_container

SPEC = node_container("dgxspark-ray-head", "vllm:1", ["head", "--node-ip", "192.168.100.11"], component="ray",
                      role="head", pair="pair1", env={"NCCL_NET": "IB"})
RUNNING = {"id": "c1", "running": True, "started_at": "2026-12-07T10:00:00.5Z"}


def test_the_options_are_the_definitions_with_the_fingerprint_the_nodes_image_and_strict_comparisons():
    args = ec.module_args(SPEC, image_id="sha256:" + "b" * 64, fingerprint="3f1c0a9b7d2e4f60", restart=False)
    assert args["image"] == "sha256:" + "b" * 64 and args["image_name_mismatch"] == "ignore"
    assert args["labels"] == dict(SPEC["labels"], **{"org.dgxspark.vllm.config": "3f1c0a9b7d2e4f60"})
    assert args["comparisons"] == {"labels": "strict", "env": "strict", "volumes": "strict"}
    assert (args["state"], args["restart"]) == ("started", False)
    assert "org.dgxspark.vllm.config" not in SPEC["labels"]  # the spec itself is left as it was
    # Without the node's image ID, the spec's image name.
    assert ec.module_args(SPEC, image_id="", fingerprint="ab12", restart=True)["image"] == "vllm:1"


@pytest.mark.parametrize("spec,fingerprint,match", [
    (dict(SPEC, privileged_mode=True), "ab12", "keys node_container does not make: privileged_mode"),
    ({k: v for k, v in SPEC.items() if k != "command"}, "ab12", "no command"),
    (["not", "a", "dict"], "ab12", "must be a dict"),
    (SPEC, "", "is not the cluster's fingerprint"),
    (SPEC, "ab 12; rm", "is not the cluster's fingerprint"),
])
def test_a_spec_the_definition_did_not_make_is_refused(spec, fingerprint, match):
    with pytest.raises(ec.SpecError, match=match):
        ec.module_args(spec, image_id="", fingerprint=fingerprint, restart=False)


def test_a_kept_container_is_answered_as_it_runs():
    assert ec.kept(RUNNING) == {"changed": False, "action": "keep", "started": False,
                                "container": {"Id": "c1", "State": {"Running": True,
                                                                    "StartedAt": "2026-12-07T10:00:00.5Z"}}}


def _ran(container_id, started_at, changed=True):
    return {"changed": changed, "container": {"Id": container_id, "State": {"Running": True, "StartedAt": started_at}}}


@pytest.mark.parametrize("before,result,expected", [
    (RUNNING, _ran("c1", RUNNING["started_at"], changed=False), ("keep", False)),
    ({}, _ran("c2", "2026-12-07T11:00:00Z"), ("create", True)),
    (RUNNING, _ran("c2", "2026-12-07T11:00:00Z"), ("recreate", True)),
    (RUNNING, _ran("c1", "2026-12-07T11:00:00Z"), ("restart", True)),
    (dict(RUNNING, running=False), _ran("c1", "2026-12-07T11:00:00Z"), ("start", True)),
    # Changed in place (the restart policy put back): the same process runs on, the workers keep their cluster.
    (RUNNING, _ran("c1", RUNNING["started_at"]), ("update", False)),
])
def test_the_outcome_out_of_check_mode_is_read_from_the_container_before_and_after(before, result, expected):
    assert ec.outcome(before, result, check_mode=False) == expected


@pytest.mark.parametrize("actions,expected", [
    ([{"removed": "c1"}, {"created": "Created container"}, {"started": None}], ("recreate", True)),
    ([{"created": "Created container"}, {"started": None}], ("create", True)),
    ([{"restarted": "c1"}], ("restart", True)),
    ([{"started": "c1"}], ("start", True)),
    ([{"updated": "c1"}], ("update", False)),
])
def test_the_outcome_in_check_mode_is_what_the_module_says_it_would_do(actions, expected):
    # In check mode the module answers the container as it is (nothing was done): only its actions tell.
    result = dict(_ran("c1", RUNNING["started_at"]), actions=actions)
    assert ec.outcome(RUNNING, result, check_mode=True) == expected
