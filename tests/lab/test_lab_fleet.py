"""A fleet of two pairs on a four-node lab: concurrent deploy, a health-gated rollout with rollback, and faults.

Every fault test runs canary completions against every pair while the fault happens and prints, per pair,
the requests sent, answered and failed. A pair the fault does not touch must answer every one; a pair being
switched may only miss requests while it is switched (its window is recorded by the rollout on its head).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from labkit import BIN, INVENTORY, LAB, REPO, ansible_env, api_url, fabric_ip, node, node_exec, run

NODES = 4
BASE = "lab/vllm-node:0.14"
NEW = "lab/vllm-node:0.14-r2"        # the next release: same engine, another image
BROKEN = "lab/vllm-node:0.14-bad"    # passes the hybrid gates, dies when vllm serve starts
MODEL = "Qwen/Qwen3-30B-A3B"
SERVED = "qwen3-30b-a3b"
KEY = "lab-api-key-not-a-secret"
DEPLOY = str(REPO / "playbooks" / "deploy_qwen35.yml")
ROLLOUT = str(REPO / "playbooks" / "rollout.yml")
TEARDOWN = str(REPO / "playbooks" / "teardown.yml")
HEADS = {"pair1": 1, "pair2": 3}
BREAK = ('raise ImportError("libcudart.so.13: cannot open shared object file: No such file or directory")\n')


def play(path, *args, inventory_extra=None, timeout=1500):
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY)]
    if inventory_extra:
        argv += ["-i", str(inventory_extra)]
    return run([*argv, path, "-e", f"dgxspark_model={MODEL}", *args], check=False, env=ansible_env(), timeout=timeout)


def flat(proc):
    return " ".join(proc.stdout.split())


def containers(i):
    return node_exec(node(i), "docker", "ps", "-a", "--format", "{{.Names}}").stdout.split()


def completion(pair, timeout=10.0):
    body = json.dumps({"model": SERVED, "prompt": "canary", "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"{api_url(HEADS[pair])}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status == 200 and bool(json.load(resp).get("choices"))
    except (OSError, urllib.error.URLError, ValueError):
        return False


class Canary:
    """Sends a 1-token completion to each pair every half second, from a thread per pair."""

    def __init__(self, pairs):
        self.pairs = pairs
        self.results = {pair: [] for pair in pairs}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(pair,), daemon=True) for pair in pairs]

    def _run(self, pair):
        while not self.stop.is_set():
            sent = time.time()
            self.results[pair].append((sent, completion(pair)))
            self.stop.wait(0.5)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def report(self, event, windows=None):
        """Print and return {pair: (sent, answered, failed, failed outside the pair's own window)}."""
        windows = windows or {}
        counts = {}
        for pair, results in self.results.items():
            start, end = windows.get(pair, (None, None))
            outside = [t for t, ok in results if not ok and not (start is not None and start - 1 <= t <= end + 1)]
            counts[pair] = (len(results), sum(ok for _t, ok in results), sum(not ok for _t, ok in results), len(outside))
            print(f"canary during {event}: {pair}: sent {counts[pair][0]}, answered {counts[pair][1]}, failed {counts[pair][2]}"
                  + (f" (all within its own switch, {end - start:.0f} s)" if start is not None and not outside else
                     f", {len(outside)} outside its own switch" if start is not None else ""))
        return counts


def build_release_images():
    """NEW and BROKEN on this machine's engine, from the lab's 0.14 image."""
    for tag, extra in ((NEW, "LABEL org.dgxspark.test.release=2\n"),
                       (BROKEN, "LABEL org.dgxspark.test.release=2-broken\n"
                                f"RUN printf '{BREAK.strip()}\\n' > /opt/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py\n")):
        run(["docker", "build", "-q", "-t", tag, "-"], input_text=f"FROM {BASE}\n{extra}")


def load_into(image, *indexes):
    for i in indexes:
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        subprocess.run(["docker", "exec", "-i", node(i), "docker", "load", "-q"], stdin=save.stdout, check=True,
                       stdout=subprocess.DEVNULL)
        save.stdout.close()
        assert save.wait() == 0


def images_file(tmp_path, pair1, pair2):
    """An extra inventory source giving each pair's nodes their image (host vars: the lab's group_vars/all, next to
    the main inventory, would win over group vars of another source)."""
    path = tmp_path / f"images-{abs(hash((pair1, pair2)))}.yml"
    path.write_text("all:\n  hosts:\n" + "".join(
        f"    {node(i)}:\n      dgxspark_image: {pair1 if i <= 2 else pair2}\n" for i in range(1, NODES + 1)))
    return path


def release(pair):
    return json.loads(node_exec(node(HEADS[pair]), "cat", "/etc/dgxspark/vllm/release.json").stdout)


def rollout_record(pair):
    return json.loads(node_exec(node(HEADS[pair]), "cat", "/etc/dgxspark/vllm/rollout.json").stdout)


def image_label(i, image, label):
    return node_exec(node(i), "docker", "image", "inspect", "-f", "{{index .Config.Labels \"" + label + "\"}}",
                     image).stdout.strip()


def serving(pair):
    deadline = time.monotonic() + 30
    while not completion(pair, timeout=15):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


@pytest.fixture(scope="module")
def fleet(lab):
    """Two pairs, both serving the 0.14 image (overlaid) and the small model, deployed concurrently from zero."""
    grew = len(lab["_meta"]["hostvars"]) < NODES
    if grew:
        run([*LAB, "up", "--nodes", str(NODES), "--no-engine-images"])
    run([*LAB, "images", "vllm-node-0.14"])
    run([*LAB, "load", BASE])
    run([*LAB, "models"])
    build_release_images()
    first = play(DEPLOY, "-e", f"dgxspark_image={BASE}")
    yield first
    play(TEARDOWN)
    if grew:  # back to the session's lab, so later tests run on the pair they were written for
        run([*LAB, "up", "--nodes", str(len(lab["_meta"]["hostvars"])), "--no-engine-images"])


def test_fleet_deploy_serves_every_pair(fleet):
    assert fleet.returncode == 0, flat(fleet)[-5000:]
    text = flat(fleet)
    for pair, head in HEADS.items():
        assert f"{pair}: serving {SERVED} at {api_url(head)}/v1, TP 2 over {node(head)} + {node(head + 1)}" in text
        assert completion(pair)
    # status.yml (the cluster_status filter): a line per pair with its engine, tokens and Ray, a row per member.
    status = flat(run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / "status.yml")],
                      env=ansible_env()))
    for pair, head in HEADS.items():
        assert re.search(rf"{pair}: model {SERVED} at {re.escape(api_url(head))}, health 200, tokens generated [1-9][0-9]*;"
                         rf" Ray 2/2 nodes alive \({re.escape(fabric_ip(head))}, {re.escape(fabric_ip(head + 1))}\),"
                         r" GPUs 0\.0 free of 2\.0, Ray [0-9.]+\b", status), status[-3000:]
        assert f"{node(head)} /dgxspark-ray-head Up" in status and f"{node(head + 1)} /dgxspark-ray-worker Up" in status


def serving_image_id(i, container):
    return node_exec(node(i), "docker", "inspect", "-f", "{{.Image}}", container).stdout.strip()


def test_a0_a_rollout_stops_before_the_switch_when_a_worker_lacks_the_previous_image_by_id(fleet, tmp_path):
    """The record names an image (by ID) only spark-3 holds: the rollout stops naming spark-4, nothing switches."""
    original = node_exec(node(3), "cat", "/etc/dgxspark/vllm/release.json").stdout
    load_into(NEW, 3)
    only_on_head = node_exec(node(3), "docker", "image", "inspect", "-f", "{{.Id}}", NEW).stdout.strip()
    assert node_exec(node(4), "docker", "image", "inspect", only_on_head, check=False).returncode != 0
    containers_before = {i: node_exec(node(i), "docker", "ps", "--format", "{{.ID}} {{.Names}}").stdout for i in (3, 4)}
    node_exec(node(3), "sh", "-c", "cat > /etc/dgxspark/vllm/release.json",
              input_text=json.dumps(dict(json.loads(original), image_id=only_on_head)))
    try:
        proc = play(ROLLOUT, "-l", "pair2", "-e", f"dgxspark_image={NEW}")
    finally:
        node_exec(node(3), "sh", "-c", "cat > /etc/dgxspark/vllm/release.json", input_text=original)
        node_exec(node(3), "docker", "image", "rm", NEW, check=False)
    text = flat(proc)
    assert proc.returncode != 0
    assert (f"pair2: the previous release's image {only_on_head} ({json.loads(original)['image']}) is not on {node(4)},"
            " so a rollback could not serve it there. Nothing was switched") in text, text[-4000:]
    assert f"is not on {node(3)}" not in text
    # Nothing was staged or switched: the same containers serve, and answer.
    assert {i: node_exec(node(i), "docker", "ps", "--format", "{{.ID}} {{.Names}}").stdout for i in (3, 4)} == containers_before
    assert serving("pair2")


def test_a_rollout_whose_new_image_fails_on_pair2_rolls_pair2_back_and_stops(fleet, tmp_path):
    before = {pair: release(pair) for pair in HEADS}
    # pair2's serving tag moves to another image on both its nodes after the deploy (an overlay rebuilt under the
    # same tag): the rollback must serve the image that served, by its ID, not what the tag names now.
    old_id = before["pair2"]["image_id"]
    assert old_id.startswith("sha256:") and serving_image_id(3, "dgxspark-ray-head") == old_id, before["pair2"]
    moved_to = node_exec(node(3), "docker", "image", "inspect", "-f", "{{.Id}}", BASE).stdout.strip()
    assert moved_to != old_id
    for i in (3, 4):
        node_exec(node(i), "docker", "tag", BASE, before["pair2"]["image"])
    try:
        rollout_with_a_moved_tag(before, old_id, tmp_path)
    finally:  # the tag names the image it named again, for the deploys of the tests below
        for i in (3, 4):
            node_exec(node(i), "docker", "tag", old_id, before["pair2"]["image"])


def rollout_with_a_moved_tag(before, old_id, tmp_path):
    # The new release is in the inventory: pair1 gets the good image, pair2 an image that dies at start.
    # Both are only on the heads: staging syncs them to the workers.
    load_into(NEW, 1)
    load_into(BROKEN, 3)
    override = images_file(tmp_path, NEW, BROKEN)
    with Canary(list(HEADS)) as canary:
        proc = play(ROLLOUT, inventory_extra=override)
        time.sleep(2)
    text = flat(proc)
    assert proc.returncode != 0
    assert "pair2: the new release (" in text and "did not serve:" in text, text[-6000:]
    windows = {}
    for pair in HEADS:
        record = rollout_record(pair)
        windows[pair] = (float(record["switch_started"]), float(record["recorded_at"]))
    counts = canary.report("the rollout", windows)
    assert "libcudart.so.13: cannot open shared object file" in text
    assert "Rolled back: pair2 serves the previous release again" in text
    # pair1 switched and serves the new release; pair2 serves its old one again, and answers the canary prompt.
    assert rollout_record("pair1")["result"] == "switched" and rollout_record("pair2")["result"] == "rolled back"
    assert image_label(1, release("pair1")["image"], "org.dgxspark.test.release") == "2", release("pair1")
    # Served by ID: the record names the image by ID, every other field is the one before.
    after = release("pair2")
    assert after["image"] == old_id and after["image_id"] == old_id, after
    assert {k: v for k, v in after.items() if k != "image"} == {k: v for k, v in before["pair2"].items() if k != "image"}
    assert serving_image_id(3, "dgxspark-ray-head") == old_id and serving_image_id(4, "dgxspark-ray-worker") == old_id
    assert rollout_record("pair2")["from"]["image"] == before["pair2"]["image"]
    assert serving("pair2") and serving("pair1")
    for pair in HEADS:
        sent, answered, _failed, outside = counts[pair]
        assert sent > 0 and answered > 0 and outside == 0, (pair, counts[pair])


# After the rollout test pair1 serves NEW and pair2 BASE: the deploys below name exactly that, so a deploy is a
# no-op on the pair the fault does not touch.
AFTER = (NEW, BASE)


def test_b_a_worker_unreachable_before_deploy_leaves_nothing_on_its_pair(fleet, tmp_path):
    play(TEARDOWN, "-l", "pair2")
    node_exec(node(4), "pkill", "-x", "sshd")
    try:
        with Canary(["pair1"]) as canary:
            proc = play(DEPLOY, inventory_extra=images_file(tmp_path, *AFTER), timeout=900)
        counts = canary.report("a deploy with spark-4 unreachable")
    finally:
        node_exec(node(4), "/usr/sbin/sshd", "-E", "/var/log/sshd.log")
    assert proc.returncode != 0
    assert f"{node(4)}" in flat(proc) and "UNREACHABLE" in proc.stdout
    assert not [c for c in containers(3) if c.startswith("dgxspark-")], containers(3)
    assert counts["pair1"][3] == 0 and counts["pair1"][1] > 0


def test_c_a_killed_serving_container_is_restored_by_a_rerun(fleet, tmp_path):
    images = images_file(tmp_path, *AFTER)
    up = play(DEPLOY, inventory_extra=images)
    assert up.returncode == 0, flat(up)[-4000:]
    with Canary(["pair2"]) as canary:
        node_exec(node(1), "docker", "kill", "dgxspark-ray-head")
        node_exec(node(1), "docker", "update", "--restart", "no", "dgxspark-ray-head")  # stays down until the rerun
        assert not completion("pair1", timeout=5)
        rerun = play(DEPLOY, inventory_extra=images)
    counts = canary.report("the head's serving container killed and the rerun")
    assert rerun.returncode == 0, flat(rerun)[-4000:]
    assert serving("pair1")
    assert counts["pair2"][2] == 0 and counts["pair2"][1] > 0


def test_d_fabric_cut_during_startup_fails_bounded_and_leaves_nothing_running(fleet, tmp_path):
    play(TEARDOWN, "-l", "pair2")
    rules = [(4, ["OUTPUT", "-d", fabric_ip(3), "-j", "DROP"]), (3, ["OUTPUT", "-d", fabric_ip(4), "-j", "DROP"])]
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "-i", str(images_file(tmp_path, *AFTER)), DEPLOY,
            "-e", f"dgxspark_model={MODEL}"]
    started = time.monotonic()
    with Canary(["pair1"]) as canary:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ansible_env())
        try:
            # Cut the fabric between spark-3 and spark-4 once pair2's Ray head has started.
            while "dgxspark-ray-head" not in containers(3):
                assert proc.poll() is None, proc.stdout.read()[-4000:]
                time.sleep(0.5)
            for i, rule in rules:
                node_exec(node(i), "iptables", "-I", *rule)
            out = proc.communicate(timeout=900)[0]
        finally:
            for i, rule in rules:
                node_exec(node(i), "iptables", "-D", *rule, check=False)
    elapsed = time.monotonic() - started
    counts = canary.report("a fabric cut inside pair2 during its start-up")
    text = " ".join(out.split())
    assert proc.returncode != 0
    assert "pair2: the Ray cluster did not come up" in text, text[-4000:]
    assert "Every node of the cluster was torn down." in text
    assert elapsed < 600
    for i in (3, 4):
        assert not [c for c in containers(i) if c.startswith("dgxspark-")], (i, containers(i))
    assert counts["pair1"][3] == 0 and counts["pair1"][1] > 0
