"""Fixtures for tests that run against the Docker lab (lab/lab.py)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB = [sys.executable, str(REPO / "lab" / "lab.py")]
BIN = Path(sys.executable).parent

# Several labs can run side by side (each with its own prefix, subnets and inventory file), e.g.
#   DGXSPARK_LAB_PREFIX=hyb DGXSPARK_LAB_MGMT_SUBNET=192.168.243.0/24 DGXSPARK_LAB_FABRIC_SUBNET=192.168.110.0/24
# (the twin's subnet, DGXSPARK_LAB_FABRIC2_SUBNET, follows: 192.168.111.0/24).
# Tests must take node names and addresses from these constants or the `lab` fixture, never literals.
# Under pytest-xdist (`make test` runs two workers, a test file per worker at a time), worker gwN for N >= 1 gets a
# lab of its own unless the environment names one: prefix sparkN, mgmt 192.168.(232+N).0/24, fabric
# 192.168.(120+2N).0/24 and its twin the /24 after it. gw0 keeps the default lab.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if re.fullmatch(r"gw[1-9]\d*", _WORKER) and "DGXSPARK_LAB_PREFIX" not in os.environ:
    _N = int(_WORKER[2:])
    os.environ.update(DGXSPARK_LAB_PREFIX=f"spark{_N}", DGXSPARK_LAB_MGMT_SUBNET=f"192.168.{232 + _N}.0/24",
                      DGXSPARK_LAB_FABRIC_SUBNET=f"192.168.{120 + 2 * _N}.0/24")
    os.environ.pop("DGXSPARK_LAB_FABRIC2_SUBNET", None)
    os.environ.pop("DGXSPARK_LAB_INVENTORY", None)
# In step with lab/lab.py: the mgmt network is the LAN; each pair's fabric is point to point, the /28 at offset
# 16*(pair-1) of each fabric /24, head .11 and worker .12 within it.
PREFIX = os.environ.get("DGXSPARK_LAB_PREFIX", "spark")
MGMT_NET = os.environ.get("DGXSPARK_LAB_MGMT_SUBNET", "192.168.240.0/24").split("/")[0].rsplit(".", 1)[0]
_FABRIC_SUBNET = os.environ.get("DGXSPARK_LAB_FABRIC_SUBNET", "192.168.100.0/24")
FABRIC_NET = _FABRIC_SUBNET.split("/")[0].rsplit(".", 1)[0]
FABRIC2_NET = (os.environ.get("DGXSPARK_LAB_FABRIC2_SUBNET") or "").split("/")[0].rsplit(".", 1)[0] or \
    ".".join(FABRIC_NET.split(".")[:2] + [str(int(FABRIC_NET.split(".")[2]) + 1)])
# The inventory file sits in inventories/lab/ so that inventories/lab/group_vars applies to it.
INVENTORY = Path(os.environ.get("DGXSPARK_LAB_INVENTORY",
                                REPO / "inventories" / "lab" / ("hosts.yml" if PREFIX == "spark" else f"hosts-{PREFIX}.yml")))
os.environ.setdefault("DGXSPARK_LAB_INVENTORY", str(INVENTORY))
FABRIC_IFNAMES = ("enp1s0f1np1", "enP2p1s0f1np1")


def node(i):
    """Name of lab node i (1-based)."""
    return f"{PREFIX}-{i}"


def mgmt_ip(i):
    return f"{MGMT_NET}.{10 + i}"


def fabric_host(i):
    return 16 * ((i - 1) // 2) + 11 + (i - 1) % 2


def fabric_ip(i):
    """Node i's address on the first twin (enp1s0f1np1, 192.168.100.x), reachable only from its pair's other node."""
    return f"{FABRIC_NET}.{fabric_host(i)}"


def fabric2_ip(i):
    """Node i's address on the second twin (enP2p1s0f1np1, 192.168.101.x)."""
    return f"{FABRIC2_NET}.{fabric_host(i)}"


def fabric_if(_i=None):
    """Node i's fabric interface: the same name on every node, as NVIDIA's netplan makes it."""
    return FABRIC_IFNAMES[0]


GATEWAY = f"{PREFIX}-gw"  # lab.py up --gateway: the gateway box, on the LAN only (group dgxspark_gateway)


def gateway_url():
    """The gateway's API (roles/gateway) on the gateway box's LAN address (.9 of the mgmt subnet), port 8000, over
    HTTPS (gateway_tls, security review M2)."""
    return f"https://{MGMT_NET}.9:8000"


def gateway_certificate():
    """The gateway's certificate (gateway_tls_certificate_file, public), read on the gateway box."""
    text = run(["docker", "exec", GATEWAY, "cat", "/etc/dgxspark/gateway/tls.crt"]).stdout
    assert "BEGIN CERTIFICATE" in text, "the gateway box has no /etc/dgxspark/gateway/tls.crt"
    return text


def gateway_context():
    """An SSL context that trusts the gateway's certificate alone, as `curl --cacert` does."""
    import ssl  # pylint: disable=import-outside-toplevel
    return ssl.create_default_context(cadata=gateway_certificate())


def api_url(i=1):
    """The API of the pair whose head is node i, on the LAN: what the controller and clients use. Its door speaks TLS
    (gateway_door_tls, security review M2): open it with :func:`api_opener`."""
    return f"https://{mgmt_ip(i)}:8000"


def door_certificate(i=1):
    """The certificate of the door on node i (gateway_door_tls), read on that head: what the clients (or the gateway's
    relay) trust alone."""
    text = node_exec(node(i), "cat", "/etc/dgxspark/gateway-door/tls.crt", check=False).stdout
    assert "BEGIN CERTIFICATE" in text, f"{node(i)}'s door has no certificate"
    return text


def api_opener(i=1):
    """An opener for :func:`api_url` (i): no proxy (the lab's LAN is local), trusting the door's certificate alone, as
    `curl --cacert` does."""
    import ssl  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(
        context=ssl.create_default_context(cadata=door_certificate(i))))


# `make test` runs the tests on two pytest-xdist workers (--dist loadgroup --no-loadscope-reorder), each with a lab of
# its own. Every file is one unit a worker runs whole (its tests build on each other): a file without an xdist_group
# mark is a group of its own (pytest_collection_modifyitems).
#
# ENGINES groups the files whose tests start Ray clusters (or real vLLM, which takes both cores): one worker runs them
# file after file, never beside each other. On two cores, two clusters starting at once starve Ray's raylets past the
# 30 s Ray gives them to register (hard-coded in ray/_private/node.py); measured again with two groups of them, one on
# each worker (a 4-node cluster and the fleet's two pairs failed to form), even with the launcher starting a head
# again. A file that starts Ray sets `pytestmark = [ENGINES, ...]`. Every other file (transfers, builds, preflight,
# config checks, engines without Ray, the unit tests) runs on the other worker meanwhile.
ENGINES = pytest.mark.xdist_group("engines")
# The files' order: the ENGINES group first (it bounds make test's time: keep it under half of the whole), then the
# others. Within the group and among the others: the files marked FIRST (another file waits for what they build), then
# the rest longest first by their `lab_minutes` mark (the file's time in CI's --durations list, rounded up; a file
# without one takes about a minute or less), so that the short ones fill the end, then the files marked LAST. The
# scheduler hands the groups out one at a time to whichever worker is free.
FIRST = pytest.mark.lab_first
# LAST: among the engine files, the fleet's (its two pairs start their Ray heads at once: beside the other worker's
# image builds its heads missed Ray's registration twice in a row), real vLLM's (it takes both cores) and the
# controller-network file run after the pairs' files, longest first: the order of the runs that passed with the lists
# this replaced; among the others, the files that remake a node (another Docker, another image store) run when the
# rest of their worker's files are done.
LAST = pytest.mark.lab_last


def _rel(path):
    return os.path.relpath(str(path), REPO)


def _group(item):
    mark = item.get_closest_marker("xdist_group")
    return None if mark is None else str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def _lab_order(item):
    minutes = item.get_closest_marker("lab_minutes")
    return (0 if _group(item) == ENGINES.args[0] else 1,
            0 if item.get_closest_marker(FIRST.name) else 2 if item.get_closest_marker(LAST.name) else 1,
            -(minutes.args[0] if minutes else 0))


def _name_group(item, group):
    """Give ITEM's ID the `@GROUP` suffix `--dist loadgroup` schedules by, when pytest-xdist could not: it sets
    `item._nodeid`, which pytest 9.2 no longer reads (its IDs are `_id`, a NodeId), so every mark was ignored and the
    tests were spread one by one (pytest-dev/pytest-xdist#1386, open with xdist 3.8.0)."""
    from _pytest.nodeid import NodeId  # pylint: disable=import-outside-toplevel

    item._id = NodeId.parse(f"{item.nodeid}@{group}")  # pylint: disable=protected-access


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Before the other plugins: each lab file without an xdist_group is a group of its own (named by the file), the
    lab's files in their order (above), the lab mark on each (the unit tests are scheduled one by one). After them
    (pytest-xdist's worker names each test's group in its ID): every test's ID ends in its group, as `--dist
    loadgroup` needs."""
    here = str(Path(__file__).parent)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.lab)
            if _group(item) is None:  # a file of its own: the unit a worker runs whole (`--dist loadfile`'s unit)
                item.add_marker(pytest.mark.xdist_group(Path(str(item.fspath)).stem))
    # A stable sort: each file's tests keep their order (they build on each other); the unit and engine tests come
    # after the lab's.
    items.sort(key=lambda item: _lab_order(item) if str(item.fspath).startswith(here) else (2, 0, 0))
    result = yield
    if getattr(config.option, "loadgroup", False):  # a pytest-xdist worker under --dist loadgroup
        for item in items:
            if _group(item) is not None and not item.nodeid.endswith(f"@{_group(item)}"):
                _name_group(item, _group(item))
    return result


# An engine image that passes the hybrid gates and dies when `vllm serve` starts, as a wheel built for another CUDA does.
BREAK = 'raise ImportError("libcudart.so.13: cannot open shared object file: No such file or directory")'
API_SERVER = "/opt/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py"


def broken_image_dockerfile(base, label):
    """A Dockerfile on BASE (a lab engine image) whose `vllm serve` dies at start with BREAK in its log."""
    return f"FROM {base}\nLABEL org.dgxspark.test.release={label}\nRUN printf '{BREAK}\\n' > {API_SERVER}\n"


def load_into(image, *indexes):
    """Copy IMAGE from this machine's engine into the lab nodes INDEXES (docker save | docker load, as a registry-less
    field copy would be)."""
    for i in indexes:
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)  # pylint: disable=consider-using-with
        load = subprocess.run(["docker", "exec", "-i", node(i), "docker", "load", "-q"], stdin=save.stdout,
                              capture_output=True, check=False)
        save.stdout.close()
        assert save.wait() == 0 and load.returncode == 0, load.stderr


def image_inspect(i, ref):
    """`docker image inspect REF` on node I (None when it is not there)."""
    proc = node_exec(node(i), "docker", "image", "inspect", ref, check=False)
    return json.loads(proc.stdout)[0] if proc.returncode == 0 else None


def announce_image(targets, ref, source=1):
    """What the image_sync role does before it sends: ask the module on node SOURCE (check mode) what REF is there
    (its ID, size, image store, content label and fingerprint) and for a nonce, announce that to the nodes TARGETS,
    and return the nonce (the module's requests must carry it; each target takes one)."""
    args = {"image": ref, "targets": [{"host": fabric_ip(i), "name": node(i)} for i in targets]}
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), node(source), "-m", "dgxspark.vllm.image_sync", "-a",
                json.dumps(args), "--check"], check=False, env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    checked = parse_adhoc(proc.stdout)
    assert "nonce" in checked, proc.stdout[-3000:]
    source_info = checked["source"]
    image = {"ref": ref, "id": checked["image_id"], "bytes": source_info["size"], "store": source_info["store"]}
    image.update({k: source_info[k] for k in ("content_label", "fingerprint") if source_info.get(k)})
    run([str(BIN / "ansible"), "-i", str(INVENTORY), ",".join(node(i) for i in targets), "-m",
         "dgxspark.vllm.transfer_announce", "-a", json.dumps({"images": [image], "nonce": checked["nonce"]})],
        env=ansible_env())
    return checked["nonce"]


def image_sync_to(source, target, ref, **options):
    """What the image_sync role does, one target: announce REF (its ID and size on node SOURCE) to node TARGET, then
    run the image_sync module on SOURCE towards it with the announcement's nonce (OPTIONS: more module arguments).
    (result, process)."""
    nonce = announce_image([target], ref, source)
    args = {"image": ref, "targets": [{"host": fabric_ip(target), "name": node(target)}], "nonce": nonce, **options}
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), node(source), "-m", "dgxspark.vllm.image_sync", "-a",
                json.dumps(args)], check=False, env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    return parse_adhoc(proc.stdout), proc


REPORTS = []


def fleet_play(title, role):
    """A one-play playbook over the lab's pairs: the fleet fact published (no preflight: the inventory gives the fabric
    IPs), then ROLE."""
    return f"""---
- name: {title}
  hosts: spark_pairs
  gather_facts: false
  pre_tasks:
    - name: Publish the fleet (no preflight here; the inventory gives the fabric IPs)
      dgxspark.vllm.fleet:
  roles:
    - role: {role}
"""


def report(line):
    """A line for the end of the session's output (pytest's terminal summary), shown even without -s."""
    REPORTS.append(line)
    print(line)


# tests/lab/test_molecule.py keeps molecule's output here; the steps it ran close the session's output.
MOLECULE_LOG = REPO / "tests" / "output" / "molecule.log"
_SESSION_STARTED = time.time()


def molecule_steps(text):
    """The lines of molecule's closing summary: a step per line ("deploy > idempotence: Executed: Successful"; molecule
    draws the arrow as "➜" on a terminal), then a line per scenario with its counts."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return [re.sub(r"^(\w+) ➜ ", r"\1 > ", line) for line in text.splitlines()
            if re.match(r"^\w+ (➜|>) \w+: Executed: ", line) or re.match(r"^\w+\s+: actions=", line)]


def ansible_failures(text, limit=6000, per_failure=1500):
    """Each failed task in an Ansible output: its TASK line, its fatal/failed line and the result under it (YAML
    result format: the indented lines, each failure cut to PER_FAILURE characters), the last LIMIT characters of
    them. A result's stdout/stderr blocks are not copied whole: their lines are read as output of their own, so a
    failure inside a nested ansible-playbook (molecule's converge running the quickstart) is found with its task.
    What a failed molecule step says, where pytest's report would cut it."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    task, out = "", []
    body_indent, skip_indent, budget = None, None, 0
    for line in text.splitlines():
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if not stripped:
            continue
        if body_indent is not None and indent <= body_indent:
            body_indent = None
        if skip_indent is not None and indent <= skip_indent:
            skip_indent = None
        if body_indent is not None and skip_indent is None:
            if re.match(r"(stdout|stderr)(_lines)?:", stripped):
                skip_indent = indent  # its lines are read below as lines of their own
            elif budget > 0:
                out.append(line[:budget])
                budget -= len(line) + 1
                continue
        if stripped.startswith(("TASK [", "PLAY [")):
            task = stripped
        elif re.match(r"^(fatal|failed): \[", stripped) or stripped.startswith(("ERROR!", "[ERROR]")):
            out += [task, stripped[:per_failure]]
            body_indent, skip_indent, budget = indent, None, per_failure
    return "\n".join(out)[-limit:]


def pytest_terminal_summary(terminalreporter):
    if REPORTS:
        terminalreporter.section("lab reports")
        for line in REPORTS:
            terminalreporter.write_line(line)
    if MOLECULE_LOG.exists() and MOLECULE_LOG.stat().st_mtime >= _SESSION_STARTED:
        terminalreporter.section(f"molecule test ({_rel(MOLECULE_LOG)})")
        for line in molecule_steps(MOLECULE_LOG.read_text(errors="replace")):
            terminalreporter.write_line(line)


def run(argv, check=True, env=None, timeout=900, input_text=None):
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, input=input_text,
                          check=False, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    if proc.returncode == 0 and list(map(str, argv[:len(LAB) + 1])) == [*LAB, "up"]:
        _record_lab_engines()  # every lab the tests bring up comes up here (the session's, and each remade one)
    return proc


# ---------------------------------------------------------------- what the run used (the README's Tested-with block)
_TESTED_WITH = []


def tested_with(component, where, version, **detail):
    """Record that the current test used COMPONENT at WHERE (Markdown: an image, a node kind) in VERSION (or what
    calling VERSION returns: what the component answered, read here), as it observed it (tools/tested_with.py renders
    the README's block from the records). Never raises: a recording that fails is printed, and shows as a row missing
    from the block, never as (or instead of) a test failure."""
    try:
        if callable(version):
            version = version()
        if not _TESTED_WITH:
            import importlib.util  # pylint: disable=import-outside-toplevel
            spec = importlib.util.spec_from_file_location("dgxspark_tested_with", REPO / "tools" / "tested_with.py")
            _TESTED_WITH.append(importlib.util.module_from_spec(spec))
            spec.loader.exec_module(_TESTED_WITH[0])
        by = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
        _TESTED_WITH[0].record(component, where, version, by=by, **detail)
    except Exception as err:  # pylint: disable=broad-exception-caught
        print(f"tested-with: {component} at {where} not recorded: {err!r}")


tested_with.__test__ = False  # a helper the test modules import: pytest would collect it by its name


_ENGINES_SEEN = set()  # the node containers whose engine this process recorded already
_ENGINE_PROBE = ('. /etc/os-release && echo "$PRETTY_NAME" && '
                 "docker info --format '{{.ServerVersion}}|{{.Driver}}|{{json .DriverStatus}}'")


def _record_lab_engines():
    """Each lab node's Docker engine as it answers now: its OS, server version and image store (one `docker exec` per
    node not seen before in this process)."""
    try:
        listed = subprocess.run(["docker", "ps", "--filter", "label=org.dgxspark.lab=node", "--filter",
                                 f"label=org.dgxspark.lab.prefix={PREFIX}", "--format", "{{.ID}} {{.Names}}"],
                                capture_output=True, text=True, check=True, timeout=60).stdout.split("\n")
        for line in filter(None, listed):
            cid, name = line.split()
            if cid in _ENGINES_SEEN:
                continue
            probe = subprocess.run(["docker", "exec", name, "sh", "-c", _ENGINE_PROBE], capture_output=True, text=True,
                                   check=True, timeout=60).stdout.strip().splitlines()
            os_name, (version, driver, status) = probe[0], probe[-1].split("|", 2)
            containerd = ["driver-type", "io.containerd.snapshotter.v1"] in (json.loads(status or "null") or [])
            store = "containerd image store" if containerd else f"{driver} graph driver"
            tested_with("docker", f"lab node: {os_name}, {store}", version, node=name)
            _ENGINES_SEEN.add(cid)
    except Exception as err:  # pylint: disable=broad-exception-caught
        print(f"tested-with: the lab's engines not recorded: {err!r}")


def ansible_env(**extra):
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env.update(extra)
    return env


# The collection as it was before the field-fidelity work (issue 12): tests that show a lab point would have caught a
# field failure run this commit's roles against today's lab.
AS_IT_WAS = "1b5e624"


def collection_as_it_was(tmp_path, commit=AS_IT_WAS):
    """COMMIT's tree laid out as the installed collection dgxspark.vllm under TMP_PATH; (its root, the ansible env
    that resolves dgxspark.vllm there and nowhere else)."""
    base = Path(tmp_path) / f"as-it-was-{commit}"
    root = base / "ansible_collections" / "dgxspark" / "vllm"
    root.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", commit], cwd=REPO, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(root)], stdin=archive.stdout, check=True)
    archive.stdout.close()
    assert archive.wait() == 0, f"git archive {commit} failed (a shallow clone has no history: fetch it)"
    return root, ansible_env(ANSIBLE_COLLECTIONS_PATH=str(base))


def node_exec(node, *argv, check=True, input_text=None):
    return run(["docker", "exec", "-i", node, *argv], check=check, input_text=input_text)


def node_run(node, *run_args, check=True):
    """`docker run RUN_ARGS` on NODE's engine, its output read from the container's log once it has exited.

    An attached `docker run` of a short-lived container can come back with its exit code and none of its output
    (moby/moby#27289: `docker exec` output sometimes missing): it failed test_lab.py in CI with rc 0 and an empty
    stdout. The log the daemon keeps of the exited container has all of it, stdout and stderr apart.
    """
    name = f"labkit-run-{uuid.uuid4().hex[:12]}"
    node_exec(node, "docker", "run", "--detach", "--name", name, *run_args)
    try:
        code = int(node_exec(node, "docker", "wait", name).stdout.strip())
        logs = node_exec(node, "docker", "logs", name)
    finally:
        node_exec(node, "docker", "rm", "--force", name, check=False)
    proc = subprocess.CompletedProcess(["docker", "run", *run_args], code, logs.stdout, logs.stderr)
    if check and code != 0:
        raise AssertionError(f"{node}: docker run {' '.join(run_args)}: exit {code}\n{logs.stdout}{logs.stderr}")
    return proc


def engine_key(host):
    """The engine key of the cluster HOST heads (VLLM_API_KEY of its serving env file; each cluster has its own, made
    on its head by vllm_serve), read on the head: what its door and the gateway's relay to it send."""
    key = node_exec(host, "sed", "-n", "s/^VLLM_API_KEY=//p", "/etc/dgxspark/vllm/serve.env").stdout.strip()
    assert key, f"{host} has no engine key in /etc/dgxspark/vllm/serve.env"
    return key


def parse_adhoc(stdout):
    """The JSON result of an ad-hoc `ansible -m` run (ANSIBLE_CALLBACK_RESULT_FORMAT=json)."""
    match = re.search(r"\| (?:SUCCESS|CHANGED|FAILED!?) => (\{.*)", stdout, re.S)
    assert match, stdout[-3000:]
    return json.loads(match.group(1))


def recap(stdout, host):
    """HOST's PLAY RECAP counts."""
    match = re.search(rf"^{re.escape(host)}\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", stdout, re.M)
    assert match, stdout[-3000:]
    return {"ok": int(match.group(1)), "changed": int(match.group(2)), "unreachable": int(match.group(3)),
            "failed": int(match.group(4))}


# A transfer's processes on a node: the transfer program (a receiver or relay hop, or the ssh to one, whose argv ends
# with the program's name), a module run by the controller (pipelined: the bare interpreter) or in the background
# (async: its AnsiballZ file), and any docker save/load CLI.
TRANSFER_PROCESSES = r"dgxspark-transfer|^/usr/bin/python3$|AnsiballZ_(image|model)_sync|docker (save|load)"


def transfer_processes(i):
    """The transfer processes running on node I (one pgrep)."""
    return node_exec(node(i), "pgrep", "-a", "-f", TRANSFER_PROCESSES, check=False).stdout.splitlines()


def probe_transfers(nodes, within, done):
    """Probe NODES (in parallel) until DONE(what runs on each node) or WITHIN seconds from now have passed; the
    seconds it took (measured at the end of the last probe) and what the last probe found on each node."""
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(nodes)) as pool:
        while True:
            found = dict(zip(nodes, pool.map(transfer_processes, nodes)))
            took = time.monotonic() - began
            if done(found) or took >= within:
                return took, found
            time.sleep(0.3)


def wait_until_no_transfer(nodes, within):
    """Until no transfer process runs on any of NODES, for at most WITHIN s; (seconds, what was left on each)."""
    return probe_transfers(nodes, within, lambda found: not any(found.values()))


def wait_until_transfer(nodes, within):
    """Until a transfer process runs on one of NODES, for at most WITHIN s; (seconds, what was found: nothing
    anywhere means none began)."""
    return probe_transfers(nodes, within, lambda found: any(found.values()))


def tx_bytes(i):
    """Bytes node I's fabric interface has sent."""
    return int(node_exec(node(i), "cat", f"/sys/class/net/{fabric_if(i)}/statistics/tx_bytes").stdout)


@contextlib.contextmanager
def throttled(i, rate):
    """Node I's fabric egress slowed to RATE (e.g. "60mbit") inside the block, so a stream takes seconds."""
    node_exec(node(i), "tc", "qdisc", "add", "dev", fabric_if(i), "root", "tbf", "rate", rate, "burst", "256kb",
              "latency", "400ms")
    try:
        yield
    finally:
        node_exec(node(i), "tc", "qdisc", "del", "dev", fabric_if(i), "root", check=False)


def cut_midway(module, args, after_bytes, signal="-KILL", during=None):
    """Run MODULE with ARGS on node 1 towards node 2; once node 1 has sent AFTER_BYTES over the fabric, call DURING
    (if given, to look at node 2 mid-stream) and kill node 2's transfer program with SIGNAL. The module's JSON result,
    its return code and its output."""
    start_tx = tx_bytes(1)
    with subprocess.Popen([str(BIN / "ansible"), "-i", str(INVENTORY), node(1), "-m", module, "-a", json.dumps(args)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"), cwd=REPO) as job:
        deadline = time.monotonic() + 60
        while tx_bytes(1) - start_tx < after_bytes:
            assert job.poll() is None and time.monotonic() < deadline, "the transfer ended before it could be cut"
            time.sleep(0.2)
        if during:
            during()
        pids = node_exec(node(2), "pgrep", "-f", "dgxspark-transfer").stdout.split()
        assert pids
        node_exec(node(2), "kill", signal, *pids)
        out, _err = job.communicate(timeout=120)
    return parse_adhoc(out), job.returncode, out


# The network between the controller and a real Spark (a NAT, a stateful firewall, a VPN) cuts SSH sessions; the lab's
# controller sits on a local bridge that never does. lab/session_cut.py, run inside a node, cuts them there.
SESSION_CUT = REPO / "lab" / "session_cut.py"
SESSION_CUT_BIN = "/usr/local/sbin/dgxspark-lab-session-cut"
SESSION_CUT_LOG = "/run/dgxspark-lab-cut.log"
SESSION_CUT_PID = "/run/dgxspark-lab-cut.pid"
# The ssh options of an operator whose ssh config sends no keepalives (what OpenSSH does by default): the checkout's
# ansible.cfg without ServerAliveInterval/ServerAliveCountMax.
SSH_ARGS_NO_KEEPALIVE = "-o ControlMaster=auto -o ControlPersist=60s"


def controller_ip():
    """The controller's address as the nodes see it: the LAN bridge's gateway."""
    return f"{MGMT_NET}.1"


@contextlib.contextmanager
def sessions_cut(*indexes, idle=None, max_age=None):
    """Inside the block, nodes INDEXES cut the controller's SSH flows (lab/session_cut.py): each flow that carried
    nothing for IDLE seconds (a NAT or firewall expiring it), and/or each flow MAX_AGE seconds after it began, traffic
    or not (a VPN reconnecting). Yields a function returning the cuts logged so far, {index: [line, ...]}."""
    options = (["--idle", str(idle)] if idle is not None else []) + (
        ["--max-age", str(max_age)] if max_age is not None else [])
    assert options, "sessions_cut needs idle, max_age or both"
    script = SESSION_CUT.read_text(encoding="utf-8")
    for i in indexes:
        node_exec(node(i), "sh", "-c", f"cat > {SESSION_CUT_BIN} && chmod 0755 {SESSION_CUT_BIN} && "
                                       f"rm -f {SESSION_CUT_LOG} {SESSION_CUT_PID}", input_text=script)
        run(["docker", "exec", "-d", node(i), "python3", SESSION_CUT_BIN, "--peer", controller_ip(), *options,
             "--log", SESSION_CUT_LOG, "--pidfile", SESSION_CUT_PID])
    try:
        for i in indexes:  # started: it wrote its pid file
            deadline = time.monotonic() + 20
            while node_exec(node(i), "test", "-s", SESSION_CUT_PID, check=False).returncode != 0:
                assert time.monotonic() < deadline, f"the session cutter did not start on {node(i)}"
                time.sleep(0.2)
        yield lambda: {i: node_exec(node(i), "cat", SESSION_CUT_LOG, check=False).stdout.splitlines()
                       for i in indexes}
    finally:
        for i in indexes:
            node_exec(node(i), "sh", "-c", f"kill $(cat {SESSION_CUT_PID}) 2>/dev/null; rm -f {SESSION_CUT_PID}",
                      check=False)


@pytest.fixture(scope="session")
def lab():
    """A running lab (two nodes, or DGXSPARK_LAB_NODES) for the whole session; removed at the end unless DGXSPARK_LAB_KEEP=1."""
    run([str(REPO / "lab" / "docker-engine.sh")])
    run([*LAB, "up", "--nodes", os.environ.get("DGXSPARK_LAB_NODES", "2")])
    hosts = json.loads(run([str(BIN / "ansible-inventory"), "-i", str(INVENTORY), "--list"],
                           env=ansible_env()).stdout)
    yield hosts
    if os.environ.get("DGXSPARK_LAB_KEEP") != "1":
        run([*LAB, "down", "--keep-images"], check=False)


WHEEL_CACHE = Path.home() / ".cache" / "dgxspark-lab" / "wheels"
NODE_WHEELS = "/var/tmp/dgxspark-test-wheels"


def wheelhouse(*requirements, index=1, lock=None):
    """A directory of wheels for REQUIREMENTS (and their dependencies), or of every file of the hashed LOCK, on node
    INDEX; returns its path there.

    Lab nodes have no route to a package index. The wheels are downloaded once with this machine's pip (cached in
    ~/.cache/dgxspark-lab/wheels): the lab images' Python is Debian 12's 3.11 on this machine's CPU architecture,
    as the controller's virtualenv is. A LOCK's files are checked against its hashes (--require-hashes).
    """
    lock_text = Path(lock).read_text(encoding="utf-8") if lock else ""
    key = hashlib.sha256(json.dumps([sys.version_info[:2], *requirements, lock_text]).encode()).hexdigest()[:12]
    local = WHEEL_CACHE / key
    if not local.is_dir():
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=WHEEL_CACHE, prefix=".download-"))
        what = ["--no-deps", "--require-hashes", "-r", str(lock)] if lock else list(requirements)
        run([str(BIN / "pip"), "download", "-q", "--only-binary=:all:", "-d", str(tmp), *what])
        tmp.rename(local)
    target = node(index)
    remote = f"{NODE_WHEELS}/{key}"
    if node_exec(target, "test", "-d", remote, check=False).returncode != 0:
        node_exec(target, "mkdir", "-p", f"{NODE_WHEELS}/.incoming")
        node_exec(target, "rm", "-rf", f"{NODE_WHEELS}/.incoming/{key}")
        run(["docker", "cp", str(local), f"{target}:{NODE_WHEELS}/.incoming/{key}"])
        node_exec(target, "mv", f"{NODE_WHEELS}/.incoming/{key}", remote)
    return remote


def png_pixels(path):
    """(width, height, set of distinct RGB(A) pixels) of an 8-bit RGB/RGBA PNG (what matplotlib's Agg writes), read
    with zlib and struct only: the lab tests look at the benchmark's plot without an image library."""
    import struct  # pylint: disable=import-outside-toplevel
    import zlib  # pylint: disable=import-outside-toplevel

    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour = header[:4]
    assert depth == 8 and colour in (2, 6), f"{path}: bit depth {depth}, colour type {colour}"
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    previous, colours = bytearray(stride), set()
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - bpp] if x >= bpp else 0
            up, corner = previous[x], previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - corner
                best = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
                line[x] = (line[x] + best[2]) & 0xFF
        colours.update(bytes(line[i:i + bpp]) for i in range(0, stride, bpp))
        previous = line
    return width, height, colours
