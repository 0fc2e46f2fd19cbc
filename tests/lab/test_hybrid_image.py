"""The hybrid_image role on a lab node, through playbooks/build_hybrid_image.yml.

The field's graft (lab vLLM 0.14 + 0.17's Qwen3.5 files) is refused by the inspection gate with the real ImportError,
its transformers>=5 variant by the pip check gate, and neither leaves a tag; the overlay of the 0.17 image passes every
gate with Ray and the launcher; a rerun builds nothing and changes nothing.

Lab nodes have no route to a package index, so the pip installs use wheelhouses: downloaded once on this machine
(cached in ~/.cache/dgxspark-lab/wheels) and copied into node 1 (hybrid_image_pip_wheelhouse is a build-host path).
"""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _launcher
from labkit import BIN, INVENTORY, LAB, REPO, ansible_env, node, node_exec, run, wheelhouse

OLD, NEW = "lab/vllm-node:0.14", "lab/vllm-qwen35:0.17"
NODE = node(1)
REPOSITORY = "dgxspark-test/hybrid"
ALIAS = f"{REPOSITORY}:latest"
QWEN35 = ["Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"]
LAUNCHER_VERSION = _launcher.LAUNCHER_VERSION
ENTRYPOINT = ["python3", "/opt/dgxspark/bin/dgxspark-launch"]
BUILD_DIR = "/var/tmp/dgxspark-test-hybrid"
COMMON = ["-e", f"hybrid_image_repository={REPOSITORY}", "-e", f"hybrid_image_tag={ALIAS}",
          "-e", f"hybrid_image_build_dir={BUILD_DIR}"]
SOURCE = ["-e", f"hybrid_image_source={NEW}"]
GRAFT = ["-e", "hybrid_image_strategy=graft", "-e", f"hybrid_image_base={OLD}"]


def build(*args, source=tuple(SOURCE)):
    """Run the playbook on node 1; returns (returncode, recap stats of node 1, host results by task name, stdout)."""
    proc = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / "build_hybrid_image.yml"),
                "-l", NODE, *COMMON, *source, *args], check=False,
               env=ansible_env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"))
    out = json.loads(proc.stdout)
    results = [(task["task"]["name"], task["hosts"][NODE]) for play in out["plays"] for task in play["tasks"]
               if NODE in task["hosts"]]
    return proc.returncode, out["stats"][NODE], results, proc.stdout


def task(results, name):
    """The results of the tasks called NAME (role tasks are reported as "<role> : NAME")."""
    return [res for task_name, res in results if task_name == name or task_name.endswith(f" : {name}")]


def failure(results):
    """The message of the task that failed last."""
    failed = [res for _name, res in results if res.get("failed")]
    assert failed, "no task failed"
    return failed[-1]["msg"]


def shown(results):
    return task(results, "Show the result")[0]["msg"]


def tags():
    """repository:tag -> image ID of the test repository's tags on node 1."""
    lines = node_exec(NODE, "docker", "images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}",
                      REPOSITORY).stdout.split()
    return dict(zip(lines[0::2], lines[1::2]))


def image_ids():
    return set(node_exec(NODE, "docker", "images", "-a", "-q", "--no-trunc").stdout.split())


def image_info(image):
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), NODE, "-m", "dgxspark.vllm.vllm_image_info",
                "-a", json.dumps({"image": image, "architectures": QWEN35})],
               env=ansible_env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"))
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][NODE]


@pytest.fixture(scope="module")
def loaded(lab):
    run([*LAB, "images", "vllm-node-0.14", "vllm-qwen35-0.17"])
    run([*LAB, "load", OLD, NEW])
    # Start from no image of the test repository, so that the first overlay run must build.
    for tag in tags():
        node_exec(NODE, "docker", "image", "rm", tag)
    return lab


def test_field_graft_is_refused_by_the_inspection_gate(loaded):
    before = tags()
    rc, stats, results, stdout = build(*GRAFT)
    assert rc == 2 and stats["failures"] == 1, stdout[-3000:]
    msg = failure(results)
    assert "Gate (a) pip_check: passed" in msg, msg
    assert "Gate (c) entrypoint: passed" in msg, msg
    for arch in QWEN35:
        assert (f"{arch} (vllm.model_executor.models.qwen3_5.{arch}): ImportError: cannot import name 'MambaStateCopyFunc' "
                "from 'vllm.model_executor.layers.mamba.mamba_utils'") in msg, msg
    # The registry and configs were patched (by registry_patch, on files read out of the base) before the build.
    registry, = task(results, "Add the architectures to the base's registry")
    configs, = task(results, "Add the config classes to the base's configs package")
    assert [entry["architecture"] for entry in registry["added"]] == QWEN35
    assert sorted(entry["class_name"] for entry in configs["added"]) == [
        "Qwen3_5Config", "Qwen3_5MoeConfig", "Qwen3_5MoeTextConfig", "Qwen3_5TextConfig"]
    assert tags() == before  # no tag of the refused image, the alias untouched
    assert not [line for line in node_exec(NODE, "docker", "ps", "-a", "--format", "{{.Names}}").stdout.split()
                if line.startswith(("dgxspark-hybrid-gate-", "dgxspark-hybrid-read-"))]


def test_transformers_5_over_the_pin_is_refused_by_the_pip_check_gate(loaded):
    wheels = wheelhouse("transformers>=5")
    before = tags()
    rc, stats, results, stdout = build(*GRAFT, "-e", json.dumps({"hybrid_image_pip_install": ["transformers>=5"]}),
                                       "-e", f"hybrid_image_pip_wheelhouse={wheels}")
    assert rc == 2 and stats["failures"] == 1, stdout[-3000:]
    msg = failure(results)
    assert re.search(r"Gate \(a\) pip_check: FAILED - 1 conflict\(s\) not accepted: vllm 0\.14\.1 has requirement "
                     r"transformers<5,>=4\.56\.0, but you have transformers 5\.[0-9.]+\. "
                     r"\(conflicting requirement\(s\): transformers<5,>=4\.56\.0\)", msg), msg
    assert tags() == before


@pytest.fixture(scope="module")
def overlay(loaded):
    # The wheels of the collection's Ray lock: the role installs them with --require-hashes.
    wheels = wheelhouse(lock=REPO / "roles" / "hybrid_image" / "files" / "ray-2.54.1.txt")
    args = ("-e", f"hybrid_image_pip_wheelhouse={wheels}", "-e", f"hybrid_image_pip_cert={REPO / 'lab' / 'host-ca.crt'}")
    return args, build(*args)


def test_overlay_passes_every_gate(overlay):
    _args, (rc, stats, results, stdout) = overlay
    assert rc == 0 and stats["failures"] == 0, stdout[-3000:]
    lines = shown(results)
    tag = re.fullmatch(rf"image: ({re.escape(REPOSITORY)}:overlay-[0-9a-f]{{12}}) \((sha256:[0-9a-f]{{64}})\), alias {ALIAS}",
                       lines[0])
    assert tag, lines
    assert lines[1] == f"strategy overlay from {NEW}: built now", lines
    assert lines[-1] == "gates: (a) pip_check passed, (b) inspection passed, (c) entrypoint passed", lines
    assert tags() == {tag.group(1): tag.group(2), ALIAS: tag.group(2)}  # no candidate tag left
    info = image_info(tag.group(1))
    assert info["id"] == tag.group(2)
    assert info["versions"]["vllm"] == "0.17.1" and info["versions"]["transformers"] == "4.57.3"
    assert (info["ray_present"], info["versions"]["ray"]) == (True, "2.54.1")
    assert info["entrypoint"] == ENTRYPOINT and info["cmd"] == ["version"]
    assert info["missing_architectures"] == []
    assert node_exec(NODE, "docker", "run", "--rm", "--network", "none", tag.group(1), "version").stdout.strip() == LAUNCHER_VERSION
    assert node_exec(NODE, "test", "-e", BUILD_DIR + "/" + tag.group(1).rsplit(":", 1)[1], check=False).returncode == 1


def test_second_overlay_run_builds_nothing(overlay):
    args, (rc, _stats, results, stdout) = overlay
    assert rc == 0, stdout[-3000:]
    before_tags, before_ids = tags(), image_ids()
    # The image under its deprecated 0.1.0 name: the role warns, takes it, and finds the same verified tag.
    rc, stats, results, stdout = build(*args, source=("-e", f"hybrid_image_donor={NEW}"))
    assert rc == 0 and stats["changed"] == 0 and stats["failures"] == 0, stdout[-3000:]
    warned, = task(results, "Warn that hybrid_image_donor is deprecated")
    assert "WARNING hybrid_image_donor is deprecated" in warned["msg"] and "hybrid_image_source" in warned["msg"]
    lines = shown(results)
    assert lines[1] == f"strategy overlay from {NEW}: already built and verified, nothing rebuilt", lines
    assert [res.get("skipped") for res in task(results, "Build and verify the image")] == [True]
    assert tags() == before_tags  # same tags on the same image IDs
    assert image_ids() == before_ids  # and no new image or layer


def test_a_tag_that_holds_another_image_is_built_and_verified_again(overlay):
    """0.1.0 took "the tag exists" for "verified": anything tagged under the content tag (a transfer that moved it, a
    hand-made image) was served. The role now reuses the tag only when it holds the ID it recorded after the gates."""
    args, (rc, _stats, results, stdout) = overlay
    assert rc == 0, stdout[-3000:]
    content = next(name for name in tags() if ":overlay-" in name)
    verified = tags()[content]
    record = json.loads(node_exec(NODE, "cat", "/var/lib/dgxspark/verified-images.json").stdout)
    assert record[content] == verified
    assert node_exec(NODE, "stat", "-c", "%a", "/var/lib/dgxspark/verified-images.json").stdout.strip() == "600"
    node_exec(NODE, "docker", "tag", OLD, content)  # something else under the verified tag
    rc, stats, results, stdout = build(*args)
    assert rc == 0 and stats["failures"] == 0, stdout[-3000:]
    warned, = task(results, "Warn that the tag holds an image this role did not verify")
    assert f"{content} is {image_info(OLD)['id']}" in warned["msg"] and "building and verifying it again" in warned["msg"]
    assert shown(results)[-1] == "gates: (a) pip_check passed, (b) inspection passed, (c) entrypoint passed"
    assert tags()[content] == verified  # the same build (Docker's cache), verified again and tagged back
    again, stats, _results, stdout = build(*args)
    assert again == 0 and stats["changed"] == 0, stdout[-3000:]
