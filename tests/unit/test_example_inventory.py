"""The example inventory is a valid fleet, read the way Ansible reads it (group vars included)."""

from __future__ import annotations

from pathlib import Path

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import HOST_VARS, resolve_fleet, resolve_gateways
from ansible_collections.dgxspark.vllm.plugins.module_utils._inputs import VARIABLES, check_value

try:  # added with the first-run checks (issue 33)
    from ansible_collections.dgxspark.vllm.plugins.module_utils._inputs import check_secrets
except ImportError:  # at 13f6075: the tests below fail, the one above still runs
    check_secrets = None

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


def example_vars():
    """Every example host's variables as Ansible reads them, with the vault example in place of vault.yml (what an
    operator who copied it and ran without editing it would have)."""
    import yaml

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(EXAMPLE)])
    variables = VariableManager(loader=loader, inventory=inventory)
    vault = yaml.safe_load((EXAMPLE.parent / "group_vars" / "all" / "vault.yml.example").read_text())
    return inventory, variables, vault


def test_the_example_maps_the_hf_token_from_the_vault():
    """fails at 13f6075: vault.yml.example has vault_dgxspark_hf_token, and nothing mapped it to dgxspark_hf_token
    (the operator filled the token in, and the gated download still got no token)."""
    main = (EXAMPLE.parent / "group_vars" / "all" / "main.yml").read_text()
    assert 'dgxspark_hf_token: "{{ vault_dgxspark_hf_token }}"' in main.splitlines()
    inventory, variables, vault = example_vars()
    for host in inventory.get_hosts():
        raw = dict(variables.get_vars(host=host), **vault)  # vault.yml made from the example, beside main.yml
        assert raw["dgxspark_hf_token"] == "{{ vault_dgxspark_hf_token }}"
        assert check_secrets(host.name, {name: raw[name] for name in raw if name in vault or name in VARIABLES},
                             raw=raw) == []


def test_the_example_vaults_key_is_refused_by_the_check_until_the_operator_generates_one():
    """fails at 13f6075: the example vault's key (change-me) passed the check and would have gone live."""
    text = (EXAMPLE.parent / "group_vars" / "all" / "vault.yml.example").read_text()
    _inventory, _variables, vault = example_vars()
    problem = check_value("spark-a1.example.internal", "dgxspark_api_key", vault["vault_dgxspark_api_key"])
    assert problem and "is a placeholder, not a key" in problem and vault["vault_dgxspark_api_key"] not in problem
    assert "openssl rand -hex 32" in text  # the comment says how to make a real one
