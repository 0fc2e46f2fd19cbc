"""The example inventory is a valid fleet, read the way Ansible reads it (group vars included)."""

from __future__ import annotations

from pathlib import Path

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import HOST_VARS, resolve_fleet, resolve_gateways

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "hosts.yml"


def test_example_inventory_is_a_valid_fleet_of_two_pairs_a_switched_cluster_of_four_and_a_single_spark():
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(EXAMPLE)])
    variables = VariableManager(loader=loader, inventory=inventory)
    groups = {group.name: [host.name for host in group.get_hosts()] for group in inventory.groups.values()}
    hostvars, parallel = {}, {}
    for host in inventory.get_hosts():
        hv = variables.get_vars(host=host)
        hostvars[host.name] = {key: hv.get(key) for key in HOST_VARS}
        parallel[host.name] = {"tensor": hv["dgxspark_tensor_parallel_size"],
                               "pipeline": hv["dgxspark_pipeline_parallel_size"]}
    fleet = resolve_fleet(groups, hostvars, parallel=parallel)
    assert fleet["errors"] == []
    assert {name: (c["size"], c["topology"]) for name, c in fleet["clusters"].items()} == {
        "pair_a": (2, "direct"), "pair_b": (2, "direct"), "cluster_c": (4, "switch"), "solo_d": (1, "single")}
    assert fleet["nodes"]["spark-c4.example.internal"]["rank"] == 3
    # The gateway box is not a cluster member; its LAN address is its ansible_host.
    gateway_vars = {h: {"ansible_host": variables.get_vars(host=inventory.get_host(h)).get("ansible_host")}
                    for h in groups["dgxspark_gateway"]}
    assert resolve_gateways(groups, gateway_vars) == ([{"host": "gateway-1.example.internal", "lan_ip": "10.20.0.5"}], [])
    assert "gateway-1.example.internal" not in fleet["nodes"]
