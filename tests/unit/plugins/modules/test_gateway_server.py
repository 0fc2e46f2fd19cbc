# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gateway_server module against a real HAProxy (Debian's, installed by lab/host-deps.sh) on loopback.

Two backends stand for two models; two tiny HTTP servers stand for two clusters' doors. The module drains a cluster
(requests in flight finish first), admits it again (it returns once HAProxy's health checks see it up), and
refuses names that would chain a second runtime API command.
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway_api as api
from ansible_collections.dgxspark.vllm.plugins.modules import gateway_server as mod

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Door(http.server.BaseHTTPRequestHandler):
    """A cluster's door: answers at once, or after ?slow=N seconds; 503 while its `down` event is set."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.server.down.is_set():
            self.send_response(503)
            self.end_headers()
            return
        if "slow=" in self.path:
            self.server.release.wait(float(self.path.split("slow=")[1]))
        body = json.dumps({"cluster": self.server.name}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


def door(name):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Door)
    server.name, server.down, server.release = name, threading.Event(), threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def write_config(tmp_path, port, sock, doors, swap=False):
    """Two backends of the two doors; SWAP: each server at the other's door (a cluster moved to a new address)."""
    ports = {name: d.server_address[1] for name, d in doors.items()}
    if swap:
        ports = dict(zip(ports, reversed(list(ports.values()))))
    servers = "".join(f"    server {name} 127.0.0.1:{ports[name]} check inter 200 rise 2 fall 1\n" for name in doors)
    # The server-state file as roles/gateway's configuration names it (plugins/module_utils/_gateway.py): beside the
    # socket, read at every start.
    (tmp_path / "haproxy.cfg").write_text(
        "global\n"
        f"    stats socket {sock} mode 600 level admin\n"
        f"    server-state-file {tmp_path / api.STATE_FILE}\n"
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n"
        "    option redispatch\n    retries 2\n    load-server-state-from-file global\n"
        f"frontend api\n    bind 127.0.0.1:{port}\n"
        "    use_backend model_b if { path_beg /b }\n    default_backend model_a\n"
        f"backend model_a\n    balance roundrobin\n    option httpchk GET /health\n{servers}"
        f"backend model_b\n    balance roundrobin\n    option httpchk GET /health\n{servers}")


def start_haproxy(tmp_path, client):
    """HAProxy on tmp_path/haproxy.cfg, once its runtime API answers for both clusters."""
    proc = subprocess.Popen([HAPROXY, "-db", "-f", str(tmp_path / "haproxy.cfg")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while True:
        try:
            if all(len(client.servers(name)[0]) == 2 for name in ("pair1", "pair2")):
                return proc
        except api.GatewayError:
            pass
        assert time.monotonic() < deadline, proc.stdout.read1().decode() if proc.poll() is not None else "not up"
        time.sleep(0.1)


def wait_up(client, names, timeout=15):
    deadline = time.monotonic() + timeout
    while not all(api.is_up(r["status"]) for name in names for r in client.servers(name)[0]):
        assert time.monotonic() < deadline, [client.servers(name)[0] for name in names]
        time.sleep(0.1)


@pytest.fixture()
def gateway(tmp_path):
    doors = {"pair1": door("pair1"), "pair2": door("pair2")}
    port = free_port()
    sock = tmp_path / "admin.sock"
    write_config(tmp_path, port, sock, doors)
    client = api.RuntimeAPI(str(sock))
    procs = [start_haproxy(tmp_path, client)]
    wait_up(client, ("pair1", "pair2"))

    def restart(swap=False, save=None):
        """Stop HAProxy and start it again (a restart of the gateway), on the configuration, SWAP as above; SAVE runs
        once the configuration is written, before HAProxy stops (the role's save before a reload)."""
        write_config(tmp_path, port, sock, doors, swap=swap)
        if save is not None:
            save()
        procs[-1].terminate()
        procs[-1].wait(timeout=10)
        procs.append(start_haproxy(tmp_path, client))

    yield {"port": port, "socket": str(sock), "doors": doors, "api": client, "restart": restart, "dir": tmp_path}
    procs[-1].terminate()
    procs[-1].wait(timeout=10)
    for d in doors.values():
        d.release.set()
        d.shutdown()


def run(capsys, **args):
    if "socket" in args:
        args.setdefault("config", str(Path(args["socket"]).parent / "haproxy.cfg"))
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def get(port, path, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
        return json.load(resp)["cluster"]


def test_drain_waits_for_the_request_in_flight_then_sends_everything_elsewhere_and_ready_admits_it_again(gateway, capsys):
    port, pair1 = gateway["port"], gateway["doors"]["pair1"]
    # A request in flight on pair1 (round robin: send another until one is seen there, under any load).
    results = []
    deadline = time.monotonic() + 20
    while not any(r["sessions"] for r in gateway["api"].servers("pair1")[0]):
        assert time.monotonic() < deadline, "no request reached pair1"
        threading.Thread(target=lambda: results.append(get(port, "/a?slow=30")), daemon=True).start()
        for _poll in range(20):
            if any(r["sessions"] for r in gateway["api"].servers("pair1")[0]):
                break
            time.sleep(0.1)
    threading.Timer(1.5, pair1.release.set).start()

    drained = run(capsys, server="pair1", state="drain", socket=gateway["socket"], timeout=20)
    assert drained["changed"] is True and drained["waited"] >= 1.0, drained
    assert {r["backend"]: (r["admin"], r["sessions"]) for r in drained["servers"]} == {
        "model_a": ("drain", 0), "model_b": ("drain", 0)}
    assert drained["others"] == {"model_a": ["pair2"], "model_b": ["pair2"]}
    deadline = time.monotonic() + 10
    while "pair1" not in results and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "pair1" in results            # the request in flight finished on the drained cluster
    assert {get(port, "/a") for _i in range(6)} == {"pair2"}
    assert {get(port, "/b") for _i in range(6)} == {"pair2"}

    again = run(capsys, server="pair1", state="drain", socket=gateway["socket"])
    assert again["changed"] is False

    ready = run(capsys, server="pair1", state="ready", socket=gateway["socket"], timeout=20)
    assert ready["changed"] is True and all(r["admin"] == "ready" and r["status"] == "UP" for r in ready["servers"])
    assert {get(port, "/a") for _i in range(6)} == {"pair1", "pair2"}


def test_ready_returns_only_once_the_health_checks_see_the_cluster_serve(gateway, capsys):
    pair1 = gateway["doors"]["pair1"]
    run(capsys, server="pair1", state="maint", socket=gateway["socket"])
    pair1.down.set()                                   # switching: its door answers 503
    threading.Timer(2.0, pair1.down.clear).start()     # serving again 2 s later
    start = time.monotonic()
    ready = run(capsys, server="pair1", state="ready", socket=gateway["socket"], timeout=20)
    assert time.monotonic() - start >= 1.5 and ready["waited"] >= 1.5, ready
    assert all(r["status"] == "UP" for r in ready["servers"])


def test_ready_fails_naming_the_checks_when_the_cluster_never_serves(gateway, capsys):
    gateway["doors"]["pair2"].down.set()
    while any(api.is_up(r["status"]) for r in gateway["api"].servers("pair2")[0]):
        time.sleep(0.1)
    failed = run(capsys, server="pair2", state="ready", socket=gateway["socket"], timeout=2)
    assert failed["failed"] is True
    assert "pair2 at the gateway: the gateway's health checks do not see it serve after 2 s" in failed["msg"]
    assert "L7STS" in failed["msg"]


def test_draining_the_last_cluster_of_a_model_warns(gateway, capsys):
    run(capsys, server="pair2", state="maint", socket=gateway["socket"])
    drained = run(capsys, server="pair1", state="drain", socket=gateway["socket"])
    assert drained["others"] == {"model_a": [], "model_b": []}, drained
    assert drained["alone"] == ["model_a", "model_b"], drained
    # Also a warning (Ansible's module warnings are kept once per process: this test may not be the first to say it).
    assert "warnings" not in drained or any("the only cluster serving model_a" in str(w) for w in drained["warnings"])


def test_check_mode_reports_and_sets_nothing(gateway, capsys):
    checked = run(capsys, server="pair1", state="drain", socket=gateway["socket"], _ansible_check_mode=True)
    assert checked["changed"] is True and {r["admin"] for r in checked["servers"]} == {"drain"}
    assert {r["admin"] for r in gateway["api"].servers("pair1")[0]} == {"ready"}


def test_a_name_that_would_chain_a_command_is_refused_and_changes_nothing(gateway, capsys):
    failed = run(capsys, server="pair1;disable frontend api", state="maint", socket=gateway["socket"])
    assert failed["failed"] is True and "is not a plain name" in failed["msg"]
    assert {r["admin"] for r in gateway["api"].servers("pair1")[0]} == {"ready"}
    unknown = run(capsys, server="pair9", state="drain", socket=gateway["socket"])
    assert unknown["failed"] is True and "no server named pair9" in unknown["msg"]


def test_a_missing_socket_names_the_path(tmp_path, capsys):
    failed = run(capsys, server="pair1", socket=str(tmp_path / "none.sock"))
    assert failed["failed"] is True and f"runtime API at {tmp_path / 'none.sock'} did not answer" in failed["msg"]


def test_admin_bits_and_status():
    assert [api.admin_state(b) for b in (0, 0x01, 0x08, 0x10, 0x09, 0x04)] == [
        "ready", "maint", "drain", "drain", "maint", "maint"]
    assert api.is_up("UP") and api.is_up("UP 1/3") and not api.is_up("DOWN 1/2") and not api.is_up("MAINT")
    with pytest.raises(api.GatewayError):
        api.parse_stat("Unknown command\n")


def admin(gateway, name):
    return {r["backend"]: r["admin"] for r in gateway["api"].servers(name)[0]}


def test_l8_a_drain_survives_a_restart_of_the_gateway(gateway, capsys):
    drained = run(capsys, server="pair1", state="drain", socket=gateway["socket"], timeout=20)
    assert drained["changed"] is True
    state_file = gateway["dir"] / api.STATE_FILE
    assert state_file.stat().st_mode & 0o777 == 0o600 and state_file.read_text().startswith("1\n# be_id ")
    gateway["restart"]()
    assert admin(gateway, "pair1") == {"model_a": "drain", "model_b": "drain"}
    assert admin(gateway, "pair2") == {"model_a": "ready", "model_b": "ready"}
    wait_up(gateway["api"], ("pair2",))
    assert {get(gateway["port"], "/a") for _i in range(6)} == {"pair2"}
    # Admitted again: saved too, so the next start admits it.
    run(capsys, server="pair1", state="ready", socket=gateway["socket"], timeout=20)
    gateway["restart"]()
    assert admin(gateway, "pair1") == {"model_a": "ready", "model_b": "ready"}


def test_l8_the_saved_state_never_moves_a_server_the_configuration_moved(gateway, capsys):
    # A cluster whose head changed address (the configuration's) is reached there, not at the saved address.
    run(capsys, server="pair2", state="drain", socket=gateway["socket"], timeout=20)
    # HAProxy alone would apply the saved ports over the new configuration's: without the role's save, pair1 stays
    # at its old door.
    gateway["restart"](swap=True, save=lambda: None)
    assert {get(gateway["port"], "/a") for _i in range(6)} == {"pair1"}
    gateway["restart"](swap=True, save=lambda: run(capsys, socket=gateway["socket"]))
    wait_up(gateway["api"], ("pair1",))
    # pair1 is configured at pair2's door now; pair2 (drained) at pair1's.
    assert {get(gateway["port"], "/a") for _i in range(6)} == {"pair2"}
    assert admin(gateway, "pair2") == {"model_a": "drain", "model_b": "drain"}


def test_l8_a_held_cluster_stays_out_when_a_gateway_run_admits_every_cluster(gateway, capsys):
    before = time.time()
    held = run(capsys, server="pair1", state="drain", hold=600, socket=gateway["socket"], timeout=20)
    assert held["changed"] is True and before + 600 <= held["held"] <= time.time() + 600
    holds = json.loads((gateway["dir"] / api.HOLDS_FILE).read_text())
    assert list(holds) == ["pair1"] and (gateway["dir"] / api.HOLDS_FILE).stat().st_mode & 0o777 == 0o600
    # The gateway role's admission (every cluster that serves) during the rollout: pair1 is left out.
    admitted = run(capsys, server="pair1", state="ready", respect_holds=True, wait=False, socket=gateway["socket"])
    assert admitted["changed"] is False and admitted["held"] == held["held"], admitted
    assert "held out at the gateway by a rollout" in admitted["msg"]
    assert admin(gateway, "pair1") == {"model_a": "drain", "model_b": "drain"}
    other = run(capsys, server="pair2", state="ready", respect_holds=True, wait=False, socket=gateway["socket"])
    assert other["changed"] is False and other["held"] is None
    # The hold survives a restart (a reload during the rollout) with the drain.
    gateway["restart"]()
    again = run(capsys, server="pair1", state="ready", respect_holds=True, wait=False, socket=gateway["socket"])
    assert again["changed"] is False and admin(gateway, "pair1") == {"model_a": "drain", "model_b": "drain"}
    # A rollout that ends without serving releases its hold (hold 0): the cluster stays drained until a gateway run
    # admits it, which it then does.
    released = run(capsys, server="pair1", state="drain", hold=0, wait=False, socket=gateway["socket"])
    assert released["changed"] is True and released["held"] is None
    assert json.loads((gateway["dir"] / api.HOLDS_FILE).read_text()) == {}
    back = run(capsys, server="pair1", state="ready", respect_holds=True, socket=gateway["socket"], timeout=20)
    assert back["changed"] is True and admin(gateway, "pair1") == {"model_a": "ready", "model_b": "ready"}


def test_l8_an_expired_hold_no_longer_holds_and_a_plain_ready_clears_one(gateway, capsys):
    (gateway["dir"] / api.HOLDS_FILE).write_text(json.dumps({"pair1": time.time() - 1, "pair2": time.time() + 600}))
    run(capsys, server="pair1", state="drain", wait=False, socket=gateway["socket"])
    expired = run(capsys, server="pair1", state="ready", respect_holds=True, socket=gateway["socket"], timeout=20)
    assert expired["changed"] is True and expired["held"] is None
    run(capsys, server="pair2", state="drain", wait=False, socket=gateway["socket"])
    forced = run(capsys, server="pair2", state="ready", socket=gateway["socket"], timeout=20)
    assert forced["changed"] is True and forced["held"] is None
    assert json.loads((gateway["dir"] / api.HOLDS_FILE).read_text()) == {}


def test_l8_a_hold_needs_a_drain_and_whole_seconds(gateway, capsys):
    for args in ({"state": "ready", "hold": 60}, {"hold": 60}, {"state": "drain", "hold": -1}):
        failed = run(capsys, server="pair1", socket=gateway["socket"], **args)
        assert failed["failed"] is True and "hold is" in failed["msg"], (args, failed)
    assert admin(gateway, "pair1") == {"model_a": "ready", "model_b": "ready"}
    assert not (gateway["dir"] / api.HOLDS_FILE).exists()
