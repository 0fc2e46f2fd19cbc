"""The watchdog on the lab pair (issue 14, 3 and 4): a stalled engine detected within two intervals and the whole
cluster restarted; both nodes powered off and on, the head last, serving again without Ansible; a cluster that can
never start stopped at the cap. The module deploys once and tears down at the end, so later modules find the pair
clean."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from labkit import BIN, INVENTORY, LAB, REPO, ansible_env, api_url, node, node_exec, report, run

DEPLOY = str(REPO / "playbooks" / "deploy_qwen35.yml")
TEARDOWN = str(REPO / "playbooks" / "teardown.yml")
STATUS = str(REPO / "playbooks" / "status.yml")
IMAGE = "lab/vllm-node:0.14"
MODEL = "Qwen/Qwen3-30B-A3B"
SERVED = "qwen3-30b-a3b"
KEY = "lab-api-key-not-a-secret"
INTERVAL = 3.0
MAX_RESTARTS = 2
WATCH = ["-e", f"watchdog_interval={INTERVAL}", "-e", f"watchdog_max_restarts={MAX_RESTARTS}",
         "-e", "watchdog_backoff_base=2", "-e", "watchdog_load_timeout=120", "-e", "watchdog_stable_seconds=10"]
EVENTS = "/var/lib/dgxspark/watchdog/events.jsonl"
HEAD, WORKER = "dgxspark-ray-head", "dgxspark-ray-worker"


def play(path, *args, timeout=1500):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), path, "-e", f"dgxspark_model={MODEL}",
                "-e", f"dgxspark_image={IMAGE}", *WATCH, *args], check=False, env=ansible_env(), timeout=timeout)


def recap(proc, host):
    line = next(line for line in proc.stdout.splitlines() if line.startswith(host + " ") and "ok=" in line)
    return dict(item.split("=") for item in line.split(":", 1)[1].split())


def completion(timeout=5.0):
    body = json.dumps({"model": SERVED, "prompt": "watchdog test", "max_tokens": 1}).encode()
    req = urllib.request.Request(f"{api_url(1)}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status == 200 and bool(json.load(resp).get("choices"))
    except (OSError, urllib.error.URLError, ValueError):
        return False


def health():
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{api_url(1)}/health", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def events(since=0.0):
    text = node_exec(node(1), "cat", EVENTS, check=False).stdout
    return [e for e in (json.loads(line) for line in text.splitlines() if line.strip()) if e["time"] >= since]


def wait_for(what, predicate, timeout, step=0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; events: "
                         + json.dumps(events()[-8:], indent=1)[-4000:])


def first(kind, since, **match):
    return next((e for e in events(since) if e["event"] == kind and all(e.get(k) == v for k, v in match.items())), None)


def state(i, name):
    return node_exec(node(i), "docker", "inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", name,
                     check=False).stdout.strip()


def watchdog_state():
    return json.loads(node_exec(node(1), "cat", "/var/lib/dgxspark/watchdog/state.json", check=False).stdout or "{}")


@pytest.fixture(scope="module")
def deployed(lab):
    run([*LAB, "images", "vllm-node-0.14"])
    run([*LAB, "load", IMAGE])
    run([*LAB, "models"])
    proc = play(DEPLOY)
    assert proc.returncode == 0, proc.stdout[-6000:]
    yield proc
    down = play(TEARDOWN)
    assert down.returncode == 0, down.stdout[-4000:]
    for i in (1, 2):
        left = node_exec(node(i), "docker", "ps", "-a", "--format", "{{.Names}}").stdout.split()
        assert left == [], f"{node(i)} still has {left}"


def test_a_watchdog_runs_on_the_head_and_a_rerun_restarts_nothing(deployed):
    assert state(1, "dgxspark-watchdog").startswith("running")
    assert state(2, "dgxspark-watchdog") == ""  # on the head only
    inspect = node_exec(node(1), "docker", "inspect", "dgxspark-watchdog").stdout
    assert KEY not in inspect and "unless-stopped" in inspect
    host_config = json.loads(inspect)[0]["HostConfig"]
    assert host_config["CapDrop"] == ["ALL"] and not host_config["CapAdd"], host_config  # issue 15: least privilege
    assert host_config["SecurityOpt"] == ["no-new-privileges:true"] and not host_config["Privileged"]
    wait_for("the watchdog's first answered look", lambda: watchdog_state().get("verdict") == "ok", 30)
    before = {name: state(i, name) for i, name in ((1, HEAD), (2, WORKER), (1, "dgxspark-watchdog"))}
    again = play(DEPLOY)
    assert again.returncode == 0, again.stdout[-4000:]
    changed = {host: recap(again, host)["changed"] for host in (node(1), node(2))}
    after = {name: state(i, name) for i, name in ((1, HEAD), (2, WORKER), (1, "dgxspark-watchdog"))}
    report(f"watchdog: rerun of the deploy: changed {changed}; containers restarted: "
           f"{[n for n in before if before[n] != after[n]]}")
    assert after == before
    # The hybrid image's probe and image_sync's inspect report changes of their own; the watchdog's tasks none.
    assert not [line for line in again.stdout.splitlines() if line.startswith("changed:") and "watchdog" in line]
    status = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), STATUS], env=ansible_env())
    flat = " ".join(status.stdout.split())
    assert "watchdog: ok (completion answered in" in flat and f"restarts 0 of {MAX_RESTARTS}, every {INTERVAL}s" in flat
    assert "started detail=watching every 3s" in flat


def test_a_stalled_engine_is_detected_within_two_intervals_and_the_cluster_restarted(deployed):
    assert completion()
    # vLLM's EngineCore and workers are processes of their own; SIGSTOP of one keeps the API server's /health 200.
    # Here: the rank-0 worker (the Ray actor on the head that executes the model).
    pids = node_exec(node(1), "docker", "exec", HEAD, "pgrep", "-f", "RayWorkerWrapper").stdout.split()
    assert pids, node_exec(node(1), "docker", "exec", HEAD, "ps", "axo", "pid,args").stdout
    head_start = state(1, HEAD)
    stopped_at = time.time()
    node_exec(node(1), "docker", "exec", HEAD, "kill", "-STOP", *pids)
    assert not completion(timeout=2)
    health_during = health()
    detected = wait_for("the stall's detection", lambda: first("detected", stopped_at), 4 * INTERVAL)
    detection = detected["time"] - stopped_at
    report(f"watchdog: engine worker SIGSTOPped ({len(pids)} process(es)), /health during the stall {health_during}; "
           f"detected as {detected['kind']} after {detection:.1f}s (interval {INTERVAL:g}s): {detected['detail']}")
    assert health_during == 200
    assert detected["kind"] == "stall"
    assert detection <= 2 * INTERVAL
    action = wait_for("the restart", lambda: first("action", stopped_at), 120)
    assert action["action"] == "restart" and action["result"] == "done", action
    serving = wait_for("an answered completion", completion, 300, step=0.2)
    answered_at = time.time()
    recovered = wait_for("the recovered event", lambda: first("recovered", stopped_at), 60)
    report(f"watchdog: restart 1 of {MAX_RESTARTS} took {action['duration']}s; the controller's first answered "
           f"completion {answered_at - stopped_at:.1f}s after the stall ({answered_at - action['time']:.1f}s after "
           f"the restart); the watchdog's 'recovered' after {recovered['duration']}s")
    assert serving and state(1, HEAD) != head_start


def test_both_nodes_restarted_head_last_serve_again_without_ansible(deployed):
    wait_for("a healthy cluster before the power cut", completion, 120)
    run(["docker", "stop", "-t", "60", node(1), node(2)])
    off = time.time()
    run(["docker", "start", node(2)])
    worker_on = time.time()
    # The worker's engine container comes back and waits for its head: the head comes back later.
    waiting = wait_for("the worker's launcher waiting for its head", lambda: next(
        (line for line in node_exec(node(2), "docker", "logs", "--since", "2m", WORKER, check=False).stdout.splitlines()
         if "for the Ray head" in line), None), 120)
    run(["docker", "start", node(1)])
    head_on = time.time()
    wait_for("an answered completion after the restart", completion, 600, step=0.5)
    answered = time.time()
    links = node_exec(node(1), "ip", "-br", "addr").stdout
    report(f"watchdog: both nodes off at +0s, the worker on at +{worker_on - off:.1f}s, the head on at "
           f"+{head_on - off:.1f}s; first answered completion {answered - head_on:.1f}s after the head's restart "
           f"({answered - worker_on:.1f}s after the first node's), without Ansible")
    assert "enp1s0f1np1" in links  # the node's boot named its fabric link as a Spark's does
    report(f"watchdog: the worker meanwhile: {waiting.strip()}")
    wait_for("the watchdog back and answered", lambda: state(1, "dgxspark-watchdog").startswith("running")
             and watchdog_state().get("verdict") == "ok", 60)
    restarts = [e for e in events(head_on) if e["event"] == "action"]
    assert restarts == [], restarts  # the reboot needed no recovery: a loading engine is left alone


def test_a_cluster_that_can_never_start_stops_at_the_cap(deployed):
    wait_for("a healthy cluster", completion, 120)
    # Answers for watchdog_stable_seconds forget the restarts of the tests before: the cap is counted from 0.
    wait_for("the restarts forgotten", lambda: watchdog_state().get("attempts") == 0, 60)
    since = time.time()
    # The engine now fails at import on every start (the writable layer of the head's container survives restarts).
    node_exec(node(1), "docker", "exec", HEAD, "sh", "-c",
              "f=$(python3 -c 'import vllm.entrypoints.openai.api_server as m; print(m.__file__)') && "
              "printf 'raise ImportError(\"libcudart.so.13: cannot open shared object file\")\\n' > \"$f\" && "
              "pkill -f 'bin/vllm[ ]serve'")
    failed = wait_for("the watchdog giving up", lambda: first("failed", since), 600, step=1)
    actions = [e for e in events(since) if e["event"] == "action"]
    backoffs = [e["wait"] for e in events(since) if e["event"] == "backoff"]
    report(f"watchdog: a cluster that cannot start: {len(actions)} restart(s) (cap {MAX_RESTARTS}), backoff waits "
           f"{backoffs}, then failed after {failed['time'] - since:.1f}s: {failed['detail']}")
    assert len(actions) == MAX_RESTARTS and failed["restarts"] == MAX_RESTARTS and failed["result"] == "stopped"
    assert [a["restart"] for a in actions] == list(range(1, MAX_RESTARTS + 1))
    assert state(1, HEAD).startswith("exited") and state(2, WORKER).startswith("exited")
    assert health() is None  # nothing listens: a gateway's health check fails
    time.sleep(3 * INTERVAL)  # and it stays so: no further restart
    assert [e for e in events(failed["time"] + 0.001) if e["event"] in ("action", "failed")] == []
    assert state(1, HEAD).startswith("exited")
    status = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), STATUS], env=ansible_env())
    assert "watchdog: FAILED" in " ".join(status.stdout.split())
