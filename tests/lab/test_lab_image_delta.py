# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layer delta (issue 17, 2) on real engines: node 1 runs Docker 26 with overlay2 (every lab node's engine: the
archive layout of Docker 25 and later and a graph driver, as DGX OS's Docker 28 keeps images), node 2 Debian 12's
Docker 20.10 (`lab.py up --docker20 2`). Node 2 holds a donor image; a new image on it (a rollout's overlay) moves from node 1 with only its new
layer in the stream, and Docker 20.10's load takes the rest from the node. Then the same move with the delta off, for
the whole archive's size in the same run; and node 2 as the source (Docker 20.10's legacy layout): the archive passes
whole, and the result says why.

The module remakes node 2 and makes it a Docker 26 node again at the end.
"""

from __future__ import annotations

import pytest

from labkit import (LAB, PREFIX, BIN, INVENTORY, ansible_env, fleet_play, image_inspect as inspect, image_sync_to,
                    load_into, node, node_exec, report, run)
from labkit import LAST

pytestmark = LAST  # it remakes node 2 (labkit.LAST)

TINY = "dgxspark-lab/tiny:latest"
DONOR = f"{PREFIX}-lab/delta:donor"
NEW = f"{PREFIX}-lab/delta:new"
NEW_MB = 4


@pytest.fixture(scope="module")
def docker26(lab, tmp_path_factory):
    nodes = len(lab["_meta"]["hostvars"])
    run([*LAB, "up", "--nodes", "2", "--no-engine-images", "--docker20", "2"], timeout=1800)
    trust = tmp_path_factory.mktemp("trust") / "trust.yml"
    trust.write_text(fleet_play("Transfer trust", "dgxspark.vllm.node_trust"))
    run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(trust), "-e",
         f'{{"dgxspark_transfer_sources": ["{node(1)}", "{node(2)}"]}}'], env=ansible_env())
    run(["docker", "build", "--no-cache", "-q", "-t", DONOR, "-"],
        input_text=f"FROM {TINY}\nRUN busybox dd if=/dev/urandom of=/donor bs=1M count=20\n")
    run(["docker", "build", "--no-cache", "-q", "-t", NEW, "-"],
        input_text=f"FROM {DONOR}\nRUN busybox dd if=/dev/urandom of=/new bs=1M count={NEW_MB}\n")
    load_into(DONOR, 1, 2)
    load_into(NEW, 1)
    yield
    run(["docker", "image", "rm", "-f", NEW, DONOR], check=False)
    run([*LAB, "up", "--nodes", str(nodes), "--no-engine-images"], timeout=1800)


def test_node_1_is_docker_26_with_a_graph_driver(docker26):
    version = node_exec(node(1), "docker", "info", "--format", "{{.ServerVersion}} {{.Driver}}").stdout.split()
    assert version[0].startswith("26.") and version[1] == "overlay2", version


def test_a_new_image_on_a_donor_the_target_holds_sends_only_its_new_layer_then_the_whole_archive_without_delta(
        docker26):
    new_layer = inspect(1, NEW)["Size"] - inspect(1, DONOR)["Size"]
    node_exec(node(2), "docker", "image", "rm", "-f", NEW, check=False)
    first, proc = image_sync_to(1, 2, NEW)
    assert proc.returncode == 0, proc.stdout[-4000:]
    delta, entry = first["delta"], first["targets"][0]
    held = len(inspect(1, DONOR)["RootFS"]["Layers"])
    assert delta["archive"] == "oci" and delta["held"] == held and delta["left_out"] == held, delta
    assert delta["bytes_left_out"] >= 20 << 20 and delta["reason"] is None, delta
    assert entry["action"] == "transfer" and entry["after_id"] == inspect(2, NEW)["Id"] == inspect(1, NEW)["Id"]
    ratio = first["bytes_sent"] / new_layer
    assert ratio <= 1.1, (first["bytes_sent"], new_layer)
    again, proc = image_sync_to(1, 2, NEW)
    assert proc.returncode == 0 and again["bytes_sent"] == 0 and again["targets"][0]["action"] == "skip"
    # The same move with the delta off: the whole archive, in the same run.
    node_exec(node(2), "docker", "image", "rm", "-f", NEW)
    whole, proc = image_sync_to(1, 2, NEW, delta=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert whole["delta"]["reason"] == "delta=false" and whole["bytes_sent"] >= inspect(1, NEW)["Size"]
    assert inspect(2, NEW)["Id"] == inspect(1, NEW)["Id"]
    report(f"layer delta {node(1)} (Docker 26, overlay2) -> {node(2)} (Docker 20.10): sent {first['bytes_sent']} bytes "
           f"for a new layer of {new_layer} ({ratio:.3f}x), {first['bytes_sent'] / whole['bytes_sent']:.3f}x the whole "
           f"archive ({whole['bytes_sent']} bytes, delta off); {held} held layers left out; rerun sent 0")


def test_a_source_of_the_legacy_layout_sends_the_whole_archive_and_says_why(docker26):
    node_exec(node(1), "docker", "image", "rm", "-f", NEW)
    load_into(NEW, 2)  # node 2 (Docker 20.10) is the source now; node 1 holds the donor
    result, proc = image_sync_to(2, 1, NEW)
    assert proc.returncode == 0, proc.stdout[-4000:]
    delta = result["delta"]
    assert delta["archive"] == "legacy" and delta["left_out"] == 0, delta
    assert delta["reason"].startswith("the source's engine writes the legacy archive layout"), delta
    assert result["bytes_sent"] >= inspect(2, NEW)["Size"]
    report(f"layer delta from Docker 20.10 ({node(2)}): {delta['reason']}; sent {result['bytes_sent']} bytes")
