#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.transfer_follow."""

from __future__ import annotations

DOCUMENTATION = r"""
module: transfer_follow
short_description: One round of following a background transfer on its source node, renewing the transfer's lease
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the source node of a background M(dgxspark.vllm.image_sync) job (C(async), C(poll=0)) started with a
    O(dgxspark.vllm.image_sync#module:status_file) and a O(dgxspark.vllm.image_sync#module:lease_file). The action
    M(dgxspark.vllm.image_sync_wait) runs it in rounds; users rarely call it themselves.
  - Waits up to O(wait) seconds for the job's done mark in O(status_file) and renews O(lease_file) (sets its
    modification time to now) about every second meanwhile, and at the end of the round 2 seconds ahead (the gap to
    the next round). Returns the job's last progress.
  - B(Cancellation.) The job cancels itself (cuts its streams, which leaves every target as it was) when its lease
    is not renewed for its C(lease_timeout), is removed or is marked cancelled. This module looks for its controller
    four times a second and removes the lease as soon as the controller is gone (its connection to this node closed,
    or its process here ended). An interrupted play marks the lease cancelled itself (M(dgxspark.vllm.image_sync_wait));
    a round still under way then (an ssh control master keeps its session open) sees the mark and never renews it. A controller
    lost between two rounds does not start the next one, and the lease lapses after C(lease_timeout).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the status file and renews nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Only the lease file's modification time changes; C(changed) is always false.
  platform:
    support: full
    platforms: posix
options:
  status_file:
    description: The status file the background job writes (JSON with C(done) and C(pid)).
    type: path
    required: true
  lease_file:
    description: The job's lease file, renewed while this module waits.
    type: path
    required: true
  wait:
    description: Seconds to wait at most for the done mark (the round's length).
    type: int
    default: 5
seealso:
  - module: dgxspark.vllm.image_sync
  - module: dgxspark.vllm.image_sync_wait
"""

EXAMPLES = r"""
- name: Follow the background transfer for one round of up to 5 seconds
  dgxspark.vllm.transfer_follow:
    status_file: /run/dgxspark-image-sync.json
    lease_file: /run/dgxspark-image-sync.json.lease
    wait: 5
  register: round
"""

RETURN = r"""
done:
  description: Whether the job wrote its done mark.
  returned: always
  type: bool
  sample: false
running:
  description: Whether the job's process is alive (false once it exited, with or without a done mark).
  returned: always
  type: bool
  sample: true
progress:
  description: The status file's content (C(phase), C(bytes), C(expected_bytes), C(percent)...), or null before the
    job wrote it.
  returned: always
  type: dict
  sample: {phase: transfer, bytes: 12345678, expected_bytes: 40000000, percent: 30.9, done: false, pid: 4242}
renewed:
  description: How many times the lease was renewed in this round.
  returned: always
  type: int
  sample: 5
controller_lost:
  description: Whether the round ended because the controller was gone (nobody reads the result then).
  returned: always
  type: bool
  sample: false
"""

import json
import os
import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import LEASE_AHEAD, pipe_closed, process_alive, renew

RENEW_EVERY = 1.0
LOOK_EVERY = 0.25  # how often the round looks for its controller between renewals


def read_status(path: str) -> dict | None:
    """The status file's JSON, or None when it is not there (yet) or not JSON."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def drop(path: str) -> None:
    """Remove the lease: the job sees it lapsed at once (when its first LEASE_START has passed)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def follow_round(status_file: str, lease_file: str | None, wait: float, clock=time.monotonic,
                 pause=threading.Event().wait, gone=None, is_alive=process_alive, renew_lease=renew,
                 drop_lease=drop) -> dict:
    """Wait up to WAIT s for the done mark, renewing LEASE_FILE every RENEW_EVERY s while the controller is there;
    when it is gone, remove the lease so that the job cancels itself at once."""
    start_ppid = os.getppid()
    gone = gone or (lambda: pipe_closed(1) or os.getppid() != start_ppid)
    deadline = clock() + wait
    renewed = 0
    lost = False
    while True:
        if gone():
            lost = True
            if lease_file:
                drop_lease(lease_file)
            break
        progress = read_status(status_file)
        if lease_file:
            # The run creates its lease before its first progress: a run under way without one had it removed (by
            # the play's follower when the play was interrupted). Renewing would bring it back.
            if not renew_lease(lease_file, create=progress is None):
                lost = not (progress and progress.get("done"))  # an ended run may have removed its own
                break
            renewed += 1
        done = bool(progress and progress.get("done"))
        running = bool(progress) and is_alive(progress.get("pid"))
        if done or (progress and not running):
            break
        left = deadline - clock()
        if left <= 0:
            if lease_file:
                # The round ends while the job runs: the lease covers the gap until the next round renews it (a
                # controller that stops now does not start that round, and the lease lapses LEASE_AHEAD s later).
                renew_lease(lease_file, ahead=LEASE_AHEAD, create=False)
            break
        until = clock() + min(RENEW_EVERY, left)
        while clock() < until and not gone():
            pause(min(LOOK_EVERY, until - clock()))
    progress = read_status(status_file)
    return {"changed": False, "done": bool(progress and progress.get("done")),
            "running": bool(progress) and is_alive(progress.get("pid")), "progress": progress, "renewed": renewed,
            "controller_lost": lost}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "status_file": {"type": "path", "required": True},
            "lease_file": {"type": "path", "required": True},
            "wait": {"type": "int", "default": 5},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["wait"] < 0:
        module.fail_json(msg=f"wait must be at least 0 (is {p['wait']})")
    directory = os.path.dirname(p["lease_file"]) or "."
    if not module.check_mode and not os.path.isdir(directory):
        module.fail_json(msg=f"the directory of lease_file {p['lease_file']} does not exist")
    result = follow_round(p["status_file"], None if module.check_mode else p["lease_file"], p["wait"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
