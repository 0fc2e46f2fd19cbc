"""Known-bad combinations on the lab: NCCL 2.28.9 with CUDA graphs across two nodes (vLLM issue 52504).

The 0.17 stand-in image ships the pip NCCL its engine runs with (nvidia-nccl-cu13 2.28.9, where vllm_image_info
reads it). Its engine, like the field's, deadlocks in the first real requests when CUDA graphs are on and the ranks
are on different nodes; a one-token readiness probe still passes. One module-scoped lab, the mp backend with the
image as it is (no overlay build), three deploys:

1. as the collection was (commit 1b5e624 served with CUDA graphs): the known issue ignored, the deploy says ready,
   and the first chat request gets no answer;
2. the collection now: it serves eager (--enforce-eager on every rank) with a warning citing the issue, and the
   release record carries the remedy; a request answers;
3. the inventory forces CUDA graphs (vllm_serve_enforce_eager: false): the deploy stops before any engine (re)starts,
   naming the node, the issue and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit import BIN, INVENTORY, LAB, REPO, ansible_env, collection_as_it_was, node, node_exec, run

pytestmark = pytest.mark.lab_minutes(1)  # labkit: the order files are handed out

SERVE = str(REPO / "tests" / "lab" / "playbooks" / "serve.yml")
IMAGE = "lab/vllm-qwen35:0.17"
ISSUE = "nccl-cuda-graphs-multinode-deadlock"
SOURCE = "https://github.com/vllm-project/vllm/issues/52504"
# The mp backend with the stand-in image itself; bound to every interface so node 1 can ask itself on loopback.
COMMON = ["-e", "vllm_serve_backend=mp", "-e", f"dgxspark_image={IMAGE}", "-e", "vllm_serve_host=0.0.0.0"]
# With the cluster's own engine key (made on the head by vllm_serve), read there.
ASK = """
import json, sys, urllib.request
key = [line.split("=", 1)[1].strip() for line in open("/etc/dgxspark/vllm/serve.env") if line.startswith("VLLM_API_KEY=")][0]
req = urllib.request.Request("http://127.0.0.1:8000/v1/completions", method="POST",
    data=json.dumps({"model": "qwen3.5-122b-a10b-fp8", "prompt": "Hello there", "max_tokens": 16}).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
try:
    with urllib.request.urlopen(req, timeout=20) as resp:
        print("ANSWER", json.load(resp)["choices"][0]["text"])
except Exception as exc:
    print("NO ANSWER", type(exc).__name__, exc)
"""


def serve(*args, collection=None):
    """The serve playbook (COLLECTION: (root, env) of another tree of the collection, whose roles and playbook run)."""
    root, env = collection or (REPO, ansible_env())
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(Path(root) / "tests/lab/playbooks/serve.yml"),
                *COMMON, *args], check=False, env=env, timeout=900)


def flat(proc):
    """The play's output and its warnings (Ansible writes those to stderr), on one line."""
    return " ".join((proc.stdout + proc.stderr).split())


def ask():
    """A 16-token completion asked on node 1 (the API key goes through stdin, never a command line)."""
    return node_exec(node(1), "python3", "-", input_text=ASK).stdout.strip()


def engine(i):
    return node_exec(node(i), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}} {{json .Config.Cmd}}",
                     "dgxspark-vllm").stdout.strip()


@pytest.fixture(scope="module")
def bad_nccl_lab(lab):
    run([*LAB, "images", "vllm-qwen35-0.17"])
    run([*LAB, "load", IMAGE])
    run([*LAB, "models"])
    yield lab
    serve("-e", "vllm_serve_state=absent")


def test_image_facts_show_the_stand_ins_pip_nccl_2_28_9(bad_nccl_lab):
    out = run([str(BIN / "ansible"), "-i", str(INVENTORY), node(1), "-m", "dgxspark.vllm.vllm_image_info",
               "-a", json.dumps({"image": IMAGE})], env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")).stdout
    facts = json.loads(out.split("=>", 1)[1])
    assert facts["versions"]["nccl"] == "2.28.9"
    (library,) = facts["nccl_libraries"]
    assert library["path"].endswith("/site-packages/nvidia/nccl/lib/libnccl.so.2")
    assert (library["version"], library["package"]) == ("2.28.9", "nvidia-nccl-cu13")


def test_nccl_2_28_9_with_cuda_graphs_across_nodes_serves_then_hangs_the_first_request(bad_nccl_lab):
    # What commit 1b5e624 deployed: CUDA graphs on. The readiness probe (one token) passes, a real request hangs.
    proc = serve("-e", json.dumps({"vllm_serve_known_issues_ignore": [ISSUE]}))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert f"ignored because vllm_serve_known_issues_ignore lists {ISSUE}" in flat(proc)
    for i in (1, 2):
        assert "--enforce-eager" not in engine(i)
    assert ask().startswith("NO ANSWER"), "the request was answered: the stand-in did not deadlock"


def test_deploy_serves_eager_with_a_warning_citing_the_source(bad_nccl_lab):
    proc = serve()
    assert proc.returncode == 0, proc.stdout[-4000:]
    text = flat(proc)
    assert f"[WARNING]: {node(1)}: {IMAGE}: NCCL 2.28.9 with CUDA graphs across nodes deadlocks" in text, text[-4000:]
    assert SOURCE in text and "applying the remedy: enforce_eager=true" in text
    for i in (1, 2):
        assert '"--enforce-eager"' in engine(i)
    release = json.loads(node_exec(node(1), "cat", "/etc/dgxspark/vllm/release.json").stdout)
    assert release["settings"]["enforce_eager"] is True
    assert [(r["id"], r["set"], r["source"]) for r in release["remedies"]] == [(ISSUE, {"enforce_eager": True}, SOURCE)]
    assert ask().startswith("ANSWER ")


def test_forced_cuda_graphs_stop_before_the_engine_starts(bad_nccl_lab):
    before = [engine(1), engine(2)]
    proc = serve("-e", "vllm_serve_enforce_eager=false")
    assert proc.returncode != 0
    text = flat(proc)
    for i in (1, 2):
        assert f"{node(i)}: {IMAGE}: NCCL 2.28.9 with CUDA graphs across nodes deadlocks" in text, text[-4000:]
    assert "set explicitly by the inventory (vllm_serve_enforce_eager)" in text
    assert "set vllm_serve_enforce_eager: true or leave it unset" in text and SOURCE in text
    assert [engine(1), engine(2)] == before  # nothing restarted: the stop came before the engine containers


# ------------------------------------------------------------------------------------------------------------------
# The RDMA user-space libraries (issue 33, 3). The field's images carry libibverbs and the mlx5 provider, and so do the
# lab's engine images; lab/vllm-qwen35:0.17-noverbs (lab/images/vllm-qwen35-0.17-noverbs) is the stand-in without them,
# as images built on CUDA's aarch64 base images come. On the lab's RDMA fabric the preflight sets NCCL_NET=IB, and the
# stand-in NCCL, like NCCL, then finds no IB device in such an image and stops every rank.
NOVERBS = "lab/vllm-qwen35:0.17-noverbs"
NOVERBS_ISSUE = "rdma-userspace-libraries-missing"
NET_PLUGIN = "Failed to initialize any NET plugin"


def engines():
    """Every engine container of both nodes, with its ID and start time ('' for a node without one). The start time,
    not `docker ps`'s status text, whose "Up 54 seconds" becomes "Up About a minute" while nothing restarts."""
    found = []
    for i in (1, 2):
        ids = node_exec(node(i), "docker", "ps", "-aq", "--filter", "label=org.dgxspark.vllm.component").stdout.split()
        found.append(node_exec(node(i), "docker", "inspect", "-f", "{{.Name}} {{.Id}} {{.State.StartedAt}}",
                               *ids).stdout.strip() if ids else "")
    return found


@pytest.fixture(scope="module")
def noverbs(bad_nccl_lab):
    run([*LAB, "images", "vllm-qwen35-0.17-noverbs"])
    run([*LAB, "load", NOVERBS])
    return bad_nccl_lab


def image_facts(ref):
    out = run([str(BIN / "ansible"), "-i", str(INVENTORY), node(1), "-m", "dgxspark.vllm.vllm_image_info",
               "-a", json.dumps({"image": ref})], env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")).stdout
    return json.loads(out.split("=>", 1)[1])


def test_image_facts_report_the_verbs_libraries_the_field_images_carry(noverbs):
    lib = "/usr/lib/x86_64-linux-gnu"
    assert image_facts(IMAGE)["verbs"] == {
        "libibverbs": f"{lib}/libibverbs.so.1", "mlx5": f"{lib}/libmlx5.so.1",
        "mlx5_provider": f"{lib}/libibverbs/libmlx5-rdmav34.so", "complete": True, "missing": []}
    assert image_facts(NOVERBS)["verbs"] == {
        "libibverbs": None, "mlx5": None, "mlx5_provider": None, "complete": False,
        "missing": ["libibverbs.so.1 (libibverbs1)", "the mlx5 provider libibverbs/libmlx5-rdmav*.so (ibverbs-providers)"]}


def test_field_image_without_verbs_libraries_is_refused_before_engine_start(noverbs):
    """The field: an image without libibverbs on an RDMA fabric (NCCL_NET=IB) passed every check at 13f6075, and each
    node's engine then stopped at start with "Failed to initialize any NET plugin" (the next test). Now each node stops
    before any engine (re)starts, naming the image and the fix."""
    before = engines()
    proc = serve("-e", f"dgxspark_image={NOVERBS}")
    assert proc.returncode != 0, proc.stdout[-4000:]
    text = flat(proc)
    for i in (1, 2):
        assert (f"{node(i)}: {NOVERBS}: the image has no RDMA user-space libraries for NCCL's IB transport") in text, \
            text[-4000:]
    assert ("this deployment has NCCL over RDMA (NCCL_NET=IB) and an image without libibverbs.so.1 (libibverbs1) and "
            "without the mlx5 provider libibverbs/libmlx5-rdmav*.so (ibverbs-providers)") in text
    assert "apt-get install -y libibverbs1 ibverbs-providers" in text
    assert f"list {NOVERBS_ISSUE} in vllm_serve_known_issues_ignore" in text
    assert engines() == before  # nothing (re)started: the stop came before the engine containers


@pytest.mark.slow  # 13f6075's engines on the same image: make lab-test
def test_field_image_without_verbs_libraries_stops_every_engine_at_start_as_the_collection_was(noverbs, tmp_path):
    """The collection at 13f6075 served the same image: the engines started and every rank stopped in NCCL's words,
    as in the field. What the test above now prevents."""
    proc = serve("-e", f"dgxspark_image={NOVERBS}", collection=collection_as_it_was(tmp_path, commit="13f6075"))
    assert proc.returncode != 0, proc.stdout[-4000:]
    logs = {i: node_exec(node(i), "docker", "logs", "dgxspark-vllm", check=False) for i in (1, 2)}
    for i, log in logs.items():
        assert NET_PLUGIN in log.stdout + log.stderr, (i, (log.stdout + log.stderr)[-3000:])
