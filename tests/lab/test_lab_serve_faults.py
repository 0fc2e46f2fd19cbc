"""vllm_serve failures on the lab: each is reported with the right category, fast, from the whole log."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from labkit import BIN, INVENTORY, LAB, REPO, ansible_env, node, node_exec, run, wheelhouse
from labkit import ENGINES

# It starts Ray clusters: the engines' worker (labkit.ENGINES).
pytestmark = [ENGINES, pytest.mark.lab_minutes(3)]

SERVE = str(REPO / "tests" / "lab" / "playbooks" / "serve.yml")


def serve(*args, inventory_extra=None):
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY)]
    if inventory_extra:
        argv += ["-i", str(inventory_extra)]
    return run([*argv, SERVE, *args], check=False, env=ansible_env(), timeout=900)


def flat(proc):
    return " ".join(proc.stdout.split())


@pytest.fixture(scope="module")
def serving_lab(lab):
    run([*LAB, "images", "vllm-node-0.14"])
    run([*LAB, "load", "lab/vllm-node:0.14"])
    run([*LAB, "models"])
    yield lab
    serve("-e", "vllm_serve_state=absent")


def test_unsupported_architecture_is_diagnosed_seconds_after_the_engine_dies(serving_lab):
    # The legacy 0.14 image has Ray but no Qwen3.5: the engine dies at model resolution.
    started = time.monotonic()
    proc = serve("-e", "dgxspark_image=lab/vllm-node:0.14", "-e", "dgxspark_model=Qwen/Qwen3.5-122B-A10B-FP8")
    assert proc.returncode != 0
    text = flat(proc)
    # Real transformers 4.57 in the image refuses the model type before vLLM's registry is asked.
    assert "pair1: not serving: architecture not supported by this image:" in text, text[-4000:]
    assert "qwen3_5_moe" in text or "Qwen3_5MoeForConditionalGeneration" in text
    assert "exited" in text or "restarted" in text  # the probe stopped on the container, not on its deadline
    assert time.monotonic() - started < 600  # bounded; the whole play (Ray start-up included) on a loaded machine


@pytest.mark.slow  # the graft refused before it serves: test_hybrid_image's gate test; a death diagnosed: the test above
def test_field_graft_deployed_without_gates_is_diagnosed_within_10s_of_the_engine_death(serving_lab, tmp_path):
    # The field's hybrid: the legacy image (Ray, vLLM 0.14) with 0.17's Qwen3.5 files copied in and transformers 5
    # installed over its pin, built with the gates switched off and deployed by the real pipeline. The engine dies at model inspection (ImportError);
    # the failed task must carry the category and the ImportError within 10 s of the engine container's death.
    run([*LAB, "images", "vllm-qwen35-0.17"])
    run([*LAB, "load", "lab/vllm-qwen35:0.17"])
    wheels = wheelhouse("transformers>=5")
    serve("-e", "vllm_serve_state=absent")
    for i in (1, 2):  # built from scratch: the warning of an unverified build is part of what is checked
        tags = node_exec(node(i), "docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}",
                         "dgxspark/vllm-field-graft").stdout.split()
        if tags:
            node_exec(node(i), "docker", "image", "rm", *tags)
    since = int(time.time())
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / "deploy_qwen35.yml"),
            "-e", "dgxspark_image=lab/vllm-qwen35:0.17", "-e", "hybrid_image_strategy=graft",
            "-e", "hybrid_image_base=lab/vllm-node:0.14", "-e", "hybrid_image_verify=false",
            "-e", "hybrid_image_repository=dgxspark/vllm-field-graft", "-e", '{"hybrid_image_tag": ""}',
            "-e", json.dumps({"hybrid_image_pip_install": ["transformers>=5"]}), "-e", f"hybrid_image_pip_wheelhouse={wheels}"]
    lines, stamped, seen_at = [], [], None
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(ansible_env(), PYTHONUNBUFFERED="1")) as proc:
        for line in proc.stdout:
            lines.append(line)
            stamped.append(f"{time.time():.1f} {line}")
            if seen_at is None and "not serving: architecture failed inspection" in line:
                seen_at = time.time()
        proc.wait(timeout=900)
    text = " ".join("".join(lines).split())
    assert proc.returncode != 0
    assert "WARNING hybrid_image_verify is false" in text, text[-3000:]
    assert seen_at is not None, text[-4000:]
    assert "pair1: not serving: architecture failed inspection" in text
    assert "ImportError: cannot import name 'MambaStateCopyFunc'" in text, text[-4000:]
    # When the engine died: the first `die` of the pair's serving container after this deploy created it.
    events = [line.split() for line in node_exec(
        node(1), "docker", "events", "--since", str(since), "--until", str(int(time.time()) + 1),
        "--filter", "container=dgxspark-ray-head", "--filter", "event=create", "--filter", "event=die",
        "--filter", "event=destroy", "--format", "{{.TimeNano}} {{.Action}}").stdout.splitlines() if line.strip()]
    created = [int(t) for t, action in events if action == "create"]
    assert created, ("the deploy did not create the serving container", events)
    deaths = [int(t) for t, action in events if action == "die" and int(t) > created[-1]]
    assert deaths, ("the serving container never died", events)
    died_at = deaths[0] / 1e9
    print(f"engine died -> failed task with the diagnosis: {seen_at - died_at:.1f} s")
    (tmp_path / "play.log").write_text("".join(stamped))
    assert 0 <= seen_at - died_at < 10, (seen_at - died_at, seen_at, events, str(tmp_path / "play.log"))


@pytest.mark.slow  # the hang itself: test_engine_two_node's wrong NCCL interface test in make test
def test_wrong_nccl_interface_on_the_worker_is_a_collective_init_hang(serving_lab, tmp_path):
    override = tmp_path / "override.yml"
    # Ray registers the right fabric IP, but the worker's NCCL is pointed at the CX7 port that is not cabled (the
    # twins carry the same names on every node, so the mistake in the field is the port): no such interface with an
    # address on node 2, and the ranks' rendezvous never completes, silently.
    override.write_text("all:\n  children:\n    spark_pairs:\n      children:\n        pair1:\n          hosts:\n"
                        f"            {node(2)}:\n              ray_cluster_env:\n"
                        "                NCCL_SOCKET_IFNAME: enp1s0f0np0\n                GLOO_SOCKET_IFNAME: enp1s0f0np0\n")
    serve("-e", "vllm_serve_state=absent")
    started = time.monotonic()
    proc = serve("-e", "dgxspark_image=lab/vllm-node:0.14", "-e", "dgxspark_model=Qwen/Qwen3-30B-A3B",
                 "-e", "vllm_serve_hang_after=25", "-e", "vllm_serve_ready_timeout=150", inventory_extra=override)
    elapsed = time.monotonic() - started
    assert proc.returncode != 0
    assert ("pair1: not serving: collective (NCCL) init hang: no log progress for" in flat(proc)), flat(proc)[-3000:]
    assert elapsed < 400


@pytest.mark.slow  # a worker's engine killed, shown by status.yml: molecule's faults scenario in make test (mp backend)
def test_killing_the_worker_while_serving_shows_the_pair_unhealthy(serving_lab):
    serve("-e", "vllm_serve_state=absent")
    up = serve("-e", "dgxspark_image=lab/vllm-node:0.14", "-e", "dgxspark_model=Qwen/Qwen3-30B-A3B")
    assert up.returncode == 0, flat(up)[-3000:]
    node_exec(node(2), "docker", "kill", "dgxspark-ray-worker")
    deadline = time.monotonic() + 120
    while True:
        status = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / "status.yml")],
                     env=ansible_env())
        line = " ".join(status.stdout.split())
        if "UNHEALTHY" in line or "not serving" in line:
            break
        assert time.monotonic() < deadline, line[-2000:]
    assert "pair1: not serving" in line or "(UNHEALTHY: " in line
