"""The bad-inventory suite: one mistake a case, each stopping deploy_qwen35.yml at its first task (the fleet's
publication) on every node of the pair, in seconds, with a message naming host, variable and fix, and no node
touched (each node's containers, images, the collection's directories, /etc's and /root's modes and the
authorized_keys of root are what they were before the run).

The lab's own values pass the same checks, and the two argv the checks protect run on a lab node as built: ping with
`--` before its target, ssh with `-F none`.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import ssh_argv
from labkit import (BIN, INVENTORY, REPO, ansible_env, fabric_if, fabric_ip, node, node_exec, parse_adhoc, recap,
                    report, run)

DEPLOY = str(REPO / "playbooks" / "deploy_qwen35.yml")
NODES = (1, 2)
# What a run that touched a node would change: containers, images, the collection's files (with their times), the
# modes of /etc and /root, root's authorized_keys.
FINGERPRINT = ("docker ps -aq --no-trunc | sort; docker images -aq --no-trunc | sort; "
               "ls -laR --time-style=full-iso /etc/dgxspark /opt/dgxspark /var/lib/dgxspark /srv/dgxspark 2>&1; "
               "stat -c '%n %a %U %Y' /etc /root /root/.ssh 2>&1; sha256sum /root/.ssh/authorized_keys 2>&1")


def fingerprint(i):
    return node_exec(node(i), "sh", "-c", FINGERPRINT).stdout


def cases():
    """(id, extra vars as JSON or None, an extra inventory or None, texts the failure must name)."""
    h1, h2 = node(1), node(2)
    return [
        ("two heads", {"dgxspark_node_role": "head"}, None,
         [f"cluster pair1: it has 2 heads ({h1}, {h2})", "set dgxspark_node_role: worker on all but one"]),
        ("a host in two clusters", None,
         {"all": {"children": {"spark_pairs": {"children": {"pair9": {"hosts": {h1: None, h2: None}}}}}}},
         [f"host {h1}: it is in several groups that look like clusters (pair1, pair9)",
          "move it, or set dgxspark_cluster"]),
        ("an IP with a quote", {"dgxspark_fabric_ip": f'{fabric_ip(2)}",port-forwarding,permitopen="any'}, None,
         [f"host {h1}: dgxspark_fabric_ip is", f"host {h2}: dgxspark_fabric_ip is", "not an IP address",
          "set it to one IP address"]),
        ("an IP that is a wildcard", {"dgxspark_fabric_ip": "*"}, None,
         [f"host {h1}: dgxspark_fabric_ip is '*', not an IP address", "set it to one IP address"]),
        ("a newline in the API key", {"dgxspark_api_key": "lab-key\nVLLM_ALLOW_RUNTIME_LORA_UPDATING=1"}, None,
         [f"host {h1}: dgxspark_api_key contains a newline (the value is not shown)", "set it to 8 to 512 of the characters"]),
        ("a directory outside the collection's", {"node_trust_dir": "/etc"}, None,
         [f"host {h1}: node_trust_dir is '/etc', which is not a directory of the collection's own",
          "e.g. /etc/dgxspark/transfer"]),
        ("a malformed image name", {"dgxspark_image": "lab/vllm-qwen35:0.17\nRUN id"}, None,
         [f"host {h2}: dgxspark_image is", "not an image reference", "set it to [registry[:port]/]repository"]),
        ("a model id that leaves the models directory", {"dgxspark_model": "Qwen/../../etc"}, None,
         [f"host {h1}: dgxspark_model is 'Qwen/../../etc', not a Hugging Face id", "set it to namespace/name"]),
    ]


CASES = cases()


def test_the_labs_own_values_pass_the_checks(lab):
    """The fleet's publication (the checks) answers on every node of the lab's inventory as it is."""
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), "spark_pairs", "-m", "dgxspark.vllm.fleet"], check=False,
               env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout.count("| SUCCESS") == len(NODES), proc.stdout[-3000:]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_bad_inventory_stops_every_node_at_the_first_task_and_touches_none(lab, tmp_path, case):
    name, extra_vars, extra_inventory, wanted = case
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY)]
    if extra_inventory:
        path = tmp_path / "extra.yml"
        path.write_text(json.dumps(extra_inventory))
        argv += ["-i", str(path)]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    before = {i: fingerprint(i) for i in NODES}
    start = time.monotonic()
    proc = run([*argv, DEPLOY], check=False, env=ansible_env(), timeout=300)
    seconds = time.monotonic() - start
    after = {i: fingerprint(i) for i in NODES}
    report(f"bad inventory: {name}: rc {proc.returncode} in {seconds:.1f} s")
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0, out[-3000:]
    for text in wanted:
        assert text in out, (text, out[-4000:])
    # Every node failed the first task (the fleet's publication, after the role's argument check on the controller),
    # and nothing ran after it.
    tasks = re.findall(r"^TASK \[([^\]]+)\]", proc.stdout, re.M)
    assert tasks == ["dgxspark.vllm.preflight : Validating arguments against arg spec 'main' - Check DGX Spark nodes "
                     "and pairs before anything starts",
                     "dgxspark.vllm.preflight : Publish the fleet and this node's place in its cluster (from the "
                     "inventory, before anything runs on a node)"], tasks
    for i in NODES:
        assert recap(proc.stdout, node(i)) == {"ok": 1, "changed": 0, "unreachable": 0, "failed": 1}, out[-3000:]
        assert before[i] == after[i], f"{node(i)} was touched:\n{before[i]}\n---\n{after[i]}"
    assert seconds < 60, f"{name}: {seconds:.0f} s to refuse (should fail in seconds)"


def test_ping_runs_with_a_double_dash_before_its_target_on_a_node(lab):
    """node_facts' ping argv (-- before the peer's address) is one the node's iputils ping accepts."""
    args = {"ping_targets": [fabric_ip(2)], "ping_interface": fabric_if(1), "mtu": 1500, "ping_count": 1}
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), node(1), "-m", "dgxspark.vllm.node_facts", "-a",
                json.dumps(args)], check=False, env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    result = parse_adhoc(proc.stdout)
    assert result["pings"][0]["target"] == fabric_ip(2) and result["pings"][0]["rc"] == 0, result["pings"]


def test_the_transfer_ssh_argv_with_no_config_file_is_accepted_by_a_nodes_ssh(lab):
    """ssh -F none and the transfer's options, as ssh_argv builds them, parse on the node's OpenSSH (-G: print the
    configuration it would use, and connect nowhere)."""
    argv = ssh_argv({"host": fabric_ip(2), "port": 22}, "/etc/dgxspark/transfer/id_ed25519",
                    "/etc/dgxspark/transfer/known_hosts")
    assert argv[:3] == ["ssh", "-F", "none"]
    proc = node_exec(node(1), argv[0], "-G", *argv[1:], check=False)
    assert proc.returncode == 0, proc.stderr
    assert "stricthostkeychecking true" in proc.stdout and "batchmode yes" in proc.stdout
