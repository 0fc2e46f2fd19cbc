#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.unified_memory."""

from __future__ import annotations

DOCUMENTATION = r"""
module: unified_memory
short_description: Make room in a DGX Spark's unified memory right before vLLM starts, and check there is enough
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - A GB10's GPU memory is the node's memory (about 121.7 GiB as CUDA reports it). vLLM takes
    C(total x gpu_memory_utilization) when it starts and refuses to start when less is free ("Free memory on device
    ... on startup is less than desired GPU memory utilization"). The page cache lives in the same memory, and it is
    fullest right after the weights were written (model_sync) and the image loaded (image_sync).
  - This module makes room first. With O(drop_caches=true) it runs C(sync) and writes C(3) to
    C(/proc/sys/vm/drop_caches), as NVIDIA advises for Sparks (root only; where that is not permitted, for example in a
    container, the reason is returned in RV(drop_caches_error)). Then it evicts every file under O(paths) (the model's
    directory) from the page cache with C(posix_fadvise(POSIX_FADV_DONTNEED)), which needs no privilege.
  - It then reads C(MemTotal) and C(MemFree) and fails, naming the node and the figures, when less than
    C(MemTotal x utilization) is free.
  - With O(check=false) (an engine already runs on the node and holds its share) it only makes room. The weights the
    running engine read are evicted, so an engine restarted by this run finds the memory free.
  - The page cache is runtime state, not configuration. The module never reports a change (RV(cached_before) and
    RV(cached) show what it did), so a rerun that restarts nothing changes nothing.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Nothing is dropped or evicted; a shortfall in the figures as they are is a warning, not a failure.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: It never reports a change (the page cache is runtime state).
  platform:
    support: full
    platforms: posix
options:
  utilization:
    description: The share of the total memory the engine will take (vLLM's C(--gpu-memory-utilization)).
    type: float
    required: true
  paths:
    description: Directories whose files are evicted from the page cache (the model's weights).
    type: list
    elements: path
    default: []
  drop_caches:
    description: Drop the whole clean page cache first (C(sync; echo 3 > /proc/sys/vm/drop_caches)).
    type: bool
    default: true
  check:
    description: Fail when free memory does not cover the request. V(false) only makes room and reports the figures.
    type: bool
    default: true
  meminfo:
    description: The memory figures to read.
    type: path
    default: /proc/meminfo
notes:
  - Run it only when the engine is about to start; a running engine holds its share of the memory.
seealso:
  - name: NVIDIA DGX Spark playbooks
    description: vLLM on Spark, dropping the page cache before the start.
    link: https://github.com/NVIDIA/dgx-spark-playbooks
"""

EXAMPLES = r"""
- name: Make room and check unified memory right before the engine starts
  dgxspark.vllm.unified_memory:
    utilization: 0.80
    paths: [/srv/dgxspark/models]

- name: Only make room (an engine already runs and holds its share)
  dgxspark.vllm.unified_memory:
    utilization: 0.80
    paths: [/srv/dgxspark/models]
    check: false
"""

RETURN = r"""
total:
  description: C(MemTotal) in bytes.
  returned: always
  type: int
free:
  description: C(MemFree) in bytes after making room.
  returned: always
  type: int
available:
  description: C(MemAvailable) in bytes after making room.
  returned: always
  type: int
cached:
  description: C(Cached) (the page cache) in bytes after making room.
  returned: always
  type: int
cached_before:
  description: C(Cached) in bytes before making room.
  returned: always
  type: int
requested:
  description: C(ceil(total x utilization)), what the engine will take.
  returned: always
  type: int
max_utilization:
  description: The highest utilisation the free memory covers (two decimals, rounded down).
  returned: always
  type: float
enough:
  description: Whether the free memory covers the request.
  returned: always
  type: bool
dropped:
  description: Whether the page cache was dropped (C(/proc/sys/vm/drop_caches)).
  returned: always
  type: bool
drop_caches_error:
  description: Why it could not be dropped, when O(drop_caches=true) and it was not.
  returned: when not permitted
  type: str
evicted:
  description: Files and bytes under O(paths) evicted from the page cache.
  returned: always
  type: dict
  sample: {"files": 51, "bytes": 119000000000}
"""

import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import _unified_memory as um


def run(module):
    params = module.params
    if not 0 < params["utilization"] <= 1:
        module.fail_json(msg=f"utilization must be in (0, 1], not {params['utilization']}")
    try:
        before = um.read_meminfo(params["meminfo"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read the memory figures: {exc}")
    result = {"dropped": False, "evicted": {"files": 0, "bytes": 0}, "cached_before": before["Cached"]}
    made_room = "check mode: nothing dropped or evicted"
    if not module.check_mode:
        if params["drop_caches"]:
            error = um.drop_caches()
            result["dropped"] = error is None
            if error:
                result["drop_caches_error"] = error
        result["evicted"] = um.evict(params["paths"])
        made_room = ("page cache dropped" if result["dropped"] else
                     f"page cache not dropped ({result.get('drop_caches_error', 'not asked')})")
        made_room += f", {result['evicted']['files']} model files evicted"
    after = um.read_meminfo(params["meminfo"]) if not module.check_mode else before
    figures = um.verdict(after, params["utilization"])
    result.update(figures)
    result["changed"] = False
    if params["check"] and not figures["enough"]:
        message = um.shortfall_message(socket.gethostname(), figures, made_room)
        if not module.check_mode:
            module.fail_json(msg=message, **result)
        module.warn(f"{message} (check mode: a real run drops and evicts the page cache first)")
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "utilization": {"type": "float", "required": True},
            "paths": {"type": "list", "elements": "path", "default": []},
            "drop_caches": {"type": "bool", "default": True},
            "check": {"type": "bool", "default": True},
            "meminfo": {"type": "path", "default": "/proc/meminfo"},
        },
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
