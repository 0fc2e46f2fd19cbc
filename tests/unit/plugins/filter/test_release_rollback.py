# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollback target by image ID, the check that every node holds it, and the prune that keeps releases by ID
(plugins/filter/release_rollback*.py and release_prune.py over module_utils/_release.py)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter import release as release_filter
from ansible_collections.dgxspark.vllm.plugins.filter import release_prune, release_rollback, release_rollback_missing
from ansible_collections.dgxspark.vllm.plugins.module_utils import _release

F = {}
for _module in (release_filter, release_rollback, release_rollback_missing, release_prune):
    F.update(_module.FilterModule().filters())

OLD_ID = "sha256:" + "a1" * 32
NEW_ID = "sha256:" + "b2" * 32
OTHER_ID = "sha256:" + "c3" * 32
RECORD = {"image": "dgxspark/vllm-hybrid:overlay-9a0b", "image_id": OLD_ID, "model": "Qwen/Qwen3-30B-A3B",
          "model_revision": "", "served_model_name": "qwen3-30b-a3b", "backend": "ray",
          "settings": {"tensor_parallel_size": 2}, "endpoint": {}, "remedies": []}
MEMBERS = ["spark-3", "spark-4", "spark-5", "spark-6"]


def test_a_rollback_serves_the_records_image_by_id_not_by_its_tag():
    restore = F["release_rollback"](RECORD)
    assert restore["image"] == OLD_ID
    assert {k: v for k, v in restore.items() if k != "image"} == {k: v for k, v in RECORD.items() if k != "image"}
    assert RECORD["image"] == "dgxspark/vllm-hybrid:overlay-9a0b"  # the stored record is not changed


def test_a_short_id_gets_its_algorithm():
    assert F["release_rollback"](dict(RECORD, image_id="a1" * 32))["image"] == OLD_ID


@pytest.mark.parametrize("image_id", ["", None])
def test_a_record_without_id_of_0_1_0_keeps_its_name(image_id):
    record = dict(RECORD, image_id=image_id)
    assert F["release_rollback"](record)["image"] == RECORD["image"]
    del record["image_id"]
    assert F["release_rollback"](record)["image"] == RECORD["image"]


@pytest.mark.parametrize("record,match", [({}, "no release record"), (None, "no release record"),
                                          ({"model": "m"}, "has no image")])
def test_no_record_or_no_image_is_refused(record, match):
    with pytest.raises(AnsibleFilterError, match=match):
        F["release_rollback"](record)


def test_the_rollback_record_is_served_by_id_through_the_release_filter():
    values = {"vllm_serve_" + key: RECORD.get(key, "") for key in ("image", "model", "model_revision", "served_model_name", "backend")}
    values["vllm_serve_image"] = "dgxspark/vllm-hybrid:overlay-moved"
    settings = {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "max_model_len": 4096,
                "gpu_memory_utilization": 0.8, "kv_cache_dtype": "auto", "reasoning_parser": "",
                "speculative_config": {}, "enforce_eager": None, "enable_auto_tool_choice": False,
                "tool_call_parser": "", "trust_remote_code": False, "extra_args": []}
    args = [values["vllm_serve_" + k] for k in _release.RELEASE_KEYS] + [settings[k] for k in _release.SETTING_KEYS]
    target = F["release"](args, restore=F["release_rollback"](RECORD), host="spark-3")
    assert target["image"] == OLD_ID


def test_every_member_holding_the_image_stops_nothing():
    assert F["release_rollback_missing"](RECORD, present={h: True for h in MEMBERS}, members=MEMBERS,
                                         cluster="c1") == ""


def test_a_member_lacking_the_image_stops_the_rollout_naming_cluster_node_image_and_fix():
    present = {"spark-3": True, "spark-4": True, "spark-5": False}   # spark-6 did not answer
    msg = F["release_rollback_missing"](RECORD, present=present, members=MEMBERS, cluster="c1")
    assert msg.startswith(f"c1: the previous release's image {OLD_ID} (dgxspark/vllm-hybrid:overlay-9a0b) is not on"
                          " spark-5, spark-6,")
    assert "spark-3" not in msg and "spark-4" not in msg
    assert "Nothing was switched" in msg and "rollout_rollback=false" in msg


def test_a_record_without_id_is_checked_by_name():
    msg = F["release_rollback_missing"](dict(RECORD, image_id=""), present={}, members=MEMBERS[:2], cluster="p")
    assert msg.startswith("p: the previous release's image dgxspark/vllm-hybrid:overlay-9a0b is not on spark-3, spark-4,")


def test_the_missing_check_needs_a_mapping_and_a_list():
    with pytest.raises(AnsibleFilterError, match="present must be a dict"):
        F["release_rollback_missing"](RECORD, present=[], members=MEMBERS, cluster="c1")


LISTING = [
    f"dgxspark/vllm-hybrid:overlay-new {NEW_ID}",
    f"dgxspark/vllm-hybrid:overlay-new-alias {NEW_ID}",
    # The previous release's tag moved to another image; the previous image is only reachable by another tag.
    f"dgxspark/vllm-hybrid:overlay-9a0b {OTHER_ID}",
    f"dgxspark/vllm-hybrid:overlay-old-alias {OLD_ID}",
    f"dgxspark/vllm-hybrid:overlay-older {'sha256:' + 'd4' * 32}",
    f"dgxspark/vllm-hybrid:<none> {'sha256:' + 'e5' * 32}",
    "garbage",
]


def test_prune_keeps_the_new_release_by_name_and_the_previous_by_id():
    remove = F["release_prune"](LISTING, keep_names=["dgxspark/vllm-hybrid:overlay-new", RECORD["image"]],
                                keep_ids=[OLD_ID, ""])
    # The moved tag names the previous release: it stays too (a name kept is never removed).
    assert remove == ["dgxspark/vllm-hybrid:overlay-older"]


def test_prune_by_name_only_would_have_removed_the_previous_image():
    remove = F["release_prune"](LISTING, keep_names=["dgxspark/vllm-hybrid:overlay-new", RECORD["image"]])
    assert "dgxspark/vllm-hybrid:overlay-old-alias" in remove


def test_prune_matches_short_ids_of_the_listing():
    listing = [f"dgxspark/vllm-hybrid:a {OLD_ID[7:19]}", f"dgxspark/vllm-hybrid:b {NEW_ID[7:19]}"]
    assert F["release_prune"](listing, keep_ids=[OLD_ID]) == ["dgxspark/vllm-hybrid:b"]


def test_prune_never_removes_untagged_images_and_refuses_non_lists():
    assert F["release_prune"]([f"r:<none> {OLD_ID}"]) == []
    with pytest.raises(AnsibleFilterError, match="keep_ids must be a list"):
        F["release_prune"](LISTING, keep_ids="sha256:x")


# A mixed cluster (issue 15, 6): the head on a graph driver, a worker with the containerd image store. The one image
# has an ID on each; a rollback serves each member its own.
MIXED = dict(RECORD, image_ids={"spark-3": OLD_ID, "spark-4": OTHER_ID})


def test_each_member_of_a_mixed_cluster_rolls_back_to_its_own_id():
    assert F["release_rollback"](MIXED, host="spark-3")["image"] == OLD_ID
    assert F["release_rollback"](MIXED, host="spark-4")["image"] == OTHER_ID
    assert F["release_rollback"](MIXED, host="spark-5")["image"] == OLD_ID  # not listed: the head's ID
    assert F["release_rollback"](MIXED)["image"] == OLD_ID


def test_a_mixed_cluster_whose_members_hold_their_own_ids_stops_nothing_and_a_lacking_one_is_named_with_its_id():
    members = ["spark-3", "spark-4"]
    assert F["release_rollback_missing"](MIXED, present={"spark-3": True, "spark-4": True}, members=members,
                                         cluster="c1") == ""
    msg = F["release_rollback_missing"](MIXED, present={"spark-3": True}, members=members, cluster="c1")
    assert msg.startswith(f"c1: the previous release's image {OTHER_ID} (dgxspark/vllm-hybrid:overlay-9a0b) is not on"
                          " spark-4,")
    msg = F["release_rollback_missing"](MIXED, present={}, members=members, cluster="c1")
    assert f"spark-3: {OLD_ID}, spark-4: {OTHER_ID}" in msg


def test_the_prune_keeps_each_members_own_id_of_the_previous_release():
    listed = [f"dgxspark/vllm-hybrid:overlay-old {OTHER_ID}", f"dgxspark/vllm-hybrid:overlay-older {NEW_ID}"]
    remove = F["release_prune"](listed, keep_names=["dgxspark/vllm-hybrid:overlay-new"], keep_ids=[OLD_ID, OTHER_ID])
    assert remove == ["dgxspark/vllm-hybrid:overlay-older"]
