"""The watchdog's decisions: what a look at the cluster means, when to restart, the backoff and the cap."""

from __future__ import annotations

import json

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _watchdog as wd

# The head itself and the watchdog's own key (security review H3: its one way to the engine containers).
REACH = {"head": {"host": "spark-1", "ip": "10.0.0.1"},
         "ssh": {"key": "/etc/dgxspark/watchdog-key/id_ed25519", "known_hosts": "/etc/dgxspark/watchdog-key/known_hosts"}}
CFG = wd.load_config({"cluster": "pair1", "interval": 5, "completion_timeout": 5, "load_timeout": 100,
                      "max_restarts": 2, "backoff_base": 10, "backoff_max": 25, "stable_seconds": 60, **REACH})
NOW = 1_000_000.0
RUNNING = {"exists": True, "running": True, "status": "running", "exit_code": 0, "started_at": NOW - 500,
           "restart_count": 0}


def obs(**over):
    base = {"now": NOW, "release": True, "container": dict(RUNNING), "listening": True, "health": 200,
            "completion": {"ok": False, "seconds": 5.0, "error": "timed out"},
            "before": {"generation_tokens": 40.0, "running": 1.0, "waiting": 2.0},
            "after": {"generation_tokens": 40.0, "running": 1.0, "waiting": 3.0}, "workers": {}}
    base.update(over)
    return base


def test_health_200_no_answer_no_progress_is_a_stall():
    finding, detail = wd.diagnose(obs(), CFG)
    assert finding == "stall"
    assert detail == ("/health 200 but the completion did not answer within 5s (timed out) and the engine made no "
                      "progress: no token generated or prefilled, no engine step (1 running, 3 waiting)")


def test_no_answer_while_tokens_are_generated_is_busy_not_a_stall():
    finding, detail = wd.diagnose(obs(after={"generation_tokens": 52.0, "running": 4.0, "waiting": 9.0}), CFG)
    assert (finding, detail) == ("busy", "the completion did not answer within 5s but the engine moved meanwhile "
                                         "(12 generated)")


@pytest.mark.parametrize(("before", "after", "moved"), [
    ({"prompt_tokens": 1000.0}, {"prompt_tokens": 9192.0}, "8192 prefilled"),
    ({"iterations": 10.0}, {"iterations": 14.0}, "4 engine steps"),
    ({"prompt_tokens": 0.0, "iterations": 1.0}, {"prompt_tokens": 2048.0, "iterations": 2.0}, "2048 prefilled, 1 engine steps"),
])
def test_m5_a_long_prefill_decodes_nothing_and_is_busy_not_a_stall(before, after, moved):
    """Security review M5: only generated tokens counted, so a long prompt (minutes of prefill, no token decoded) was
    read as a stall and the whole cluster restarted, killing the request."""
    base = {"generation_tokens": 40.0, "running": 1.0, "waiting": 0.0}
    finding, detail = wd.diagnose(obs(before={**base, **before}, after={**base, **after}), CFG)
    assert finding == "busy" and detail.endswith(f"({moved})")


def test_m5_a_stall_acts_only_after_consecutive_verdicts():
    """One slow look is no stall: stall_verdicts looks in a row (2 by default) before a restart, and any other
    finding between them starts the count again."""
    state = wd.new_state("pair1")
    assert CFG["stall_verdicts"] == 2
    action, events = wd.decide(state, "stall", "d", CFG, NOW)
    assert action == "none" and [e["event"] for e in events] == ["detected"]  # seen at once, not acted on
    assert state["detail"] == "d (stall verdict 1 of 2 in a row: no action yet)" and state["verdict"] == "stall"
    assert wd.decide(state, "busy", "d", CFG, NOW + 5) == ("none", [])
    assert wd.decide(state, "stall", "d", CFG, NOW + 10) == ("none", [])
    assert wd.decide(state, "stall", "d", CFG, NOW + 15) == ("restart", [])
    # Other faults act at once.
    assert wd.decide(wd.new_state("pair1"), "engine_exited", "d", CFG, NOW)[0] == "restart"
    with pytest.raises(wd.ConfigError, match="stall_verdicts"):
        wd.load_config({"cluster": "p", "stall_verdicts": 0})


def test_an_answered_completion_is_ok():
    assert wd.diagnose(obs(completion={"ok": True, "seconds": 0.25}), CFG) == ("ok", "completion answered in 0.25s")


def test_a_fresh_engine_that_does_not_listen_yet_is_loading_until_the_load_timeout():
    fresh = dict(RUNNING, started_at=NOW - 30)
    assert wd.diagnose(obs(container=fresh, listening=False), CFG)[0] == "loading"
    old = dict(RUNNING, started_at=NOW - 101)
    assert wd.diagnose(obs(container=old, listening=False), CFG) == (
        "load_timeout", "the engine does not listen 100s after its start")


def test_engine_gone_exited_or_restarted_by_docker():
    assert wd.diagnose(obs(container={"exists": False}), CFG)[0] == "engine_gone"
    exited = dict(RUNNING, running=False, status="exited", exit_code=1)
    assert wd.diagnose(obs(container=exited), CFG) == ("engine_exited", "the engine container is exited (exit code 1)")
    again = dict(RUNNING, restart_count=3, started_at=NOW - 2)
    finding, detail = wd.diagnose(obs(container=again), CFG, previous=dict(RUNNING, restart_count=2))
    assert (finding, detail) == ("engine_exited", "the engine exited and Docker restarted it (restart count 2 -> 3)")
    # The same start seen again is not a new restart.
    assert wd.diagnose(obs(container=again), CFG, previous=dict(again))[0] == "stall"


def test_a_worker_container_down_makes_it_a_dead_rank():
    finding, detail = wd.diagnose(obs(workers={"spark-2": {"dgxspark-ray-worker": {"exists": True, "running": False,
                                                                                   "status": "exited"}}}), CFG)
    assert finding == "dead_rank" and detail.endswith("worker engine container(s) down: spark-2 dgxspark-ray-worker exited")


def test_no_release_is_idle_and_unhealthy_health_is_a_fault():
    assert wd.diagnose({"now": NOW, "release": False}, CFG)[0] == "idle"
    assert wd.diagnose(obs(health=503), CFG)[0] == "unhealthy"


def test_backoff_doubles_up_to_the_maximum_and_the_first_restart_is_immediate():
    assert [wd.backoff(n, CFG) for n in range(5)] == [0.0, 10.0, 20.0, 25.0, 25.0]


def test_restarts_are_spaced_by_the_backoff_then_capped_then_nothing():
    state = wd.new_state("pair1")
    assert [e["event"] for e in wd.decide(state, "stall", "d", CFG, NOW - 5)[1]] == ["detected"]  # verdict 1 of 2
    assert wd.decide(state, "stall", "d", CFG, NOW) == ("restart", [])
    state["attempts"], state["last_restart_at"] = 1, NOW
    assert wd.decide(state, "engine_exited", "d", CFG, NOW + 9) == ("wait", [])  # the incident is already open
    assert state["next_restart_at"] == NOW + 10
    assert wd.decide(state, "engine_exited", "d", CFG, NOW + 10)[0] == "restart"
    state["attempts"], state["last_restart_at"] = 2, NOW + 10
    assert wd.decide(state, "engine_exited", "d", CFG, NOW + 11)[0] == "give_up"  # at the cap: no backoff wait
    state["failed"] = True
    assert wd.decide(state, "engine_exited", "d", CFG, NOW + 500) == ("none", [])
    assert state["verdict"] == "failed"


def test_loading_and_busy_do_nothing_and_an_answer_closes_the_incident_with_its_duration():
    state = wd.new_state("pair1")
    wd.decide(state, "stall", "d", CFG, NOW)
    wd.decide(state, "stall", "d", CFG, NOW + 0.5)
    state["attempts"], state["last_restart_at"] = 1, NOW + 1
    assert wd.decide(state, "loading", "d", CFG, NOW + 5) == ("none", [])
    assert wd.decide(state, "busy", "d", CFG, NOW + 6) == ("none", [])
    action, events = wd.decide(state, "ok", "completion answered in 0.10s", CFG, NOW + 20)
    assert action == "none" and events == [{"event": "recovered", "kind": "stall", "detail": "completion answered in 0.10s",
                                            "duration": 20.0, "since_restart": 19.0, "restarts": 1}]
    assert state["incident"] is None and state["attempts"] == 1
    # Answers for stable_seconds forget the restarts.
    assert wd.decide(state, "ok", "x", CFG, NOW + 79)[1] == []
    assert wd.decide(state, "ok", "x", CFG, NOW + 80)[1][0]["event"] == "stable" and state["attempts"] == 0


def test_a_failed_cluster_that_answers_again_is_serving_again():
    state = dict(wd.new_state("pair1"), failed=True, attempts=2)
    action, events = wd.decide(state, "ok", "x", CFG, NOW)
    assert action == "none" and [e["event"] for e in events] == ["serving_again"]
    assert state["failed"] is False and state["attempts"] == 0


def test_maintenance_acts_on_nothing():
    state = wd.new_state("pair1")
    assert wd.decide(state, "engine_gone", "d", CFG, NOW, maintenance=True) == ("none", [])
    assert state["verdict"] == "maintenance" and state["incident"] is None


@pytest.mark.parametrize("text,mtime,now,expected", [
    (None, None, NOW, False),
    (json.dumps({"reason": "rollout", "until": NOW + 1}), NOW - 10, NOW, True),
    (json.dumps({"reason": "rollout", "until": NOW - 1}), NOW - 10, NOW, False),
    ("garbage", NOW - 3599, NOW, True),
    ("garbage", NOW - 3601, NOW, False),
])
def test_maintenance_marker(text, mtime, now, expected):
    assert wd.maintenance_active(text, mtime, now) is expected


def test_metrics_are_summed_over_label_sets():
    text = ('# HELP vllm:generation_tokens_total x\n'
            'vllm:generation_tokens_total{engine="0",model_name="m"} 120.0\n'
            'vllm:generation_tokens_total{engine="1",model_name="m"} 5\n'
            'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 7.0\n'
            'vllm:num_requests_waiting_by_reason{reason="x"} 3\n')
    assert wd.parse_metrics(text) == {"generation_tokens": 125.0, "running": 2.0, "waiting": 7.0}


def test_docker_times_endpoint_and_key():
    assert wd.docker_time("1970-01-01T00:00:10.500000000Z") == 10.5
    assert wd.docker_time("0001-01-01T00:00:00Z") is None
    assert wd.endpoint({"endpoint": {"host": "0.0.0.0", "port": 8000}}) == ("127.0.0.1", 8000)
    assert wd.endpoint({"endpoint": {"host": "10.0.0.11", "port": "8001"}}) == ("10.0.0.11", 8001)
    assert wd.endpoint({}) is None
    assert wd.api_key("# c\nVLLM_API_KEY=abc=d\n") == "abc=d" and wd.api_key("") == ""


@pytest.mark.parametrize("data,message", [
    ({}, "cluster must name the cluster"),
    ({"cluster": "p", "interval": 0}, "interval must be positive (is 0.0)"),
    ({"cluster": "p", "max_restarts": -1}, "max_restarts must be a whole number >= 0 (is -1)"),
    ({"cluster": "p", "workers": [{"host": "w"}]}, "workers must be a list of {host, ip} (their fabric addresses)"),
    ({"cluster": "p", "workers": [{"host": "w", "ip": "1.2.3.4"}]}, "head must be {host, ip}"),
    ({"cluster": "p", "head": {"host": "h"}}, "head must be {host, ip}"),
    ({"cluster": "p", "head": {"host": "h", "ip": "10.0.0.1"}}, "ssh needs key (the watchdog's own) and known_hosts"),
    ({"cluster": "p", "containers": {"ray": {"head": "a b", "worker": "w"}}}, "containers must map ray and mp"),
])
def test_bad_configurations_are_named(data, message):
    with pytest.raises(wd.ConfigError, match="^" + message.replace("{", r"\{").replace("}", r"\}").replace("(", r"\(").replace(")", r"\)")):
        wd.load_config(data)


class _Scripted(wd.Watchdog):
    """A watchdog whose look at the cluster finds the engine gone and whose recovery only records that it ran; a
    hook runs between the round's first read of the marker and its action (a play writing the marker then)."""

    def __init__(self, cfg, between=None):
        super().__init__(cfg)
        self.between = between
        self.recovered = []

    def observe(self):
        if self.between:
            self.between()
        return {"now": NOW, "release": True, "container": {"exists": False}, "workers": {}}

    def release(self):
        return {}

    def recover(self, release, give_up):
        lock = f"{self.cfg['state_dir']}/lock"
        fd = wd.os.open(lock, wd.os.O_RDWR)
        try:  # the lock is held for the whole recovery: another holder cannot take it now
            with pytest.raises(BlockingIOError):
                wd.fcntl.flock(fd, wd.fcntl.LOCK_EX | wd.fcntl.LOCK_NB)
        finally:
            wd.os.close(fd)
        self.recovered.append(give_up)
        return True, ""


def _cfg(tmp_path):
    return wd.load_config({"cluster": "pair1", "interval": 5, "max_restarts": 2, "state_dir": str(tmp_path),
                           "maintenance_file": str(tmp_path / "maintenance"), **REACH})


def test_a_recovery_holds_the_lock_beside_the_marker(tmp_path):
    dog = _Scripted(_cfg(tmp_path))
    dog.round()
    assert dog.recovered == [False]
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["detected", "action"]


def test_a_marker_written_before_the_lock_was_taken_drops_the_recovery(tmp_path):
    marker = tmp_path / "maintenance"
    dog = _Scripted(_cfg(tmp_path), between=lambda: marker.write_text(json.dumps({"reason": "vllm_serve",
                                                                                  "until": 4e9})))
    dog.round()
    assert dog.recovered == []
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "skipped" and "maintenance marker" in events[-1]["detail"]
    assert json.loads((tmp_path / "state.json").read_text())["verdict"] == "maintenance"


def test_h3_the_head_is_read_and_acted_on_through_an_engine_request_never_a_docker_socket(tmp_path):
    """The watchdog holds no Docker socket: the head's engine container is asked over ssh like the workers'."""
    asked = []

    class Scripted(wd.Engines):
        def request(self, node, action, names):
            asked.append((node["host"], action, names))
            if action == "status":
                return {names[0]: {"exists": True, "running": True, "paused": True, "status": "paused",
                                   "started_at": "2026-12-06T12:00:00.5Z", "exit_code": 0, "restart_count": 1}}
            if action == "start":
                return {names[0]: {"exists": True, "running": False, "status": "exited"}}
            return {"error": "spark-1: refused"}

    engines = Scripted(CFG)
    state = engines.state("dgxspark-ray-head")
    assert state["exists"] and not state["running"] and state["restart_count"] == 1
    assert state["started_at"] == wd.docker_time("2026-12-06T12:00:00.5Z")
    assert engines.act("dgxspark-ray-head", "start") == "start dgxspark-ray-head on spark-1: it is exited"
    assert engines.act("dgxspark-ray-head", "stop") == "stop dgxspark-ray-head on spark-1: spark-1: refused"
    assert asked[0] == ("spark-1", "status", ["dgxspark-ray-head"])
    assert "docker_socket" not in CFG and not hasattr(wd, "Docker")
    dog = wd.Watchdog(dict(CFG, state_dir=str(tmp_path), maintenance_file=str(tmp_path / "m")))
    assert isinstance(dog.engines, wd.Engines)


def test_m5_no_restart_is_spent_while_a_member_cannot_be_reached_and_the_wait_is_bounded():
    """Review M5: a restart while a worker is unreachable cannot form the cluster. At 13f6075 each one was spent
    (three of them, then every engine stopped) on a worker that was only rebooting."""
    cfg = dict(CFG, member_wait=120.0)
    state = wd.new_state("pair1")
    hold, events = wd.hold_for_members(state, {"spark-2": "ssh to spark-2 exited 255: No route to host"}, cfg, NOW)
    assert hold and state["verdict"] == "waiting_for_members" and "spark-2 (unreachable)" in state["detail"]
    assert [e["event"] for e in events] == ["members_unreachable"] and events[0]["hosts"] == ["spark-2"]
    assert "No route to host" in events[0]["detail"] and "waiting up to 120s" in events[0]["detail"]
    hold, events = wd.hold_for_members(state, {"spark-2": "down"}, cfg, NOW + 60)
    assert hold and events == []  # said once
    hold, events = wd.hold_for_members(state, {"spark-2": "down"}, cfg, NOW + 120)
    assert not hold and [e["event"] for e in events] == ["member_wait_over"]  # bounded: the restarts go on
    assert wd.hold_for_members(state, {"spark-2": "down"}, cfg, NOW + 200) == (False, [])
    hold, events = wd.hold_for_members(state, {}, cfg, NOW + 230)
    assert not hold and events[0]["event"] == "members_back" and events[0]["waited"] == 230
    assert state["unreachable_since"] is None and not state["unreachable_wait_over"]


class _Unreachable(wd.Watchdog):
    """A cluster whose head's engine is gone and whose worker does not answer ssh (ssh exits 255)."""

    def __init__(self, cfg, reachable=False):
        super().__init__(cfg)
        self.reachable = reachable
        self.recovered = []
        self.engines = self

    def request(self, node, action, names):
        if self.reachable:
            return {names[0]: {"exists": True, "running": True}}
        return {"error": f"ssh to {node['host']} exited 255: Connection timed out", "unreachable": True}

    def observe(self):
        return {"now": NOW, "release": True, "container": {"exists": False}, "workers": {}}

    def release(self):
        return {"backend": "ray"}

    def recover(self, release, give_up):
        self.recovered.append(give_up)
        return True, ""


def test_m5_the_watchdog_waits_for_an_unreachable_worker_before_it_restarts_and_says_so(tmp_path):
    cfg = dict(_cfg(tmp_path), workers=[{"host": "spark-2", "ip": "10.0.0.2"}], member_wait=3600.0)
    dog = _Unreachable(cfg)
    dog.round()
    dog.round()
    assert dog.recovered == [] and dog.state["attempts"] == 0
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["verdict"] == "waiting_for_members" and "spark-2" in saved["detail"]
    events = [json.loads(line)["event"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events == ["detected", "members_unreachable"]
    dog.reachable = True  # the worker is back: the restart is spent now
    dog.round()
    assert dog.recovered == [False] and dog.state["attempts"] == 1
    events = [json.loads(line)["event"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[-2:] == ["members_back", "action"]


def test_m5_an_engine_request_that_ssh_itself_failed_is_unreachable_and_a_refusal_is_not(monkeypatch):
    engines = wd.Engines(CFG)
    worker = {"host": "spark-2", "ip": "10.0.0.2"}

    def answer(code, stdout="", stderr=""):
        return lambda *a, **k: wd.subprocess.CompletedProcess(a, code, stdout, stderr)
    monkeypatch.setattr(wd.subprocess, "run", answer(255, stderr="ssh: connect to host 10.0.0.2 port 22: No route"))
    assert engines.request(worker, "status", ["c"])["unreachable"] is True
    monkeypatch.setattr(wd.subprocess, "run", answer(1, stdout=json.dumps({"ok": False, "error": "refused"})))
    assert engines.request(worker, "status", ["c"]) == {"error": "spark-2: refused"}


def test_m5_the_watchdogs_verdict_and_give_up_reach_prometheus_through_the_textfile_collector(tmp_path):
    """Security review M5: after the cap the cluster is reported failed to Prometheus too (alert DgxsparkClusterFailed:
    tests/lab/monitoring/rules.test.yml), in a file the node exporter's user can read, replaced whole."""
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    cfg = dict(_cfg(state), metrics_dir=str(metrics))
    dog = _Scripted(cfg)
    dog.round()
    written = metrics / wd.METRICS_FILE
    lines = written.read_text().splitlines()
    assert "dgxspark_watchdog_failed 0" in lines and "dgxspark_watchdog_restarts 1" in lines
    assert 'dgxspark_watchdog_verdict{verdict="engine_gone"} 1' in lines
    assert [line for line in lines if line.startswith("dgxspark_watchdog_verdict") and line.endswith(" 1")] == [
        'dgxspark_watchdog_verdict{verdict="engine_gone"} 1']
    assert written.stat().st_mode & 0o777 == 0o644
    assert not (metrics / (wd.METRICS_FILE + ".tmp")).exists()
    dog.state.update(failed=True, verdict="failed")
    dog.save()
    lines = written.read_text().splitlines()
    assert "dgxspark_watchdog_failed 1" in lines and 'dgxspark_watchdog_verdict{verdict="failed"} 1' in lines
    # Every sample line is a metric the exposition format accepts: a name, optional labels, a number.
    assert all(wd.re.match(r'^dgxspark_watchdog_[a-z_]+(\{verdict="[a-z_]+"\})? [0-9.]+$', line)
               for line in lines if not line.startswith("#"))
    with pytest.raises(wd.ConfigError, match="^metrics_dir must be an absolute directory"):
        wd.load_config(dict(cfg, metrics_dir="metrics"))
