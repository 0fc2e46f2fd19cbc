#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.image_sync_wait (the code is in plugins/action)."""

from __future__ import annotations

# The action plugin (plugins/action/image_sync_wait.py) runs on the controller and declares supports_check_mode
# there as False (_supports_check_mode = False): in check mode no background job exists to follow.

DOCUMENTATION = r"""
module: image_sync_wait
short_description: Follow a background image_sync job until it ends, showing its progress
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - "Follows a M(dgxspark.vllm.image_sync) run in the background with an O(status_file): one it starts itself from
    O(start) (the way to use it: see B(Cancellation)), or one started with C(async) and C(poll=0) (O(jid)). It
    follows in rounds of at most O(interval) seconds. Each round waits on the source for the module's done mark in
    O(status_file) while renewing the job's O(lease_file) (M(dgxspark.vllm.transfer_follow)), asks the job with
    C(ansible.builtin.async_status) once the round saw it end, and while it runs shows one progress line on the
    controller, C(HOST -> TARGETS: PHASE, X MB of ~Y MB (P%), R MB/s, S s)."
  - Returns what C(ansible.builtin.async_status) returns for the ended job, that is the M(dgxspark.vllm.image_sync)
    result (failed when the transfer failed, with its C(msg) and per-node C(table)).
  - B(Cancellation.) The job runs only while followed. When the play is interrupted (Ctrl-C, C(SIGTERM)), this task
    marks the lease on the source cancelled before its worker ends (its modification time set to the epoch, the file
    created when the job has not yet), and the job cuts its streams within a second, which leaves every target as it
    was (see O(dgxspark.vllm.image_sync#module:lease_file)); a job that starts after the mark ends before it sends
    anything. With O(start) the interrupt is handled from before the job exists; with a separate C(async) task, an
    interrupt between that task and this one is not seen here, and the job runs on until its lease lapses
    (C(lease_timeout) after its first 10 s). When the play loses its connection or is killed, the lease is no longer
    renewed and the job cancels itself after its C(lease_timeout).
  - The loop is bounded. When the job has not ended after O(timeout) seconds the task fails; no longer followed, the
    job then cancels itself the same way.
  - An action plugin; the module calls (M(dgxspark.vllm.transfer_follow), C(async_status)) run on the source node.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: none
    details: There is no background job to follow in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: It only reads; the changes are the followed job's.
  platform:
    support: full
    platforms: posix
options:
  start:
    description:
      - The arguments of a M(dgxspark.vllm.image_sync) run to start in the background (with O(status_file) and
        O(lease_file) set to this task's), its C(async) time being O(timeout) less 60 seconds.
      - Exactly one of O(start) and O(jid).
    type: dict
  jid:
    description:
      - The C(ansible_job_id) of a background M(dgxspark.vllm.image_sync) task started before this one.
      - Exactly one of O(start) and O(jid).
    type: str
  status_file:
    description: The O(dgxspark.vllm.image_sync#module:status_file) the job writes on the source.
    type: path
    required: true
  lease_file:
    description:
      - The O(dgxspark.vllm.image_sync#module:lease_file) of the job, renewed while the task follows it.
      - Defaults to O(status_file) with C(.lease) appended.
    type: path
  interval:
    description: Seconds between progress lines (at most; a job that ends is seen at once).
    type: int
    default: 5
  timeout:
    description:
      - Seconds after which the task stops following and fails. With O(jid), set it above the job's C(async) time.
      - At least 120 with O(start).
    type: int
    required: true
seealso:
  - module: dgxspark.vllm.image_sync
  - module: dgxspark.vllm.transfer_follow
  - module: ansible.builtin.async_status
"""

EXAMPLES = r"""
- name: Start the transfer in the background and follow it until it ends
  dgxspark.vllm.image_sync_wait:
    start:
      image: vllm-node:latest
      targets: [{host: 192.168.100.11, name: spark-2}]
    status_file: /run/dgxspark-image-sync.json
    lease_file: /run/dgxspark-image-sync.json.lease
    interval: 5
    timeout: 3960
  register: result

- name: Or start it in a task of its own
  dgxspark.vllm.image_sync:
    image: vllm-node:latest
    targets: [{host: 192.168.100.11, name: spark-2}]
    status_file: /run/dgxspark-image-sync.json
    lease_file: /run/dgxspark-image-sync.json.lease
  async: 3900
  poll: 0
  register: job

- name: Follow it until it ends
  dgxspark.vllm.image_sync_wait:
    jid: "{{ job.ansible_job_id }}"
    status_file: /run/dgxspark-image-sync.json
    lease_file: /run/dgxspark-image-sync.json.lease
    interval: 5
    timeout: 3960
  register: other_result
"""

RETURN = r"""
finished:
  description: Whether the job ended (false only when O(timeout) passed).
  returned: always
  type: bool
  sample: true
ansible_job_id:
  description: The followed job.
  returned: always
  type: str
  sample: j123456789.1234
table:
  description: The per-node table of the M(dgxspark.vllm.image_sync) result.
  returned: when the job ended
  type: list
  elements: str
msg:
  description: Why the transfer failed, or that O(timeout) passed.
  returned: on failure
  type: str
"""
