# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the tls_identity action: one read of the node's file, the decision on the controller, nothing
written and nothing reported changed."""

from __future__ import annotations

import base64
import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.dgxspark.vllm.plugins.action import tls_identity as plugin


def read_by(run_action, args, answer):
    return run_action(plugin, args, {"inventory_hostname": "gw1"}, answer)


def test_a_node_without_a_file_gets_a_new_identity_and_one_with_a_good_one_keeps_it(run_action):
    action, made = read_by(run_action, {"path": "/etc/dgxspark/gateway/tls.pem", "names": ["10.0.0.5"]},
                           {"failed": True, "msg": "File not found: /etc/dgxspark/gateway/tls.pem"})
    assert action._execute_module.call_count == 1  # one round trip to the node
    assert action._execute_module.call_args.kwargs["module_name"] == "ansible.legacy.slurp"
    assert made["source"] == "made" and made["renew"] and not made["changed"] and "BEGIN PRIVATE KEY" in made["pem"]
    _action, kept = read_by(run_action, {"path": "/etc/dgxspark/gateway/tls.pem", "names": ["10.0.0.5"]},
                            {"content": base64.b64encode(made["pem"].encode()).decode()})
    assert kept["source"] == "kept" and not kept["renew"] and kept["fingerprint_sha256"] == made["fingerprint_sha256"]


@pytest.mark.parametrize("args, read, match", [
    ({"path": "relative/tls.pem", "names": ["10.0.0.5"]}, {}, "give the absolute path"),
    ({"path": "/x/tls.pem", "names": ["10.0.0.5"]}, {"failed": True, "msg": "File is not readable: /x/tls.pem"},
     "cannot read /x/tls.pem"),
    ({"path": "/x/tls.pem", "names": ["not a name"]}, {"failed": True, "msg": "File not found: /x/tls.pem"},
     "gw1: tls_identity: the certificate's names holds"),
])
def test_bad_input_and_an_unreadable_file_fail_naming_the_host_and_the_fix(run_action, args, read, match):
    with pytest.raises(AnsibleActionFail, match=match):
        read_by(run_action, args, read)
