"""The operator of the `fresh` scenario: docs/quickstart.md run as written, against the lab's fresh nodes.

    first_run.py setup  --work DIR   the quickstart up to the deploy: the collection built and installed from its
                                     tarball into a clean HOME, the example inventory copied and addressed to the lab,
                                     the vault made and encrypted (done again only when the tarball changed)
    first_run.py deploy --work DIR   the quickstart's deploy command (prints the run; "changed=N" of its recap last)
    first_run.py verify --work DIR   the quickstart's first request, through the gateway

Every shell block docs/quickstart.md marks `<!-- fresh: run -->` runs in order with bash, in DIR/operator, in an
environment with nothing of the checkout's (no ANSIBLE_* variable, no ansible.cfg, HOME=DIR/home). What the page
leaves to a person is done here and said here:
  - its password prompts read files (SUBSTITUTIONS): nobody types at a test;
  - `ansible-galaxy collection install` is tools/install-collection.sh, which installs the same tarball into the same
    ~/.ansible/collections offering the dependencies bundled in the virtualenv's ansible package (Ansible Galaxy is not
    reachable from the build machines);
  - `<!-- fresh: edit inventory/hosts.yml -->`: the example's pair_a and gateway get the lab's addresses, and the lab's
    differences from a site go to group_vars/lab.yml (the registry's references, the lab's key, the preflight's
    thresholds for a lab disk), a group that holds every host.
Each substitution must match the page (`check` in tests/unit/test_quickstart.py): a quickstart that changed its
commands changes what this runs, or fails that test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "docs" / "quickstart.md"
EXAMPLE = REPO / "inventories" / "example"
LAB_VARS = REPO / "inventories" / "lab" / "group_vars" / "all.yml"
VENV_BIN = Path(sys.executable).parent
MARK = re.compile(r"^<!-- fresh: (run|edit (\S+)) -->\s*$")
# The example's names for what the lab has: its pair_a (two Sparks) and its gateway box, which is also its monitoring
# host (the lab's gateway box, lab.py up --gateway).
PAIR, GATEWAY_GROUP, MONITORING_GROUP = "pair_a", "dgxspark_gateway", "dgxspark_monitoring"
# The lab's images a site pulls from its registry, by the variable that names them (inventories/lab/group_vars/all.yml
# names the lab's local images; group_vars/lab.yml names them in the registry).
IMAGE_VARIABLES = ("dgxspark_image", "gateway_image", "monitoring_prometheus_image", "monitoring_node_exporter_image")
# Variables of the example that the lab keeps as the example has them (the lab's all.yml sets them for its own tests).
EXAMPLE_OWNS = ("dgxspark_api_key", "dgxspark_hf_token", "dgxspark_model", "dgxspark_models_dir",
                "dgxspark_tensor_parallel_size", "dgxspark_pipeline_parallel_size")


def version() -> str:
    return yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]


def substitutions(work: Path) -> list[tuple[str, str]]:
    """(the page's text, what runs instead): each pattern must occur in the page's run blocks."""
    tarball = work / "dist" / f"dgxspark-vllm-{version()}.tar.gz"
    return [
        (rf"ansible-galaxy collection install dgxspark-vllm-{re.escape(version())}\.tar\.gz",
         f"{REPO}/tools/install-collection.sh --venv {VENV_BIN.parent} {tarball} ~/.ansible/collections"),
        (r"ansible-vault encrypt ", f"ansible-vault encrypt --vault-password-file={work}/vault-password "),
        (r"--ask-vault-pass", f"--vault-password-file={work}/vault-password"),
        (r" -K(?=\s|$)", f" --become-password-file={work}/become-password"),
    ]


def steps(text: str) -> list[tuple[str, str]]:
    """The page's marked steps in order: ("run", shell text) or ("edit", path)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        mark = MARK.match(line)
        if not mark:
            continue
        if mark.group(2):
            found.append(("edit", mark.group(2)))
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```sh":
            raise SystemExit(f"{QUICKSTART}:{i + 1}: a run mark must be followed by a ```sh block")
        end = lines.index("```", i + 2)
        found.append(("run", "\n".join(lines[i + 2:end])))
    return found


def plan(text: str, work: Path) -> list[tuple[str, str]]:
    """The steps with the substitutions made; each substitution must have matched at least once."""
    subs = substitutions(work)
    used = {pattern: 0 for pattern, _replacement in subs}
    out = []
    for kind, body in steps(text):
        if kind == "run":
            for pattern, replacement in subs:
                body, count = re.subn(pattern, lambda _m, r=replacement: r, body, flags=re.M)
                used[pattern] += count
        out.append((kind, body))
    unused = [p for p, n in used.items() if not n]
    if unused:
        raise SystemExit(f"{QUICKSTART}: the scenario's substitutions {unused} match nothing in its run blocks: the "
                         "page's commands changed; change molecule/fresh/first_run.py with them")
    return out


def operator_env(work: Path) -> dict:
    """An operator's shell: the virtualenv's programs first, a HOME of its own, nothing of the checkout's Ansible."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ANSIBLE_", "MOLECULE_", "PY")) and key not in ("HOME", "VIRTUAL_ENV")}
    env.update(PATH=f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", HOME=str(work / "home"), LANG="C.UTF-8",
               ANSIBLE_NOCOLOR="1")
    return env


def bash(script: str, work: Path, capture: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work / "operator", env=operator_env(work),
                          text=True, check=False, capture_output=capture, timeout=5400)


def lab_module():
    sys.path.insert(0, str(REPO / "lab"))
    import lab  # pylint: disable=import-outside-toplevel,import-error
    return lab


def edit_hosts(work: Path, relpath: str) -> None:
    """The person's edit: the example's pair_a and gateway, at the lab's addresses, and the lab's own group."""
    lab = lab_module()
    example = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())
    clusters = example["all"]["children"]["spark_pairs"]["children"]
    pair = clusters[PAIR]["hosts"]
    nodes = sorted(lab.running_nodes(), key=lambda n: int(n.rsplit("-", 1)[1]))
    if len(nodes) < len(pair):
        raise SystemExit(f"the lab has {len(nodes)} nodes; the example's {PAIR} needs {len(pair)}")
    hosts = {}
    for (name, settings), node in zip(pair.items(), nodes):
        mgmt_ip, fabric_ip, _ifname = lab.node_addrs(int(node.rsplit("-", 1)[1]))
        hosts[name] = {**settings, "ansible_host": mgmt_ip, "dgxspark_fabric_ip": fabric_ip}
    gateway_name = next(iter(example["all"]["children"][GATEWAY_GROUP]["hosts"]))
    monitoring = example["all"]["children"].get(MONITORING_GROUP)
    if monitoring and set(monitoring["hosts"]) != {gateway_name}:
        raise SystemExit(f"the example's {MONITORING_GROUP} is not its gateway box: the lab has no other box for it")
    inventory = {"all": {
        "vars": example["all"]["vars"],
        "children": {
            "spark_pairs": {"children": {PAIR: {"hosts": hosts}}},
            GATEWAY_GROUP: {"hosts": {gateway_name: {"ansible_host": lab.gateway_ip()}}},
            **({MONITORING_GROUP: {"hosts": {gateway_name: None}}} if monitoring else {}),
            # The lab's differences from a site, in group_vars/lab.yml: a group of every host, above `all`.
            "lab": {"children": {"spark_pairs": {}, GATEWAY_GROUP: {}}},
        }}}
    target = work / "operator" / relpath
    target.write_text("---\n# The example's pair_a and gateway at the lab's addresses (molecule/fresh/first_run.py).\n"
                      + yaml.safe_dump(inventory, sort_keys=False))
    lab_all = yaml.safe_load(LAB_VARS.read_text())
    lab_vars = {k: v for k, v in lab_all.items() if k not in EXAMPLE_OWNS}
    lab_vars.update({variable: lab.registry_ref(lab_all[variable]) for variable in IMAGE_VARIABLES})
    lab_vars.update(
        ansible_ssh_private_key_file=str(lab.ssh_key()),
        ansible_ssh_common_args=f"-o UserKnownHostsFile={lab.STATE / 'ssh' / f'known_hosts-{lab.PREFIX}'} "
                                "-o IdentitiesOnly=yes -o StrictHostKeyChecking=yes",
        hybrid_image_pip_cert=str(REPO / "lab" / "host-ca.crt"),
        # vLLM's own multi-node mode: make test runs this beside the lab files that start Ray clusters.
        vllm_serve_backend=os.environ.get("DGXSPARK_MOLECULE_BACKEND", "mp"),
    )
    (work / "operator" / "inventory" / "group_vars" / "lab.yml").write_text(
        "---\n# The lab's differences from a site (molecule/fresh/first_run.py): its SSH key and known hosts (an\n"
        "# operator's ~/.ssh has them), the images from its registry, its settings for lab-sized nodes.\n"
        + yaml.safe_dump(lab_vars, sort_keys=False))


def tarball_digest(path: Path) -> str:
    """What the tarball holds, not its bytes (a build stamps times into the tar): its FILES.json, which lists every
    file's sha256, read from the archive."""
    with tarfile.open(path) as tar:
        member = tar.extractfile("FILES.json")
        if member is None:
            raise SystemExit(f"{path} has no FILES.json")
        return hashlib.sha256(member.read()).hexdigest()


def registry_images() -> list[str]:
    lab_all = yaml.safe_load(LAB_VARS.read_text())
    return [lab_all[variable] for variable in IMAGE_VARIABLES]


def write_secret(path: Path, secret: str) -> None:
    """SECRET into PATH, 0600 (a password file the quickstart's commands read instead of a prompt)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")


def cmd_setup(work: Path) -> None:
    lab = lab_module()
    # The site's registry holds the images (the fresh nodes have none): the lab's, started and filled when it lacks them.
    lab.start_registry()
    held = lab.registry_pushed()
    pushed = lab.push_images(registry_images())
    registry_changed = any(held.get(image) != digest for image, digest in pushed.items())
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(dist), str(REPO)],
                   check=True, capture_output=True, env=operator_env(work), cwd=dist)
    digest = tarball_digest(dist / f"dgxspark-vllm-{version()}.tar.gz")
    # The -K answer is the lab's current sudo password, written at every setup: the nodes' password comes with the
    # lab's state (a new checkout, a new lab), and a setup left as it was would answer with an older lab's.
    write_secret(work / "become-password", lab.become_password())
    done = work / "setup.json"
    if done.exists() and json.loads(done.read_text()).get("tarball") == digest:
        print("first_run: " + ("set up (images pushed again)" if registry_changed else
                               "unchanged (the registry holds the images, the tarball is installed, the inventory made)"))
        return
    for sub in ("home", "operator"):
        shutil.rmtree(work / sub, ignore_errors=True)
        (work / sub).mkdir(parents=True)
    write_secret(work / "vault-password", os.urandom(24).hex())
    for kind, body in plan(QUICKSTART.read_text(), work):
        if kind == "edit":
            edit_hosts(work, body)
            print(f"first_run: edited {body}")
            continue
        if body.startswith("ansible-playbook "):
            continue  # the deploy: first_run.py deploy
        proc = bash(body, work)
        if proc.returncode:
            raise SystemExit(f"first_run: the quickstart's step failed ({proc.returncode}):\n{body}")
    done.write_text(json.dumps({"tarball": digest}) + "\n")
    print(f"first_run: set up (collection {version()} installed from {digest[:12]}, inventory made)")


def deploy_command(work: Path) -> str:
    runs = [body for kind, body in plan(QUICKSTART.read_text(), work) if kind == "run"]
    commands = [line for body in runs for line in body.splitlines() if line.startswith("ansible-playbook ")]
    if len(commands) != 1:
        raise SystemExit(f"{QUICKSTART}: expected one ansible-playbook command in its run blocks, found {commands}")
    return commands[0]


def cmd_deploy(work: Path) -> None:
    proc = bash(deploy_command(work), work, capture=True)
    print(proc.stdout[-60000:])
    print(proc.stderr[-8000:], file=sys.stderr)
    recap = re.findall(r"^\S+\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout, re.M)
    if proc.returncode or not recap:
        raise SystemExit(f"first_run: the deploy failed ({proc.returncode})")
    # The quickstart's operator notes the gateway's certificate fingerprint the run prints last (gateway_tls).
    printed = re.findall(r"TLS certificate SHA-256 ([0-9A-F:]{95})", " ".join(proc.stdout.split()))
    if not printed:
        raise SystemExit("first_run: the deploy printed no TLS certificate fingerprint of the gateway")
    (work / "gateway-fingerprint").write_text(printed[-1] + "\n")
    print(f"first_run: changed={sum(int(c) for c, _u, _f in recap)}")


def cmd_verify(work: Path) -> None:
    """The quickstart's first request: the key from the vault (ansible-vault view), a chat completion through the
    gateway, answered by the served model."""
    lab = lab_module()
    view = bash(f"ansible-vault view --vault-password-file={work}/vault-password inventory/group_vars/all/vault.yml",
                work, capture=True)
    key = next((line.split(":", 1)[1].strip() for line in view.stdout.splitlines()
                if line.startswith("vault_dgxspark_api_key:")), "")
    if view.returncode or not re.fullmatch(r"[0-9a-f]{64}", key):
        raise SystemExit("first_run: the vault does not hold the key the quickstart made")
    body = json.dumps({"model": "qwen3.5-122b-a10b-fp8", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "Hello"}]}).encode()
    # The quickstart's `openssl s_client ... | openssl x509 > gateway.pem` and its fingerprint check, then
    # `curl --cacert gateway.pem`: the certificate is trusted alone, once its fingerprint is the one the run printed.
    served = ssl.get_server_certificate((lab.gateway_ip(), 8000))
    seen = ":".join(f"{b:02X}" for b in hashlib.sha256(ssl.PEM_cert_to_DER_cert(served)).digest())
    printed = (work / "gateway-fingerprint").read_text().strip()
    if seen != printed:
        raise SystemExit(f"first_run: the gateway serves a certificate of fingerprint {seen}, the run printed {printed}")
    url = f"https://{lab.gateway_ip()}:8000/v1/chat/completions"
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    context = ssl.create_default_context(cadata=served)
    with urllib.request.urlopen(request, timeout=120, context=context) as response:  # noqa: S310 (the lab's gateway)
        reply = json.loads(response.read())
    text = reply["choices"][0]["message"]["content"]
    if reply.get("model") != "qwen3.5-122b-a10b-fp8" or not text:
        raise SystemExit(f"first_run: the gateway's answer is not a completion of the served model: {reply}")
    print(f"first_run: {url} answered with {reply['model']}: {text[:60]!r}")
    if MONITORING_GROUP in yaml.safe_load((work / "operator" / "inventory" / "hosts.yml").read_text())["all"]["children"]:
        print(f"first_run: Prometheus scrapes the engine and the gateway at {prometheus_scrapes_over_tls(lab)}")


# Prometheus's targets, asked on the gateway box (it listens on its loopback): the gateway's and the engine's (through
# the head's door), each [job, scrape URL, health, last error].
TARGETS_PY = """
import json, urllib.request
active = json.load(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=10))["data"]["activeTargets"]
print(json.dumps([[t["labels"]["job"], t["scrapeUrl"], t["health"], t["lastError"]] for t in active
                  if t["labels"]["job"] in ("gateway", "engine")]))
"""


def prometheus_scrapes_over_tls(lab, wait: float = 90.0) -> list:
    """The gateway's and the engine's scrape URLs once both targets are up: over HTTPS, trusting the gateway's and
    the door's certificates alone (security review M2)."""
    deadline = time.monotonic() + wait
    while True:
        proc = subprocess.run(["docker", "exec", lab.GATEWAY_NODE, "python3", "-c", TARGETS_PY], text=True,
                              capture_output=True, check=False)
        found = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else []
        if sorted(job for job, _url, _health, _error in found) == ["engine", "gateway"] \
                and all(health == "up" for _job, _url, health, _error in found):
            if not all(url.startswith("https://") for _job, url, _health, _error in found):
                raise SystemExit(f"first_run: Prometheus scrapes over plain HTTP: {found}")
            return [url for _job, url, _health, _error in sorted(found)]
        if time.monotonic() > deadline:
            raise SystemExit(f"first_run: Prometheus's gateway and engine targets are not up: {found or proc.stderr[-500:]}")
        time.sleep(2)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="first_run.py", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("command", choices=("setup", "deploy", "verify"))
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args(argv)
    work = args.work.resolve()
    {"setup": cmd_setup, "deploy": cmd_deploy, "verify": cmd_verify}[args.command](work)


if __name__ == "__main__":
    main(sys.argv[1:])
