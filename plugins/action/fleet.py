# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.fleet: the fleet model from the inventory, published as facts (see the module doc)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import plain_hostvars, resolve_fleet


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # It reads the inventory on the controller and changes nothing: the same in check mode.
    _supports_check_mode = True
    _VALID_ARGS = frozenset(("fleet_group", "tensor_parallel_size", "pipeline_parallel_size", "parallel_variables",
                             "gpus_per_node", "min_nodes"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _args, args = self.validate_argument_spec(argument_spec={
            "fleet_group": {"type": "str"},
            "tensor_parallel_size": {"type": "int"},
            "pipeline_parallel_size": {"type": "int", "default": 1},
            "parallel_variables": {"type": "list", "elements": "str",
                                   "default": ["vllm_serve_tensor_parallel_size", "vllm_serve_pipeline_parallel_size"]},
            "gpus_per_node": {"type": "int", "default": 1},
            "min_nodes": {"type": "int", "default": 1},
        })
        host = task_vars.get("inventory_hostname")
        fleet_group = args["fleet_group"] or task_vars.get("dgxspark_fleet_group") or "spark_pairs"
        groups = {name: list(members) for name, members in task_vars.get("groups", {}).items()}
        try:
            hostvars = plain_hostvars(groups, task_vars.get("hostvars", {}), fleet_group)
        except Exception as exc:  # hostvars is lazy: a template error in one of the few variables read
            raise AnsibleActionFail(f"fleet: cannot read the inventory's host variables: {exc}") from exc
        if len(args["parallel_variables"]) != 2:
            raise AnsibleActionFail("fleet: parallel_variables names two variables (tensor, pipeline)")
        parallel = {}
        if args["tensor_parallel_size"] is not None:
            # This host's sizes, checked against its own cluster (each cluster's group may set its own sizes).
            parallel[host] = {"tensor": args["tensor_parallel_size"], "pipeline": args["pipeline_parallel_size"],
                              "variables": tuple(args["parallel_variables"])}
        fleet = resolve_fleet(groups, hostvars, fleet=fleet_group, gpus_per_node=args["gpus_per_node"],
                              parallel=parallel, min_nodes=args["min_nodes"])
        if fleet["errors"]:
            result.update(failed=True, errors=fleet["errors"],
                          msg=f"{host}: the inventory is not a valid fleet: " + " | ".join(fleet["errors"]))
            return result
        if host not in fleet["nodes"]:
            result.update(failed=True, msg=f"{host}: it is not in the fleet group '{fleet_group}'; add its cluster's "
                                           f"group under '{fleet_group}', or run the play on that group only")
            return result
        published = {key: fleet[key] for key in ("group", "clusters", "host_cluster")}
        result.update(changed=False, ansible_facts={"dgxspark_fleet": published,
                                                    "dgxspark_node": fleet["nodes"][host]})
        return result
