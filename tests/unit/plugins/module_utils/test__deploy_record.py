# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the deploy record: what it captures of a node, and what a later read finds different."""

from __future__ import annotations

import os

from docker.errors import NotFound

from ansible_collections.dgxspark.vllm.plugins.module_utils import _deploy_record as rec

LABEL = "org.dgxspark.vllm.component"


def attrs(name, running=True, image="sha256:" + "a" * 64, env=("A=1",), restart="unless-stopped", ident=None):
    return {"Id": ident or name + "-id", "Name": "/" + name, "Image": image,
            "State": {"Running": running, "Paused": False, "StartedAt": "2026-12-05T07:00:00Z"},
            "Config": {"Labels": {LABEL: "ray"}, "Env": list(env)},
            "HostConfig": {"RestartPolicy": {"Name": restart}}}


class FakeAPI:
    def __init__(self, containers=(), images=None):
        self.by_id = {c["Id"]: c for c in containers}
        self.images = images or {}

    def containers(self, all=False, filters=None):  # noqa: A002 - the SDK's own argument name
        assert all is True and filters == {"label": LABEL}
        return [{"Id": i} for i in self.by_id]

    def inspect_container(self, ident):
        if ident not in self.by_id:
            raise NotFound("gone")
        return self.by_id[ident]

    def inspect_image(self, ref):
        if ref not in self.images:
            raise NotFound("no such image")
        return {"Id": self.images[ref]}


class FakeClient:
    def __init__(self, api):
        self.api = api


def tree(tmp_path):
    etc = tmp_path / "etc"
    (etc / "vllm").mkdir(parents=True)
    (etc / "vllm" / "serve.env").write_text("VLLM_API_KEY=k\n")
    (etc / "vllm" / "serve.env").chmod(0o600)
    state = tmp_path / "state"
    (state / "watchdog").mkdir(parents=True)
    (state / "watchdog" / "events.jsonl").write_text("{}\n")
    return str(etc), str(state)


def test_files_are_recorded_by_content_mode_and_owner_and_excluded_paths_are_left_out(tmp_path):
    etc, state = tree(tmp_path)
    exclude = [state + "/watchdog/events.jsonl"]
    files = rec.capture_files([etc, state], [str(tmp_path / "authorized_keys")], exclude)
    env = files[etc + "/vllm/serve.env"]
    assert env[0] == "file" and env[1] == 0o600 and len(env[4]) == 64
    assert files[etc + "/vllm"][0] == "dir"
    assert state + "/watchdog/events.jsonl" not in files and state + "/watchdog" in files
    assert files[str(tmp_path / "authorized_keys")] is None  # asked for and missing: recorded as missing
    assert rec.capture_files([str(tmp_path / "nowhere")], [], []) == {str(tmp_path / "nowhere"): None}


def test_every_kind_of_file_change_is_a_difference_named_by_path(tmp_path):
    etc, state = tree(tmp_path)
    capture = {"files": rec.capture_files([etc], [], []), "containers": {}, "images": {}, "stats": {}}
    recorded = {"version": rec.VERSION, "inputs": "i", "state": capture}
    assert rec.differences(recorded, "i", capture) == []
    env = etc + "/vllm/serve.env"
    with open(env, "a", encoding="utf-8") as f:
        f.write("EXTRA=1\n")
    now = dict(capture, files=rec.capture_files([etc], [], []))
    assert rec.differences(recorded, "i", now) == [f"file {env}: content changed"]
    os.chmod(env, 0o644)
    with open(env, "w", encoding="utf-8") as f:
        f.write("VLLM_API_KEY=k\n")
    now = dict(capture, files=rec.capture_files([etc], [], []))
    assert rec.differences(recorded, "i", now) == [f"file {env}: mode or owner changed"]
    os.unlink(env)
    (tmp_path / "etc" / "new").write_text("x")
    now = dict(capture, files=rec.capture_files([etc], [], []))
    assert rec.differences(recorded, "i", now) == [f"file {etc}/new: new", f"file {env}: missing"]


def test_the_watchdogs_maintenance_marker_is_a_difference_its_events_are_not(tmp_path):
    etc, state = tree(tmp_path)
    exclude = [state + "/watchdog/events.jsonl"]
    capture = {"files": rec.capture_files([state], [], exclude)}
    recorded = {"version": rec.VERSION, "inputs": "i", "state": capture}
    (tmp_path / "state" / "watchdog" / "events.jsonl").write_text("{}\n{}\n")
    assert rec.differences(recorded, "i", {"files": rec.capture_files([state], [], exclude)}) == []
    (tmp_path / "state" / "watchdog" / "maintenance").write_text("{}")
    assert rec.differences(recorded, "i", {"files": rec.capture_files([state], [], exclude)}) == [
        f"file {state}/watchdog/maintenance: new"]


def test_containers_are_compared_by_id_state_image_and_configuration():
    head = attrs("dgxspark-ray-head")
    before = rec.capture_containers(FakeClient(FakeAPI([head])), LABEL, NotFound)
    recorded = {"version": rec.VERSION, "inputs": "i", "state": {"containers": before}}

    def diff(*containers):
        return rec.differences(recorded, "i", {"containers": rec.capture_containers(FakeClient(FakeAPI(containers)), LABEL, NotFound)})

    assert diff(attrs("dgxspark-ray-head")) == []
    # A restart by Docker's policy or the watchdog (same container, a new start time) is a difference: a Ray head
    # restarted after its workers answers a completion only once they joined again, which the whole deploy checks.
    restarted = attrs("dgxspark-ray-head")
    restarted["State"]["StartedAt"] = "2026-12-05T08:00:00Z"
    assert diff(restarted) == ["container dgxspark-ray-head: restarted since the last deploy "
                               "(started 2026-12-05T08:00:00Z, was 2026-12-05T07:00:00Z)"]
    assert diff(attrs("dgxspark-ray-head", running=False)) == ["container dgxspark-ray-head: not running"]
    assert diff(attrs("dgxspark-ray-head", ident="other")) == ["container dgxspark-ray-head: recreated"]
    assert diff(attrs("dgxspark-ray-head", restart="no")) == ["container dgxspark-ray-head: configuration changed"]
    assert diff() == ["container dgxspark-ray-head: missing"]
    assert diff(head, attrs("dgxspark-vllm")) == ["container dgxspark-vllm: new"]
    paused = attrs("dgxspark-ray-head")
    paused["State"]["Paused"] = True
    assert diff(paused) == ["container dgxspark-ray-head: not running"]


def test_a_container_removed_between_list_and_inspection_is_not_there():
    api = FakeAPI([attrs("a")])
    api.by_id = {"a-id": attrs("a")}
    original = api.inspect_container

    def vanish(ident):
        raise NotFound("gone")

    api.inspect_container = vanish
    assert rec.capture_containers(FakeClient(api), LABEL, NotFound) == {}
    api.inspect_container = original
    assert list(rec.capture_containers(FakeClient(api), LABEL, NotFound)) == ["a"]


def test_images_are_compared_by_id_and_the_records_images_are_always_read():
    api = FakeAPI(images={"src:1": "sha256:" + "1" * 64, "hybrid:x": "sha256:" + "2" * 64})
    recorded_images = rec.capture_images(FakeClient(api), ["src:1", "hybrid:x"], NotFound)
    recorded = {"version": rec.VERSION, "inputs": "i", "state": {"images": recorded_images}}
    # The read asks only for the source; the record's served image is read too.
    assert rec.image_refs(["src:1"], recorded) == ["hybrid:x", "src:1"]
    api.images["src:1"] = "sha256:" + "3" * 64
    del api.images["hybrid:x"]
    now = {"images": rec.capture_images(FakeClient(api), rec.image_refs(["src:1"], recorded), NotFound)}
    assert rec.differences(recorded, "i", now) == ["image hybrid:x: missing",
                                                   f"image src:1: now sha256:{'3' * 12} (was sha256:{'1' * 12})"]


def test_model_files_are_compared_by_size_and_time_without_reading_them(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model-00001.safetensors").write_bytes(b"x" * 10)
    before = rec.capture_stats([str(model), str(tmp_path / "absent")])
    assert before[str(tmp_path / "absent")] is None and set(before[str(model)]) == {"config.json", "model-00001.safetensors"}
    recorded = {"version": rec.VERSION, "inputs": "i", "state": {"stats": before}}
    (model / "model-00001.safetensors").write_bytes(b"x" * 11)
    now = {"stats": rec.capture_stats([str(model), str(tmp_path / "absent")])}
    assert rec.differences(recorded, "i", now) == [f"model directory {model}: 1 file(s) differ (model-00001.safetensors)"]


def test_no_record_another_version_or_other_inputs_send_the_node_through_the_deploy():
    assert rec.differences(None, "i", {}) == ["no record of an earlier deploy on this node"]
    assert rec.differences({"version": 0}, "i", {}) == [f"the record is of version 0 (this collection writes {rec.VERSION})"]
    assert rec.differences({"version": rec.VERSION, "inputs": "old", "state": {}}, "new", {}) == [
        "the deploy's inputs changed (the inventory, -e, a secret, the fleet or the collection)"]


def test_differences_are_bounded():
    recorded = {"version": rec.VERSION, "inputs": "i", "state": {"files": {f"/f{i}": None for i in range(20)}}}
    found = rec.differences(recorded, "i", {"files": {f"/f{i}": ["file", 0o600, 0, 0, "x"] for i in range(20)}})
    assert len(found) == rec.MAX_DIFFERENCES + 1 and found[-1] == f"and {20 - rec.MAX_DIFFERENCES} more"


def test_the_record_round_trips_and_anything_unreadable_is_no_record():
    text = rec.render("i", {"files": {}}, {"release": {"image": "x"}})
    assert rec.parse(text) == {"version": rec.VERSION, "inputs": "i", "state": {"files": {}}, "result": {"release": {"image": "x"}}}
    assert rec.render("i", {"files": {}}, {}) == rec.render("i", {"files": {}}, {})  # the same node, the same bytes
    assert rec.parse(None) is None and rec.parse(b"{not json") is None and rec.parse(b"[1]") is None
