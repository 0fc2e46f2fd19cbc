# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.deploy_record: the digest of a deploy's inputs, made on the controller, then the module
on the node (see the module's documentation)."""

from __future__ import annotations

import hashlib
import os
import typing as t

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.release import __version__ as ANSIBLE_VERSION

from ansible_collections.dgxspark.vllm.plugins.module_utils._deploy_record import digest

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The collection's own files that decide what a deploy does (role defaults and tasks, plugins, playbooks).
CONTENT = ("galaxy.yml", "meta", "playbooks", "plugins", "roles")
# The facts the preflight publishes before the read (they describe the node as it is now, not what the deploy is
# asked): left out of the variables. dgxspark_fleet and each member's dgxspark_node are taken on purpose, whole.
RUN_FACTS = frozenset((
    "dgxspark_fleet", "dgxspark_node",
    "preflight_container_gpu", "preflight_container_image_info", "preflight_disk_free_gb", "preflight_docker_sdk_again",
    "preflight_docker_sdk_install", "preflight_fabric", "preflight_gpus", "preflight_host_issues",
    "preflight_checkpoint", "preflight_model_fit_result",
    "preflight_memory_available_gb", "preflight_memory_total_gb", "preflight_mtu", "preflight_node",
    "preflight_node_info", "preflight_rails", "preflight_rdma_required", "preflight_result", "preflight_sdk_node",
    # What the head's pull did this run (image_pull, before the read): whether it pulled is not an input, and the image
    # it left is compared by ID with the node's record (deploy_state_images).
    "image_pull_result",
    # Not an input: it sends every cluster through the whole deploy, whose record is the same.
    "dgxspark_full_run",
    # rollout.yml's look for each head's engine key (before the read; a deploy has none): not an input.
    "rollout_engine_key",
))
# The variables of the role that compares and records (dgxspark.vllm.deploy_state): how a deploy is compared with its
# record, not what it is asked.
OWN_PREFIX = "deploy_state_"
BROKEN = "<a template that does not resolve>"


def prefixes(root: str = COLLECTION_ROOT) -> tuple[str, ...]:
    """The variable prefixes of the collection: dgxspark_ and one per role (the roles' variables are prefixed)."""
    roles = sorted(d for d in os.listdir(os.path.join(root, "roles")) if not d.startswith("."))
    return ("dgxspark_",) + tuple(f"{role}_" for role in roles)


def content_digest(root: str = COLLECTION_ROOT) -> str:
    """sha256 over the collection's files under CONTENT (paths and contents, in order; caches left out)."""
    h = hashlib.sha256()
    for top in CONTENT:
        base = os.path.join(root, top)
        paths = [base] if os.path.isfile(base) else []
        for parent, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            paths += [os.path.join(parent, n) for n in sorted(names) if not n.endswith((".pyc", ".pyo"))]
        for path in paths:
            h.update(os.path.relpath(path, root).encode("utf-8") + b"\0")
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def host_inputs(hostvars: t.Mapping, host: str, names_prefixes: tuple[str, ...]) -> dict:
    """The variables HOST sees whose names carry a collection prefix, resolved (RUN_FACTS left out); a value whose
    template fails is recorded as such (a later fix of it is a change)."""
    values = hostvars[host] if host in hostvars else {}
    out = {}
    for name in sorted(values):
        if not name.startswith(names_prefixes) or name.startswith(OWN_PREFIX) or name in RUN_FACTS:
            continue
        try:
            out[name] = values[name]
        except Exception:  # pylint: disable=broad-except  # lazy hostvars: an undefined or broken template
            out[name] = BROKEN
    return out


def inputs_digest(hostvars: t.Mapping, members: t.Sequence[str], fleet: t.Any, *, root: str = COLLECTION_ROOT) -> str:
    """The digest of what a deploy of a cluster is asked: every member's variables and published place and fabric
    (dgxspark_node), the fleet (dgxspark_fleet), the collection's files and ansible-core's version."""
    names_prefixes = prefixes(root)
    members_inputs = {}
    for host in members:
        try:
            node = (hostvars[host] if host in hostvars else {}).get("dgxspark_node")
        except Exception:  # pylint: disable=broad-except
            node = BROKEN
        members_inputs[host] = {"variables": host_inputs(hostvars, host, names_prefixes), "node": node}
    return digest({"members": members_inputs, "fleet": fleet, "collection": content_digest(root),
                   "ansible_core": ANSIBLE_VERSION})


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if not args.get("inputs"):
            if args.get("state", "read") != "read":
                raise AnsibleActionFail("deploy_record: state=present records the read's inputs: pass inputs "
                                        "(the earlier read's result.inputs)")
            node = task_vars.get("dgxspark_node") or {}
            members = node.get("members") or [task_vars.get("inventory_hostname")]
            try:
                args["inputs"] = inputs_digest(task_vars.get("hostvars", {}), members, task_vars.get("dgxspark_fleet"))
            except OSError as exc:
                raise AnsibleActionFail(f"deploy_record: cannot read the collection's files: {exc}") from exc
        result.update(self._execute_module(module_name="dgxspark.vllm.deploy_record", module_args=args,
                                           task_vars=task_vars))
        # The module masks its no_log option in what it returns: the record step gets the digest from here.
        result["inputs"] = args["inputs"]
        return result
