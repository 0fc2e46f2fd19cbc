#!/usr/bin/env python3
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Do pairs deploy concurrently? The wall time of a 2-pair fleet deploy over a 1-pair deploy, from one run.

Brings the lab to four nodes (two pairs), then alternates, for --rounds rounds:
    teardown -> deploy_qwen35.yml -l pair1      (one pair)
    teardown -> deploy_qwen35.yml               (both pairs)
Images and weights stay between runs (teardown keeps them), so each deploy starts every container from zero
but builds and moves nothing after the first round; round 0 warms that up and is not counted.
Prints each run's wall time, the medians and their ratio. Serial pairs would give about 2.0; the goal is
1.5 or better on the lab, whose four nodes share this machine's cores.

    python3 bench/fleet_deploy.py [--rounds 2] [--image lab/vllm-node:0.14] [--model Qwen/Qwen3-30B-A3B]
The lab prefix and subnets come from DGXSPARK_LAB_PREFIX / _MGMT_SUBNET / _FABRIC_SUBNET, as for the tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchkit import LAB, playbook, sh


def timed_deploy(extra, limit=None):
    sh(playbook("teardown.yml"))
    argv = playbook("deploy_qwen35.yml", *extra, *(["-l", limit] if limit else []))
    start = time.monotonic()
    sh(argv)
    return time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--image", default="lab/vllm-node:0.14")
    parser.add_argument("--model", default="Qwen/Qwen3-30B-A3B")
    args = parser.parse_args()
    sh([*LAB, "up", "--nodes", "4"])
    sh([*LAB, "images", "vllm-node-0.14"])
    sh([*LAB, "load", args.image])
    sh([*LAB, "models"])
    extra = ["-e", f"dgxspark_image={args.image}", "-e", f"dgxspark_model={args.model}"]
    print("warm-up (builds the overlay image once per head, syncs it):", f"{timed_deploy(extra):.1f} s", flush=True)
    one, two = [], []
    for i in range(args.rounds):
        one.append(timed_deploy(extra, limit="pair1"))
        two.append(timed_deploy(extra))
        print(f"round {i + 1}: 1 pair {one[-1]:.1f} s, 2 pairs {two[-1]:.1f} s", flush=True)
    sh(playbook("teardown.yml"))
    m1, m2 = statistics.median(one), statistics.median(two)
    print(f"median: 1 pair {m1:.1f} s, 2 pairs {m2:.1f} s")
    print(f"ratio 2-pair / 1-pair wall time: {m2 / m1:.2f}x  (serial would be ~2.0x; goal <= 1.5x)")
    print(f"cores on this machine: {os.cpu_count()} (all four lab nodes share them)")


if __name__ == "__main__":
    main()
