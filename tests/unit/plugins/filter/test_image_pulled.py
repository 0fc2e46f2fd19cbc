# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node's pull of dgxspark_image left, and the release's record of it (issue 33, 2: images come from a
registry). At 13f6075 nothing pulled dgxspark_image and the release named only the serving image: these fail there
(no image_pulled filter, no _image_pull, and release_record took no source)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter import image_pulled, release_record
from ansible_collections.dgxspark.vllm.plugins.module_utils import _image_pull, _release

PULLED = image_pulled.FilterModule().filters()["image_pulled"]
RECORD = release_record.FilterModule().filters()["release_record"]
ID = "sha256:" + "a1" * 32
DIGEST = "sha256:" + "b2" * 32
OTHER = "sha256:" + "c3" * 32
REGISTRY = "192.168.240.8:5000"


def inspected(*repo_digests, image_id=ID):
    return {"Id": image_id, "RepoTags": [], "RepoDigests": list(repo_digests)}


def test_an_image_pulled_by_tag_from_a_registry_with_a_port_is_recorded_by_its_digest():
    ref = f"{REGISTRY}/lab/vllm-qwen35:0.17"
    got = PULLED(inspected(f"{REGISTRY}/lab/vllm-qwen35@{DIGEST}", f"{REGISTRY}/lab/other@{OTHER}"), reference=ref,
                 changed=True, host="spark-1")
    assert got == {"image": ref, "id": ID, "digest": f"{REGISTRY}/lab/vllm-qwen35@{DIGEST}", "pulled": True,
                   "policy": "missing"}


def test_a_reference_pinned_by_digest_is_its_own_digest():
    ref = f"{REGISTRY}/lab/vllm-qwen35@{DIGEST}"
    got = PULLED(inspected(f"{REGISTRY}/lab/vllm-qwen35@{DIGEST}"), reference=ref, policy="always")
    assert got["digest"] == ref and got["pulled"] is False and got["policy"] == "always"


def test_a_docker_hub_image_is_matched_in_its_familiar_name():
    got = PULLED(inspected(f"hellohal2064/vllm-qwen3.5-gb10@{DIGEST}"),
                 reference="docker.io/hellohal2064/vllm-qwen3.5-gb10:latest")
    assert got["digest"] == f"hellohal2064/vllm-qwen3.5-gb10@{DIGEST}"
    assert _image_pull.familiar("docker.io/library/ubuntu") == "ubuntu"


def test_an_image_built_or_loaded_on_the_node_has_no_digest():
    got = PULLED(inspected(), reference="lab/vllm-qwen35:0.17")
    assert got["digest"] == "" and got["id"] == ID


def test_never_with_the_image_absent_stops_naming_the_node_the_variable_and_the_fix():
    with pytest.raises(AnsibleFilterError) as error:
        PULLED({}, reference=f"{REGISTRY}/lab/vllm-qwen35:0.17", policy="never", host="spark-1")
    text = str(error.value)
    assert text.startswith(f"spark-1: the image {REGISTRY}/lab/vllm-qwen35:0.17 (dgxspark_image) is not on this node")
    assert "dgxspark_image_pull is never" in text and "dgxspark_image_pull: missing" in text


def test_check_mode_would_pull_an_absent_image_and_records_no_id():
    got = PULLED({}, reference="lab/vllm-qwen35:0.17", changed=True)
    assert got == {"image": "lab/vllm-qwen35:0.17", "id": "", "digest": "", "pulled": True, "policy": "missing"}


@pytest.mark.parametrize("policy", ["sometimes", "", "yes"])
def test_a_policy_other_than_missing_always_never_is_refused(policy):
    with pytest.raises(AnsibleFilterError, match="dgxspark_image_pull must be one of missing, always, never"):
        PULLED(inspected(), reference="lab/x:1", policy=policy, host="spark-1")


def test_split_reference_keeps_a_registry_port_apart_from_a_tag():
    assert _image_pull.split_reference(f"{REGISTRY}/lab/x") == (f"{REGISTRY}/lab/x", "", "")
    assert _image_pull.split_reference(f"{REGISTRY}/lab/x:1@{DIGEST}") == (f"{REGISTRY}/lab/x", "1", DIGEST)


WANTED = {"image": "dgxspark/vllm-hybrid:overlay-9a0b", "model": "Qwen/Qwen3-30B-A3B", "model_revision": "",
          "served_model_name": "qwen3-30b-a3b", "backend": "mp",
          "settings": {"tensor_parallel_size": 2, "enforce_eager": False}}


def test_the_release_records_the_source_image_the_head_pulled_by_digest():
    source = {"image": f"{REGISTRY}/lab/vllm-qwen35:0.17", "id": ID, "digest": f"{REGISTRY}/lab/vllm-qwen35@{DIGEST}",
              "pulled": True, "policy": "missing"}
    record = RECORD(WANTED, source=source, host="spark-1")
    assert record["source"] == {"image": source["image"], "id": ID, "digest": source["digest"]}
    # Not a difference between releases: the serving image's own name says what changed.
    assert _release.compare(record, dict(record, source={}))["same"]
    assert RECORD(WANTED)["source"] == {}


def test_a_malformed_source_digest_is_refused_naming_the_host():
    with pytest.raises(AnsibleFilterError, match="spark-1: release_record: source: the digest must be"):
        RECORD(WANTED, source={"image": "x:1", "digest": "x@sha256:nothex"}, host="spark-1")
