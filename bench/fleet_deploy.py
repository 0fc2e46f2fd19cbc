#!/usr/bin/env python3
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Do pairs deploy concurrently, and what does a bigger cluster cost? Two ratios of wall times, each from one run.

Brings the lab to four nodes (two pairs), then alternates, for --rounds rounds:
    teardown -> deploy_qwen35.yml -l pair1      (one pair)
    teardown -> deploy_qwen35.yml               (both pairs)
Images and weights stay between runs (teardown keeps them), so each deploy starts every container from zero
but builds and moves nothing after the first round; round 0 warms that up and is not counted.
Prints each run's wall time, the medians and their ratio. Serial pairs would give about 2.0; the goal is
1.5 or better on the lab, whose four nodes share this machine's cores.

Then the same four nodes on one switch as one cluster (lab.py up --cluster-size 4 --fabric-topology switch), and
alternately, for --rounds rounds after a warm-up:
    teardown -> deploy_qwen35.yml on a 2-node cluster (spark-1, spark-2; TP=2)
    teardown -> deploy_qwen35.yml on the 4-node cluster (TP=4)
and the ratio of the medians (4-node / 2-node wall time).

    python3 bench/fleet_deploy.py [--rounds 2] [--image lab/vllm-node:0.14] [--model Qwen/Qwen3-30B-A3B]
The lab prefix and subnets come from DGXSPARK_LAB_PREFIX / _MGMT_SUBNET / _FABRIC_SUBNET, as for the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time

from benchkit import BIN, INVENTORY, LAB, compare_rounds, env, playbook, sh


def timed_deploy(extra, limit=None, inventory=None):
    sh(playbook("teardown.yml"))
    argv = playbook("deploy_qwen35.yml", *extra, *(["-l", limit] if limit else []))
    if inventory:
        argv[argv.index(str(INVENTORY))] = str(inventory)
    start = time.monotonic()
    sh(argv)
    return time.monotonic() - start


def two_node_inventory(directory):
    """The lab's 4-node cluster cut down to its head and first worker: a 2-node cluster on the same switch. Written as
    JSON (which the YAML inventory plugin reads), with every host's variables as ansible-inventory resolves them, since
    the lab's group_vars do not sit beside this file."""
    listed = json.loads(subprocess.run([str(BIN / "ansible-inventory"), "-i", str(INVENTORY), "--list"], check=True,
                                       capture_output=True, text=True, env=env()).stdout)
    (name,) = [group for group in listed["spark_pairs"]["children"]]
    head, worker = listed[name]["hosts"][:2]
    hosts = {host: listed["_meta"]["hostvars"][host] for host in (head, worker)}
    inventory = {"all": {"children": {"spark_pairs": {"children": {name: {"hosts": hosts}}}}}}
    path = os.path.join(directory, "two-node.yml")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(inventory, handle, indent=1)
    return path, name


def cluster_rounds(extra, image, rounds):
    lab_up(image, "--fabric-topology", "switch", "--cluster-size", "4")
    with tempfile.TemporaryDirectory() as tmp:
        two_inventory, _name = two_node_inventory(tmp)
        two_extra, four_extra = [*extra, "-e", "dgxspark_tensor_parallel_size=2"], [*extra, "-e", "dgxspark_tensor_parallel_size=4"]
        print("warm-up (the 4-node cluster, image moved to all four):", f"{timed_deploy(four_extra):.1f} s", flush=True)
        compare_rounds(rounds, ("2-node cluster", lambda: timed_deploy(two_extra, inventory=two_inventory)),
                       ("4-node cluster", lambda: timed_deploy(four_extra)), "4-node / 2-node cluster",
                       f"the four lab nodes share {os.cpu_count()} cores")
    sh(playbook("teardown.yml"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--image", default="lab/vllm-node:0.14")
    parser.add_argument("--model", default="Qwen/Qwen3-30B-A3B")
    parser.add_argument("--no-cluster", action="store_true", help="only the pairs (skip the 4-node cluster rounds)")
    parser.add_argument("--no-pairs", action="store_true", help="only the 4-node cluster rounds")
    args = parser.parse_args()
    sh([*LAB, "images", "vllm-node-0.14"])
    extra = ["-e", f"dgxspark_image={args.image}", "-e", f"dgxspark_model={args.model}"]
    if not args.no_pairs:
        pair_rounds(extra, args.image, args.rounds)
    if not args.no_cluster:
        cluster_rounds(extra, args.image, args.rounds)


def lab_up(image, *up_args):
    sh([*LAB, "up", "--nodes", "4", *up_args])
    sh([*LAB, "load", image])
    sh([*LAB, "models"])


def pair_rounds(extra, image, rounds):
    lab_up(image)
    print("warm-up (builds the overlay image once per head, syncs it):", f"{timed_deploy(extra):.1f} s", flush=True)
    compare_rounds(rounds, ("1 pair", lambda: timed_deploy(extra, limit="pair1")), ("2 pairs", lambda: timed_deploy(extra)),
                   "2-pair / 1-pair", "serial would be ~2.0x; goal <= 1.5x")
    sh(playbook("teardown.yml"))
    print(f"cores on this machine: {os.cpu_count()} (all four lab nodes share them)", flush=True)

if __name__ == "__main__":
    main()
