# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the run tells the operator about a TLS identity (plugins/plugin_utils/_tls.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: tls_advice
short_description: How the operator checks a TLS certificate the collection serves, or that it serves plain HTTP
version_added: 0.11.0
author:
- dgxspark.vllm maintainers
description:
- For a self-signed certificate made by M(dgxspark.vllm.tls_identity), its SHA-256 fingerprint, names and end, and the
  commands that save it, check its fingerprint and trust it alone (C(openssl s_client), C(openssl x509), C(curl --cacert)).
- For the inventory's certificate, its fingerprint. With no TLS identity, that client keys and prompts cross the network
  in clear.
positional: _input
options:
  _input:
    description: What M(dgxspark.vllm.tls_identity) returned; empty for plain HTTP.
    type: dict
    required: true
  who:
    description: Whose identity it is (the start of the line), for example C(gateway gw1).
    type: str
    required: true
  url:
    description: Where clients reach it (its host and port go into the C(openssl s_client) command).
    type: str
    required: true
  file:
    description: The file name the commands save the certificate to.
    type: str
    default: ca.pem
  plain:
    description: Why it serves plain HTTP (the setting that turned TLS off), said with an empty O(_input).
    type: str
    default: TLS off
  given:
    description: The variable that gave an inventory certificate.
    type: str
    default: certificate
"""

EXAMPLES = r"""
- name: Say how clients check the gateway's certificate
  ansible.builtin.debug:
    msg: >-
      {{ gateway_result.tls | dgxspark.vllm.tls_advice(who='gateway ' ~ inventory_hostname, url=gateway_result.url,
         file='gateway.pem', plain='gateway_tls: false', given='gateway_tls_certificate') }}
"""

RETURN = r"""
_value:
  description: One line for the operator.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.plugin_utils import _tls


def tls_advice(tls, who, url, file="ca.pem", plain="TLS off", given="certificate"):
    try:
        return _tls.advice(tls, str(who), str(url), str(file), str(plain), str(given))
    except _tls.TlsError as exc:
        raise AnsibleFilterError(f"tls_advice: {exc}") from None


class FilterModule:
    def filters(self):
        return {"tls_advice": tls_advice}
