# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.fleet: the fleet model from the inventory, published as facts (see the module doc)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import (
    GATEWAY_GROUP, GATEWAY_HOST_VARS, MONITORING_ADDRESS_VAR, MONITORING_GROUP, MONITORING_HOST_VARS, node_fabric,
    plain_hostvars, resolve_fleet, resolve_gateways, service_host_warnings, with_fabric)
from ansible_collections.dgxspark.vllm.plugins.module_utils._inputs import (
    BIND_VARIABLE, DOOR_METRICS_KEY, READ, Unreadable, check_exposure, check_host, check_metrics_key, check_secrets,
    unreadable,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils._node_container import (
    ENGINE_ALIAS_PREFIX, ENGINE_DEFAULTS, ENGINE_PREFIX, engine_settings)
from ansible_collections.dgxspark.vllm.plugins.plugin_utils._tls import given_problem

display = Display()

# The TLS identities an inventory may give (switch, certificate, private key): checked here, before any node changes,
# where the role that serves them would refuse them late and, under no_log, without saying why.
GIVEN_TLS = (("gateway_tls", "gateway_tls_certificate", "gateway_tls_private_key"),
             ("gateway_door_tls", "gateway_door_tls_certificate", "gateway_door_tls_private_key"))


def _raw(hostvars, host, hv):
    """HOST's variables as written (Ansible's HostVars.raw_get: nothing templated, no vault value decrypted), or HV
    itself where hostvars is a plain dict; None when they cannot be read (the check then goes by the names alone)."""
    try:
        return hostvars.raw_get(host) if hasattr(hostvars, "raw_get") else hv
    except Exception:  # pylint: disable=broad-except  # the raw view is a help only
        return None


def read_variables(hostvars, hosts, names) -> dict:
    """{host: {name: value}} of NAMES as hostvars hands them over (templated, a vault's decrypted); a value whose
    template fails is an Unreadable."""
    out = {}
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}
        out[host] = {}
        for variable in names:
            try:
                if variable in hv:
                    out[host][variable] = hv[variable]
            except Exception as exc:  # pylint: disable=broad-except  # lazy hostvars: an undefined or broken template
                out[host][variable] = unreadable(exc)
    return out


def tls_problems(host: str, values: dict) -> list[str]:
    """Why a TLS certificate and key VALUES give HOST cannot be served (GIVEN_TLS), naming the variable and the fix; a
    switched-off identity, or a value that cannot be read yet (left to the role), is not checked."""
    problems = []
    for switch, cert_var, key_var in GIVEN_TLS:
        cert, key = values.get(cert_var) or "", values.get(key_var) or ""
        if isinstance(cert, Unreadable) or isinstance(key, Unreadable) or (not cert and not key):
            continue
        if str(values.get(switch, True)).strip().lower() in ("false", "no", "off", "0", "n", "f"):
            continue
        why = given_problem(str(cert), str(key))
        if why:
            problems.append(f"{host}: {cert_var} and {key_var}: {why}")
    return problems


ENGINE_VARIABLES = tuple(prefix + setting for setting in ENGINE_DEFAULTS for prefix in (ENGINE_PREFIX, ENGINE_ALIAS_PREFIX))


def engines(hostvars, hosts) -> tuple[dict, list[str], dict]:
    """({host: its engine settings}, problems naming the host and the variable, {host: [(alias, neutral name)]}) of
    HOSTS, from the dgxspark_engine_* variables (and their deprecated ray_cluster_* aliases) hostvars hands over."""
    read = read_variables(hostvars, hosts, ENGINE_VARIABLES)
    settings, problems, aliases = {}, [], {}
    for host in hosts:
        values = {name: None if isinstance(value, Unreadable) else value for name, value in read[host].items()}
        unreadable_names = sorted(name for name, value in read[host].items() if isinstance(value, Unreadable))
        settings[host], found, aliases[host] = engine_settings(values)
        problems += [f"host {host}: {problem}; fix it in the inventory (the engine containers' settings: "
                     "roles/ray_cluster/README.md)" for problem in found]
        problems += [f"host {host}: {name} cannot be read (its template fails); fix it in the inventory"
                     for name in unreadable_names]
    return settings, problems, aliases


def input_problems(hostvars, hosts, require_api_key: bool = False, gateways: bool = False) -> list[str]:
    """The problems among the values the inventory (or -e) gives HOSTS for the variables _inputs checks, and their
    secrets' (a placeholder, a vault value nothing maps, and with REQUIRE_API_KEY no key to serve with).

    The values come templated (and a vault's decrypted) as hostvars hands them over; none is ever put in a message.
    A value whose template fails (or a vault value without the vault's password) is an Unreadable: the grammar
    leaves it to the role that uses it (a play need not define every variable), the secrets' checks say what it
    means for them. RAW (hostvars.raw_get: the variables as written) shows a vault value used under another name."""
    problems = []
    read = read_variables(hostvars, hosts, READ + tuple(name for given in GIVEN_TLS for name in given))
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}
        values = read[host]
        problems.extend(tls_problems(host, values))
        problems.extend(check_host(host, values))
        problems.extend(check_exposure(host, values, gateways))
        problems.extend(check_secrets(host, values, raw=lambda host=host, hv=hv: _raw(hostvars, host, hv),
                                      require_api_key=require_api_key))
    return problems


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # It reads the inventory on the controller and changes nothing: the same in check mode.
    _supports_check_mode = True
    _VALID_ARGS = frozenset(("fleet_group", "gateway_group", "monitoring_group", "tensor_parallel_size", "pipeline_parallel_size", "parallel_variables",
                             "gpus_per_node", "min_nodes", "fabric", "require_api_key"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _args, args = self.validate_argument_spec(argument_spec={
            "fleet_group": {"type": "str"},
            "gateway_group": {"type": "str"},
            "monitoring_group": {"type": "str"},
            "tensor_parallel_size": {"type": "int"},
            "pipeline_parallel_size": {"type": "int", "default": 1},
            "parallel_variables": {"type": "list", "elements": "str",
                                   "default": ["vllm_serve_tensor_parallel_size", "vllm_serve_pipeline_parallel_size"]},
            "gpus_per_node": {"type": "int", "default": 1},
            "min_nodes": {"type": "int", "default": 1},
            "fabric": {"type": "dict"},
            "require_api_key": {"type": "bool", "default": False},
        })
        host = task_vars.get("inventory_hostname")
        fleet_group = args["fleet_group"] or task_vars.get("dgxspark_fleet_group") or "spark_pairs"
        groups = {name: list(members) for name, members in task_vars.get("groups", {}).items()}
        try:
            hostvars = plain_hostvars(groups, task_vars.get("hostvars", {}), fleet_group)
        except Exception as exc:  # hostvars is lazy: a template error in one of the few variables read
            raise AnsibleActionFail(f"fleet: cannot read the inventory's host variables: {exc}") from exc
        gateway_group = args["gateway_group"] or task_vars.get("dgxspark_gateway_group") or GATEWAY_GROUP
        try:
            gateway_vars = {h: {key: (task_vars.get("hostvars", {})[h] if h in task_vars.get("hostvars", {}) else {}).get(key)
                                for key in GATEWAY_HOST_VARS} for h in groups.get(gateway_group, [])}
        except Exception as exc:  # hostvars is lazy: a template error in a gateway's address
            raise AnsibleActionFail(f"fleet: cannot read the gateways' host variables: {exc}") from exc
        gateways, gateway_errors = resolve_gateways(groups, gateway_vars, gateway_group)
        monitoring_group = args["monitoring_group"] or task_vars.get("dgxspark_monitoring_group") or MONITORING_GROUP
        try:
            monitor_vars = {h: {key: (task_vars.get("hostvars", {})[h] if h in task_vars.get("hostvars", {}) else {}).get(key)
                                for key in MONITORING_HOST_VARS} for h in groups.get(monitoring_group, [])}
        except Exception as exc:  # hostvars is lazy: a template error in a monitoring host's address
            raise AnsibleActionFail(f"fleet: cannot read the monitoring hosts' host variables: {exc}") from exc
        monitors, monitor_errors = resolve_gateways(groups, monitor_vars, monitoring_group,
                                                    address_var=MONITORING_ADDRESS_VAR, what="monitoring host")
        gateway_errors += monitor_errors
        if len(args["parallel_variables"]) != 2:
            raise AnsibleActionFail("fleet: parallel_variables names two variables (tensor, pipeline)")
        parallel = {}
        if args["tensor_parallel_size"] is not None:
            # This host's sizes, checked against its own cluster (each cluster's group may set its own sizes).
            parallel[host] = {"tensor": args["tensor_parallel_size"], "pipeline": args["pipeline_parallel_size"],
                              "variables": tuple(args["parallel_variables"])}
        fleet = resolve_fleet(groups, hostvars, fleet=fleet_group, gpus_per_node=args["gpus_per_node"],
                              parallel=parallel, min_nodes=args["min_nodes"],
                              service_groups=(gateway_group, monitoring_group))
        # The values of this host's cluster (every member fails together, before any task changes a node), or of
        # this host alone when it is in no cluster.
        cluster = fleet["clusters"].get(fleet["host_cluster"].get(host, ""), {})
        input_errors = input_problems(task_vars.get("hostvars", {}), cluster.get("members") or [host],
                                      require_api_key=args["require_api_key"], gateways=bool(gateways))
        engine, engine_errors, engine_aliases = engines(task_vars.get("hostvars", {}), cluster.get("members") or [host])
        input_errors += engine_errors
        if monitors and not fleet["errors"]:
            heads = [entry["head"] for entry in fleet["clusters"].values()]
            input_errors += check_metrics_key(
                read_variables(task_vars.get("hostvars", {}), heads, DOOR_METRICS_KEY + (BIND_VARIABLE,)),
                read_variables(task_vars.get("hostvars", {}), [m["host"] for m in monitors], DOOR_METRICS_KEY[1:]))
        if fleet["errors"] or gateway_errors or input_errors:
            # dict.fromkeys: a fabric IP is checked fleet-wide and among the cluster's values; say it once.
            errors = list(dict.fromkeys(fleet["errors"] + gateway_errors + input_errors))
            result.update(failed=True, errors=errors,
                          msg=f"{host}: the inventory is not a valid fleet: " + " | ".join(errors))
            return result
        fleet_fact = {key: fleet[key] for key in ("group", "clusters", "host_cluster")}
        fleet_fact["gateway_group"] = gateway_group
        fleet_fact["gateways"] = gateways
        fleet_fact["monitoring_group"] = monitoring_group
        fleet_fact["monitors"] = monitors
        if host not in fleet["nodes"] and host in groups.get(gateway_group, []) + groups.get(monitoring_group, []):
            # A gateway or monitoring host that is no cluster member: the fleet, and no place in it.
            fleet_fact["fabric_ips"] = {h: fleet["nodes"][h]["fabric_ip"] or "" for h in fleet["nodes"]}
            result.update(changed=False, ansible_facts={"dgxspark_fleet": fleet_fact})
            return result
        if host not in fleet["nodes"]:
            result.update(failed=True, msg=f"{host}: it is not in the fleet group '{fleet_group}'; add its cluster's "
                                           f"group under '{fleet_group}', or run the play on that group only")
            return result
        node = fleet["nodes"][host]
        # This node's fabric: given now (rdma_facts' result), else the one this play already published for it; the
        # other members' as they published theirs (a later call, once every member found its own, sees them all).
        published = {}
        for member in fleet["nodes"]:
            if member == host:
                given = args["fabric"]
                if given is None:
                    given = (task_vars.get("dgxspark_node") or {}).get("fabric")
            else:
                try:
                    given = ((task_vars.get("hostvars", {}).get(member) or {}).get("dgxspark_node") or {}).get("fabric")
                except Exception as exc:  # a template error in another host's published fact
                    raise AnsibleActionFail(f"fleet: cannot read {member}'s published dgxspark_node: {exc}") from exc
            published[member] = node_fabric(given) if given else None
        fabrics = {member: published[member] for member in node["members"]}
        node, errors = with_fabric(node, fabrics)
        if errors:
            result.update(failed=True, errors=errors, msg=f"{host}: " + " | ".join(errors))
            return result
        # The node's engine-container settings, resolved once (every backend's containers take them from here).
        node["engine"] = engine.get(host, dict(ENGINE_DEFAULTS))
        for alias, name in engine_aliases.get(host, []):
            display.deprecated(f"{host}: {alias} is deprecated; set {name} instead (the same value; it applies to the "
                               "engine containers of every backend, Ray's and mp's)",
                               version="1.0.0", collection_name="dgxspark.vllm")  # ENGINE_REMOVED_IN
        # Every node's fabric IP across the fleet (what it published, else the inventory's): a fleet-wide transfer
        # over a switched fabric reaches nodes of other clusters.
        fleet_fact["fabric_ips"] = {h: (published[h] or {}).get("ip") or fleet["nodes"][h]["fabric_ip"] or ""
                                    for h in fleet["nodes"]}
        result.update(changed=False, ansible_facts={"dgxspark_fleet": fleet_fact, "dgxspark_node": node})
        warnings = service_host_warnings(host, fleet["nodes"], gateways, monitors)
        if warnings:
            result["warnings"] = warnings
        return result
