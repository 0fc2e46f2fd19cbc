#!/usr/bin/env python3
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""image_sync against the raw ``docker save | ssh peer docker load`` pipe, measured in one run on the lab.

For the same image, from lab node 1 (the source) over the lab's fabric network, every round times:

  raw x1        docker save IMG | ssh <node 2 fabric IP> docker load          (a plain, temporary key)
  image_sync x1 the module towards node 2
  raw x3 serial the raw pipe to node 2, then node 3, then node 4 (one after another); "raw x2 serial" is its first two
  image_sync x2 the module towards nodes 2 and 3 (relay chain)
  image_sync x3 the module towards nodes 2, 3 and 4 (relay chain)

Before each case the image is removed from the peers, so every transfer is a fresh one. The fabric interface's
tx_bytes counter of every node is read before and after each case. The order of the cases alternates between rounds,
and the table shows the median of the rounds. See bench/README.md for how to read it.

With --delta it measures the layer delta instead (issue 17): node 1 becomes a Docker 26 node with overlay2 (`lab.py
up --docker26 1`: the OCI archive layout of Docker 25 and later and a graph driver, as DGX OS's Docker 28), node 2 holds
IMAGE (the donor) already, and a new image (IMAGE plus one layer of --new-mb MB, a rollout's overlay) moves from node
1 to node 2 with image_sync, the delta on and off in turn (each round removes the new image from node 2 again). It
prints the bytes the source sent against the new layer's size and against the whole archive, in the same run.

Usage: python3 bench/transfer.py [--image lab/vllm-node:0.14] [--rounds N] [--keep-lab] [--delta [--new-mb 64]]
The lab (lab/lab.py) is brought up or grown to four nodes as needed and given back as it was found, unless --keep-lab.
Honours DGXSPARK_LAB_PREFIX, DGXSPARK_LAB_MGMT_SUBNET and DGXSPARK_LAB_FABRIC_SUBNET like the lab itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAB = [sys.executable, str(REPO / "lab" / "lab.py")]
_VENV_BIN = REPO / ".venv" / "bin"
BIN = _VENV_BIN if (_VENV_BIN / "ansible").exists() else Path(shutil.which("ansible") or "/usr/bin/ansible").parent

PREFIX = os.environ.get("DGXSPARK_LAB_PREFIX", "spark")
FABRIC_NET = os.environ.get("DGXSPARK_LAB_FABRIC_SUBNET", "192.168.100.0/24").split("/")[0].rsplit(".", 1)[0]
INVENTORY = Path(os.environ.get("DGXSPARK_LAB_INVENTORY",
                                REPO / "inventories" / "lab" / ("hosts.yml" if PREFIX == "spark" else f"hosts-{PREFIX}.yml")))
FABRIC_IFNAMES = ("enp1s0f1np1", "enP2p1s0f1np1")
NODES = 4
PEERS = (2, 3, 4)
TRUST_DIR = "/etc/dgxspark/transfer"
RAW_KEY = "/root/.ssh/dgxspark-bench-raw"
RAW_MARK = "dgxspark-bench-raw"
# lab/lab.py's engine images, by tag: `lab.py images NAME` builds them when this machine lacks them.
LAB_IMAGES = {"lab/vllm-node:0.14": "vllm-node-0.14", "lab/vllm-qwen35:0.17": "vllm-qwen35-0.17"}

TRUST_PLAY = """---
- name: Transfer trust (bench)
  hosts: spark_pairs
  gather_facts: false
  pre_tasks:
    - name: Publish the fleet (no preflight here; the inventory gives the fabric IPs)
      dgxspark.vllm.fleet:
  roles:
    - role: dgxspark.vllm.node_trust
"""

# Runs on the source node as `bash -c RAW_PIPE bench IMAGE HOST KEY KNOWN_HOSTS`; prints "<rc> <nanoseconds>".
RAW_PIPE = r"""set -o pipefail
t0=$(date +%s%N)
docker save "$1" | ssh -T -x -i "$3" -o IdentitiesOnly=yes -o IdentityAgent=none -o BatchMode=yes \
    -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$4" -o GlobalKnownHostsFile=/dev/null \
    -o Compression=no -o LogLevel=ERROR -l root -- "$2" docker load -q >/dev/null
rc=$?
t1=$(date +%s%N)
echo "$rc $((t1 - t0))"
"""


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def run(argv: list, check: bool = True, env: dict | None = None, input_text: str | None = None,
        timeout: float = 1800) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, input=input_text,
                          timeout=timeout, check=False, cwd=REPO)
    if check and proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(map(str, argv))[:200]} failed ({proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def node(i: int) -> str:
    return f"{PREFIX}-{i}"


def fabric_ip(i: int) -> str:
    """As lab/lab.py numbers them: head .11 and worker .12 in each pair's block of 16."""
    return f"{FABRIC_NET}.{16 * ((i - 1) // 2) + 11 + (i - 1) % 2}"


def fabric_if(_i: int) -> str:
    return FABRIC_IFNAMES[0]  # the same name on every node, as NVIDIA's netplan makes it


def nexec(i: int, *argv, check: bool = True, input_text: str | None = None) -> subprocess.CompletedProcess:
    return run(["docker", "exec", "-i", node(i), *argv], check=check, input_text=input_text)


def ansible_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env.update(extra)
    return env


# --------------------------------------------------------------------------- the lab

def lab_nodes() -> list[str]:
    out = run(["docker", "ps", "--filter", "label=org.dgxspark.lab=node", "--filter",
               f"label=org.dgxspark.lab.prefix={PREFIX}", "--format", "{{.Names}}"]).stdout.split()
    return sorted(out, key=lambda n: int(n.rsplit("-", 1)[1]))


def image_id(i: int | None, ref: str) -> str | None:
    argv = ["docker", "image", "inspect", "--format", "{{.Id}}", ref]
    proc = run(argv if i is None else ["docker", "exec", node(i), *argv], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_image(image: str) -> str:
    """IMAGE on this machine (built by the lab when it is one of its images) and in node 1; its ID."""
    want = image_id(None, image)
    if want is None:
        if image not in LAB_IMAGES:
            raise SystemExit(f"bench: {image} is not in this machine's engine (and is not a lab image)")
        log(f"building {image} (lab/lab.py images {LAB_IMAGES[image]})")
        run([*LAB, "images", LAB_IMAGES[image]])
        want = image_id(None, image)
    if image_id(1, image) != want:
        log(f"loading {image} into {node(1)}")
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)  # pylint: disable=consider-using-with
        load = subprocess.run(["docker", "exec", "-i", node(1), "docker", "load", "-q"], stdin=save.stdout,
                              capture_output=True, check=False)
        save.stdout.close()
        if save.wait() != 0 or load.returncode != 0:
            raise SystemExit(f"bench: loading {image} into {node(1)} failed: {load.stderr.decode(errors='replace')}")
    return want


def descendants(i: int, ident: str) -> list[str]:
    """Images on node I built on IDENT (their chain of parents leads to it), each after its own children."""
    ids = sorted(set(nexec(i, "docker", "image", "ls", "-a", "-q", "--no-trunc").stdout.split()))
    if not ids:
        return []
    children: dict[str, list[str]] = {}
    for line in nexec(i, "docker", "image", "inspect", "--format", "{{.Id}} {{.Parent}}", *ids).stdout.splitlines():
        fields = line.split()
        if len(fields) == 2:
            children.setdefault(fields[1], []).append(fields[0])
    order, todo = [], list(children.get(ident, []))
    while todo:
        child = todo.pop()
        order.append(child)
        todo += children.get(child, [])
    return order[::-1]


def drop(peers: tuple[int, ...], image: str, ident: str) -> None:
    """Remove IMAGE (tag and ID, so no layer is left for a load to skip) from PEERS.

    Docker refuses to remove an image that other images were built on (a hybrid overlay built on a peer by a deploy,
    for example), and those images would keep its layers, so a load would skip them. They are removed first, and
    logged; a container that uses IMAGE or one of them stops the bench instead (it is not the bench's to remove).
    """
    for i in peers:
        if image_id(i, ident) is None:
            continue
        users = nexec(i, "docker", "ps", "-a", "--filter", f"ancestor={ident}", "--format", "{{.Names}}").stdout.split()
        if users:
            raise SystemExit(f"bench: containers on {node(i)} use {image} or an image built on it: {', '.join(users)}; "
                             "remove them (for example with the dgxspark.vllm.teardown playbook) and run the bench again")
        children = descendants(i, ident)
        if children:
            log(f"removing {len(children)} image(s) built on {image} from {node(i)}: "
                + ", ".join(c.split(":")[-1][:12] for c in children))
            nexec(i, "docker", "image", "rm", "-f", *children)
        nexec(i, "docker", "image", "rm", "-f", image, ident, check=False)
        if image_id(i, ident) is not None:
            raise SystemExit(f"bench: {image} ({ident}) is still on {node(i)} after docker image rm")


def tx_bytes() -> dict[int, int]:
    return {i: int(nexec(i, "cat", f"/sys/class/net/{fabric_if(i)}/statistics/tx_bytes").stdout)
            for i in range(1, NODES + 1)}


# --------------------------------------------------------------------------- trust

def trust_present() -> bool:
    return nexec(1, "test", "-e", f"{TRUST_DIR}/id_ed25519", check=False).returncode == 0


def node_trust(state: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trust.yml"
        path.write_text(TRUST_PLAY)
        run([BIN / "ansible-playbook", "-i", INVENTORY, path, "-e", f"node_trust_state={state}"], env=ansible_env())


def raw_key_remove() -> None:
    nexec(1, "rm", "-f", RAW_KEY, RAW_KEY + ".pub", check=False)
    for i in PEERS:
        nexec(i, "sed", "-i", f"/ {RAW_MARK}$/d", "/root/.ssh/authorized_keys", check=False)


def raw_key_setup() -> None:
    """A plain key (no forced command) from node 1 to the peers, accepted from node 1's fabric address only."""
    raw_key_remove()
    nexec(1, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", RAW_MARK, "-f", RAW_KEY)
    pub = nexec(1, "cat", RAW_KEY + ".pub").stdout.strip()
    for i in PEERS:
        nexec(i, "sh", "-c", "umask 077; mkdir -p /root/.ssh; cat >> /root/.ssh/authorized_keys",
              input_text=f'from="{fabric_ip(1)}" {pub}\n')


# --------------------------------------------------------------------------- the cases

def raw_pipe(image: str, peer: int) -> float:
    """Seconds of `docker save | ssh peer docker load` as node 1 measures it."""
    proc = nexec(1, "bash", "-c", RAW_PIPE, "bench", image, fabric_ip(peer), RAW_KEY, f"{TRUST_DIR}/known_hosts",
                 check=False)
    fields = proc.stdout.split()
    if proc.returncode != 0 or len(fields) != 2 or fields[0] != "0":
        raise SystemExit(f"bench: the raw pipe to {node(peer)} failed: {proc.stdout} {proc.stderr}")
    return int(fields[1]) / 1e9


def announce(image: str, peers: tuple[int, ...]) -> str:
    """What the image_sync role does before the module sends (not timed): tell the peers what they may receive, with
    a fresh nonce (returned: the module's requests carry it)."""
    found = nexec(1, "docker", "image", "inspect", "--format", "{{.Id}} {{.Size}}", image).stdout.split()
    nonce = secrets.token_hex(16)
    args = {"images": [{"ref": image, "id": found[0], "bytes": int(found[1])}], "nonce": nonce}
    run([BIN / "ansible", "-i", INVENTORY, ",".join(node(i) for i in peers), "-m", "dgxspark.vllm.transfer_announce",
         "-a", json.dumps(args)], env=ansible_env())
    return nonce


def image_sync(image: str, peers: tuple[int, ...], delta: bool = True) -> dict:
    nonce = announce(image, peers)
    args = {"image": image, "targets": [{"host": fabric_ip(i), "name": node(i)} for i in peers], "delta": delta,
            "nonce": nonce}
    proc = run([BIN / "ansible", "-i", INVENTORY, node(1), "-m", "dgxspark.vllm.image_sync", "-a", json.dumps(args)],
               check=False, env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    match = re.search(r"\| (?:SUCCESS|CHANGED|FAILED!?) => (\{.*)", proc.stdout, re.S)
    if proc.returncode != 0 or not match:
        raise SystemExit(f"bench: image_sync to {peers} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    result = json.loads(match.group(1))
    actions = [t["action"] for t in result["targets"]]
    if actions != ["transfer"] * len(peers):
        raise SystemExit(f"bench: image_sync did not transfer to every peer (a fresh run was expected): {actions}")
    return result


def case(name: str, image: str, ident: str, peers: tuple[int, ...], fn) -> dict:
    drop(PEERS, image, ident)
    # The lab's engines write to this machine's disks: flush what the previous case and the removal left in the page
    # cache, so that its writeback is not charged to this case.
    os.sync()
    before = tx_bytes()
    seconds, extra = fn()
    after = tx_bytes()
    for i in peers:
        if image_id(i, image) != ident:
            raise SystemExit(f"bench: after '{name}' {node(i)} does not have {image} as {ident}")
    row = {"case": name, "peers": len(peers), "seconds": seconds,
           "tx": {i: after[i] - before[i] for i in range(1, NODES + 1)}}
    row.update(extra)
    log(f"  {name:<16} {seconds:7.2f} s  source sent {row['tx'][1] / 1e6:8.1f} MB")
    return row


def round_cases(image: str, ident: str, reverse: bool) -> list[dict]:
    def raw1():
        return raw_pipe(image, 2), {}

    def raw3():
        parts = [raw_pipe(image, i) for i in PEERS]
        return sum(parts), {"parts": parts}

    def sync(peers):
        def go():
            result = image_sync(image, peers)
            return result["elapsed"], {"archive": result["bytes_sent"], "stream_seconds": result["seconds"]}
        return go

    plan = [("raw x1", (2,), raw1), ("image_sync x1", (2,), sync((2,))),
            ("raw x3 serial", PEERS, raw3), ("image_sync x2", (2, 3), sync((2, 3))),
            ("image_sync x3", PEERS, sync(PEERS))]
    if reverse:
        plan.reverse()
    return [case(name, image, ident, peers, fn) for name, peers, fn in plan]


# --------------------------------------------------------------------------- report

def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def report(image: str, rows: list[dict], rounds: int, archive: int, size: int) -> list[str]:
    by_case: dict[str, list[dict]] = {}
    for row in rows:
        by_case.setdefault(row["case"], []).append(row)
        if row["case"] == "raw x3 serial":  # its first two pipes are the serial raw pipe to two peers
            by_case.setdefault("raw x2 serial", []).append(
                {"case": "raw x2 serial", "peers": 2, "seconds": sum(row["parts"][:2]), "tx": None})

    def med(name, key="seconds"):
        return median([r[key] for r in by_case[name]])

    def med_tx(name, i):
        values = [r["tx"][i] for r in by_case[name] if r["tx"] is not None]
        return median(values) if values else None

    order = ["raw x1", "image_sync x1", "raw x2 serial", "image_sync x2", "raw x3 serial", "image_sync x3"]
    mb = archive / 1e6
    width = max(11, len(f"tx MB {node(NODES)}"))
    lines = [
        f"image {image}: docker save archive {mb:.1f} MB ({archive} bytes), image size {size / 1e6:.1f} MB",
        f"source {node(1)} ({fabric_if(1)} {fabric_ip(1)}), peers " + ", ".join(node(i) for i in PEERS)
        + f"; {rounds} round(s), medians; this machine has {os.cpu_count()} CPU(s) shared by every lab node",
        "",
        f"{'case':<15} {'peers':>5} {'seconds':>8} {'stream s':>8} {'MB/s':>7}   "
        + " ".join(f"{'tx MB ' + node(i):>{width}}" for i in range(1, NODES + 1)) + f" {'src/archive':>11}",
    ]
    for name in order:
        rs = by_case[name]
        seconds = med(name)
        peers = rs[0]["peers"]
        txs = [med_tx(name, i) for i in range(1, NODES + 1)]
        cells = " ".join(f"{'-' if v is None else f'{v / 1e6:.1f}':>{width}}" for v in txs)
        ratio = "-" if txs[0] is None else f"{txs[0] / archive:.2f}"
        stream = f"{med(name, 'stream_seconds'):.2f}" if "stream_seconds" in rs[0] else "-"
        lines.append(f"{name:<15} {peers:>5} {seconds:>8.2f} {stream:>8} {peers * mb / seconds:>7.1f}   {cells} {ratio:>11}")
    lines.append("")
    lines.append("MB/s = peers x archive MB / seconds (what reached the peers per second). image_sync seconds are the "
                 "module's own elapsed time on the source (identity checks, stream, load, verification), 'stream s' its "
                 "transfer phase alone (stream and load); raw seconds are timed on the source around the pipe. "
                 "Ansible's controller overhead is in neither.")
    raw1, sync1 = med("raw x1"), med("image_sync x1")
    raw3, sync3 = med("raw x3 serial"), med("image_sync x3")
    src3 = med_tx("image_sync x3", 1)
    raw_src3 = med_tx("raw x3 serial", 1)
    through = raw1 / sync1
    stream1 = med("image_sync x1", "stream_seconds")
    lines += [
        "",
        f"throughput image_sync x1 / raw x1          {through:5.2f}x  (raw {raw1:.2f} s, image_sync {sync1:.2f} s "
        f"end to end; bar: >= 0.90x) {'PASS' if through >= 0.9 else 'FAIL'}",
        f"  the same, transfer phase only            {raw1 / stream1:5.2f}x  (image_sync stream and load {stream1:.2f} s)",
        f"time image_sync x3 / raw x3 serial         {sync3 / raw3:5.2f}   (image_sync {sync3:.2f} s, 3 raw pipes "
        f"{raw3:.2f} s; bar: <= 1.00) {'PASS' if sync3 <= raw3 else 'FAIL'}",
        f"time image_sync x2 / raw x2 serial         {med('image_sync x2') / med('raw x2 serial'):5.2f}",
        f"source bytes / archive, image_sync x3      {src3 / archive:5.2f}   (about one image's worth: "
        f"{'PASS' if src3 / archive < 1.35 else 'FAIL'}); raw x3 serial: {raw_src3 / archive:.2f}",
        "",
        f"Every lab node runs on the same {os.cpu_count()} CPU(s), so each relay hop's docker load competes with the "
        "source and the other hops for them: the fan-out gain in time that separate machines would show cannot show "
        "here. The bytes do: the source's fabric interface sends one copy for three peers, and each peer but the last "
        "forwards one.",
    ]
    return lines


def load(image: str, i: int) -> None:
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)  # pylint: disable=consider-using-with
    done = subprocess.run(["docker", "exec", "-i", node(i), "docker", "load", "-q"], stdin=save.stdout,
                          capture_output=True, check=False)
    save.stdout.close()
    if save.wait() != 0 or done.returncode != 0:
        raise SystemExit(f"bench: loading {image} into {node(i)} failed: {done.stderr.decode(errors='replace')}")


def delta_bench(args: argparse.Namespace) -> int:
    """The layer delta: a new image on a donor node 2 holds, from a Docker 26 node 1, delta on and off in turn."""
    before_nodes = len(lab_nodes())
    log(f"lab {PREFIX}: node 1 becomes a Docker 26 node (overlay2), node 2 a Docker 20.10 node")
    run([*LAB, "up", "--nodes", str(max(2, before_nodes)), "--no-engine-images", "--docker26", "1"], timeout=1800)
    new = f"dgxspark-bench/delta:{os.getpid()}"
    ensure_image(args.image)
    run(["docker", "build", "--no-cache", "-q", "-t", new, "-"],
        input_text=f"FROM {args.image}\nRUN head -c {args.new_mb}M /dev/urandom > /bench-new-layer\n")
    try:
        load(args.image, 2)
        load(new, 1)
        node_trust("present")
        size = int(nexec(1, "docker", "image", "inspect", "--format", "{{.Size}}", new).stdout)
        layer = size - int(nexec(1, "docker", "image", "inspect", "--format", "{{.Size}}", args.image).stdout)
        rows = []
        for r in range(args.rounds):
            for delta in ((True, False) if r % 2 == 0 else (False, True)):
                nexec(2, "docker", "image", "rm", "-f", new, check=False)
                result = image_sync(new, (2,), delta=delta)
                rows.append({"delta": delta, "bytes": result["bytes_sent"], "seconds": result["elapsed"],
                             "left_out": (result.get("delta") or {}).get("left_out")})
                log(f"  round {r + 1} delta={'on ' if delta else 'off'} {result['bytes_sent']:>12} bytes "
                    f"{result['elapsed']:6.2f} s")
        on = [x for x in rows if x["delta"]]
        off = [x for x in rows if not x["delta"]]
        sent_on, sent_off = median([x["bytes"] for x in on]), median([x["bytes"] for x in off])
        time_on, time_off = median([x["seconds"] for x in on]), median([x["seconds"] for x in off])
        print(f"layer delta, {args.rounds} round(s), medians; {node(1)} Docker 26 (overlay2) -> {node(2)} "
              f"Docker 20.10 holding {args.image}:")
        print(f"  new layer {layer} bytes, whole image {size} bytes")
        print(f"  delta on : sent {sent_on:>12.0f} bytes = {sent_on / layer:.3f}x the new layer (goal <= 1.1x), "
              f"{sent_on / sent_off:.4f}x the whole archive; {time_on:.2f} s; {on[0]['left_out']} layer blobs left out")
        print(f"  delta off: sent {sent_off:>12.0f} bytes = the whole archive; {time_off:.2f} s "
              f"(delta on takes {time_on / time_off:.2f}x the time)")
    finally:
        for i in (1, 2):
            nexec(i, "docker", "image", "rm", "-f", new, check=False)
        run(["docker", "image", "rm", "-f", new], check=False)
        if not args.keep_lab:  # back to graph-driver nodes, as many as the session had
            if before_nodes == 0:
                run([*LAB, "down", "--keep-images"], check=False)
            else:
                run([*LAB, "up", "--nodes", str(before_nodes), "--no-engine-images"], check=False, timeout=1800)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/transfer.py", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--image", default="lab/vllm-node:0.14", help="the image to move (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every case; the table shows medians")
    parser.add_argument("--keep-lab", action="store_true",
                        help="leave the lab as the bench left it (four nodes, trust, image on node 1)")
    parser.add_argument("--delta", action="store_true", help="measure the layer delta instead (see above)")
    parser.add_argument("--new-mb", type=int, default=64, help="--delta: the new layer's size in MB")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.delta:
        return delta_bench(args)
    load_before = os.getloadavg()

    before_nodes = len(lab_nodes())
    log(f"lab {PREFIX}: {before_nodes} node(s) running; bringing it to {max(NODES, before_nodes)}")
    # One cluster of four on a switched fabric: node 1 is its head, and a relay chain runs down its members (a node
    # forwards only to the members after it in its own cluster).
    run([*LAB, "up", "--nodes", str(max(NODES, before_nodes)), "--no-engine-images", "--fabric-topology", "switch",
         "--cluster-size", str(NODES)])
    had_trust = trust_present()
    had_image = image_id(1, args.image)
    ident = ensure_image(args.image)
    try:
        node_trust("present")
        raw_key_setup()
        size = int(nexec(1, "docker", "image", "inspect", "--format", "{{.Size}}", args.image).stdout)
        archive = int(nexec(1, "sh", "-c", 'docker save "$1" | wc -c', "bench", args.image).stdout)  # also warms caches
        rows = []
        for r in range(args.rounds):
            log(f"round {r + 1}/{args.rounds}")
            rows += round_cases(args.image, ident, reverse=bool(r % 2))
        print("\n".join(report(args.image, rows, args.rounds, archive, size)), flush=True)
        print(f"load average of this machine: {load_before[0]:.1f} before the run, {os.getloadavg()[0]:.1f} after "
              "(other work on it adds noise; the rounds interleave the cases to spread it)", flush=True)
    finally:
        raw_key_remove()
        drop(PEERS, args.image, ident)
        if not args.keep_lab:
            if not had_trust and before_nodes:
                node_trust("absent")
            if had_image is None and before_nodes:
                nexec(1, "docker", "image", "rm", args.image, check=False)
            if before_nodes == 0:
                run([*LAB, "down", "--keep-images"], check=False)
            else:  # the session's node count, back on point-to-point pairs
                run([*LAB, "up", "--nodes", str(before_nodes), "--no-engine-images"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
