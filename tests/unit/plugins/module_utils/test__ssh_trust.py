# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the known_hosts and authorized_keys lines of the fleet's transfer trust."""

from __future__ import annotations

import jinja2
import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _ssh_trust as t

# Real public keys (made for these tests, private halves thrown away).
KEY1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEoPWPoo+QKRpI+IwIwJMN+7i434K4ufFxAzLQAnVnMy root@spark-1"
KEY2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIxMVMSv1TgohZ0AkeMdHaIRAYLO1H7Y0VAtUcARZZxN root@spark-2"
ECDSA = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBHu/4zHOwj4UWSf2TmVMWh/ov5BJqJedM7Lw"
         "eWD7LWbgmujWmbqqyJLpearH7cvR+XJEdYUdwAG3PxGzrVRHXqg= x")
HOSTS = [{"name": "spark-1", "address": "192.168.100.11", "host_key": KEY1},
         {"name": "spark-2", "address": "192.168.100.12", "host_key": KEY2}]
COMMAND = "/usr/bin/python3 /opt/dgxspark/bin/dgxspark-transfer /etc/dgxspark/transfer/relay.json"
COMMENT = "dgxspark-transfer@spark_pairs"

# The Jinja that built these lines in node_trust 0.1.0 (roles/node_trust/tasks/present.yml). Ansible templates with
# trim_blocks; the module added the final newline when it was missing.
OLD_KNOWN_HOSTS = """{% for h in node_trust_members %}
{% set key = hostvars[h].node_trust_info.host_key.split() %}
{% set ip = hostvars[h].node_trust_node_ip %}
{{ ip if node_trust_ssh_port | int == 22 else '[' ~ ip ~ ']:' ~ node_trust_ssh_port }} {{ key[0] }} {{ key[1] }}
{% endfor %}
"""
OLD_AUTHORIZED_LINE = (
    "{{ 'restrict,from=\"' ~ (node_trust_from | join(',')) ~ '\",command=\"' ~ node_trust_python ~ ' '"
    " ~ node_trust_program_dir ~ '/dgxspark-transfer ' ~ node_trust_dir ~ '/relay.json\" '"
    " ~ node_trust_pub[0] ~ ' ' ~ node_trust_pub[1] ~ ' ' ~ node_trust_comment }}")


def old_known_hosts(hosts, port):
    hostvars = {h["name"]: {"node_trust_info": {"host_key": h["host_key"]}, "node_trust_node_ip": h["address"]}
                for h in hosts}
    text = jinja2.Environment(trim_blocks=True).from_string(OLD_KNOWN_HOSTS).render(
        node_trust_members=[h["name"] for h in hosts], hostvars=hostvars, node_trust_ssh_port=port)
    return text if text.endswith("\n") else text + "\n"


def old_authorized_line(sources, key):
    return jinja2.Environment().from_string(OLD_AUTHORIZED_LINE).render(
        node_trust_from=sources, node_trust_python="/usr/bin/python3", node_trust_program_dir="/opt/dgxspark/bin",
        node_trust_dir="/etc/dgxspark/transfer", node_trust_pub=key.split(), node_trust_comment=COMMENT)


@pytest.mark.parametrize("port", [22, 2222])
def test_known_hosts_is_byte_identical_to_what_0_1_0_wrote(port):
    """A rerun after upgrading the collection must not touch the file on any node."""
    assert t.known_hosts_text(HOSTS, port) == old_known_hosts(HOSTS, port)


def test_known_hosts_lines_pinned():
    assert t.known_hosts_text(HOSTS) == (
        "192.168.100.11 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEoPWPoo+QKRpI+IwIwJMN+7i434K4ufFxAzLQAnVnMy\n"
        "192.168.100.12 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIxMVMSv1TgohZ0AkeMdHaIRAYLO1H7Y0VAtUcARZZxN\n")
    assert t.known_hosts_line("fd00::11", ECDSA, 2222) == f"[fd00::11]:2222 {' '.join(ECDSA.split()[:2])}\n"
    assert t.known_hosts_line("spark-1.fabric", KEY1) == f"spark-1.fabric {' '.join(KEY1.split()[:2])}\n"


def test_authorized_line_is_byte_identical_to_what_0_1_0_wrote():
    sources = ["192.168.100.11", "192.168.100.12"]
    line = t.authorized_line(f"{KEY1.rsplit(' ', 1)[0]} {COMMENT}", sources, COMMAND, COMMENT)
    assert line == old_authorized_line(sources, f"{KEY1.rsplit(' ', 1)[0]} {COMMENT}")
    assert line == ('restrict,from="192.168.100.11,192.168.100.12",command="/usr/bin/python3 '
                    '/opt/dgxspark/bin/dgxspark-transfer /etc/dgxspark/transfer/relay.json" ssh-ed25519 '
                    f'AAAAC3NzaC1lZDI1NTE5AAAAIEoPWPoo+QKRpI+IwIwJMN+7i434K4ufFxAzLQAnVnMy {COMMENT}')


def test_authorized_line_accepts_addresses_and_networks_and_refuses_patterns():
    line = t.authorized_line(KEY2, ["192.168.100.0/24", "192.168.100.11", "fd00::/64"], COMMAND, COMMENT)
    assert line.startswith('restrict,from="192.168.100.0/24,192.168.100.11,fd00::/64",command=')
    # 0.1.0 let a wildcard through (sshd would accept a key from any address it matches); every source is now parsed
    # by ipaddress: the review's '*' and a quote-carrying "IP" both stop here.
    for source in ("10.0.*", "*", "192.168.100.11?", "300.1.1.1", '192.168.100.11",port-forwarding,permitopen="any'):
        with pytest.raises(t.TrustLineError, match="must be an IP address or network"):
            t.authorized_line(KEY2, [source], COMMAND, COMMENT)


@pytest.mark.parametrize(("key", "message"), [
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "key type 'ssh-dss'"),
    ("ssh-ed25519", "must be 'TYPE BASE64"),
    ("ssh-ed25519 not*base64", "does not carry a base64 OpenSSH key blob"),
    (f"ssh-rsa {KEY1.split()[1]}", "says ssh-rsa but its blob is a 'ssh-ed25519' key"),
    (f"{KEY1}\n{KEY2}", "must be one line"),
    ("ssh-ed25519 AAAA\rcommand", "must be one line"),
    (None, "must be one line"),
])
def test_bad_keys_are_refused(key, message):
    with pytest.raises(t.TrustLineError, match=message):
        t.known_hosts_line("192.168.100.11", key, name="spark-1")


@pytest.mark.parametrize("address", ["", "192.168.100.11\n10.0.0.1", "host name", "-spark", "spark_1", "a,b",
                                     "300.1.1.1", "*", "[fd00::1]", "fe80::1%x\n@cert-authority *",
                                     "fe80::1%eth0"])
def test_bad_addresses_are_refused(address):
    with pytest.raises(t.TrustLineError, match="spark-2: the fabric address|spark-2: the fabric address is empty"):
        t.known_hosts_text([{"name": "spark-2", "address": address, "host_key": KEY2}])


@pytest.mark.parametrize("port", [0, 65536, "22", True])
def test_bad_ports_are_refused(port):
    with pytest.raises(t.TrustLineError, match="SSH port"):
        t.known_hosts_text(HOSTS, port)


@pytest.mark.parametrize(("sources", "command", "comment", "message"), [
    ([], COMMAND, COMMENT, "from= list of the public key is empty"),
    (['10.0.0.1",command="/bin/sh'], COMMAND, COMMENT, "source"),
    (["10.0.0.1\n"], COMMAND, COMMENT, "source"),
    (["spark-1"], COMMAND, COMMENT, "source"),
    (["10.0.0.1"], '/usr/bin/python3 "x"', COMMENT, "forced command"),
    (["10.0.0.1"], "python3 /x", COMMENT, "forced command"),
    (["10.0.0.1"], COMMAND + "\n", COMMENT, "forced command"),
    (["10.0.0.1"], COMMAND + "; rm -rf /", COMMENT, "forced command"),
    (["10.0.0.1"], COMMAND, "two words", "comment"),
    (["10.0.0.1"], COMMAND, "", "comment"),
    (["10.0.0.1"], COMMAND, "c\nssh-ed25519 AAAA", "comment"),
])
def test_bad_authorized_parts_are_refused(sources, command, comment, message):
    with pytest.raises(t.TrustLineError, match=message):
        t.authorized_line(KEY1, sources, command, comment)
