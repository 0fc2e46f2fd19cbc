#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.tls_identity (it runs on the controller)."""

from __future__ import annotations

# The action plugin (plugins/action/tls_identity.py) reads the node's file and decides on the controller, and declares
# supports_check_mode there (_supports_check_mode = True: it only reads); this file only documents it.

DOCUMENTATION = r"""
module: tls_identity
short_description: Keep, take or make the TLS certificate and private key a node serves with
version_added: 0.10.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads one PEM file on the node (a certificate and its private key, as HAProxy's C(crt) reads it) and decides on
    the controller what it should hold. It writes nothing itself; the role installs RV(pem) with the rest of the
    service's configuration, so that the service's own check sees the new file before it is used.
  - With O(certificate) and O(private_key) (the inventory's, the key from a vault), the file holds them. They are
    refused when the key is not the certificate's, the certificate has expired, or its chain does not lead, each
    certificate issued by the next, to a self-signed root (append the issuing CA's certificates up to the root).
  - Otherwise the node's certificate is kept while it names every one of O(names) and has more than
    O(renew_before_days) days left. Else a new P-256 key and a self-signed certificate for O(names) are made on the
    controller with the Python package C(cryptography) (a requirement of ansible-core); nothing is installed on the
    node.
  - Clients check a self-signed certificate by its RV(fingerprint_sha256), or by giving RV(trust_anchor) to their
    client (C(curl --cacert)). RV(trust_anchor) is the certificate itself when it is self-signed, else its chain's
    root, the one certificate OpenSSL (HAProxy's C(ca-file), Python, curl) accepts as the end of the chain.
  - The result holds the private key (RV(pem)); the task needs C(no_log).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: It only reads the node; it behaves the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A node's good certificate is kept, so a second run returns the same RV(pem).
  platform:
    support: full
    platforms: posix
options:
  path:
    description: Absolute path of the identity file on the node (read only).
    type: path
    required: true
  names:
    description:
      - The subject alternative names the certificate must hold - the addresses and DNS names clients use.
    type: list
    elements: str
    required: true
  optional_names:
    description:
      - Names added to O(names) when they are IP addresses or DNS names, and left out otherwise (a host's
        C(ansible_host), which may be an alias SSH resolves but no certificate can name).
    type: list
    elements: str
    default: []
  common_name:
    description: The subject's common name of a made certificate; the first of O(names) when empty.
    type: str
    default: ""
  certificate:
    description:
      - A PEM certificate to serve, optionally followed by its chain; with O(private_key).
    type: str
    default: ""
  private_key:
    description: The unencrypted PEM private key of O(certificate).
    type: str
    default: ""
  valid_days:
    description: How long a made certificate is valid.
    type: int
    default: 397
  renew_before_days:
    description: A kept certificate with this many days left or fewer is replaced by a new one.
    type: int
    default: 30
notes:
  - Runs on the controller, with one read of the node.
seealso:
  - module: dgxspark.vllm.node_files
"""

EXAMPLES = r"""
- name: Keep or make the gateway's certificate
  dgxspark.vllm.tls_identity:
    path: /etc/dgxspark/gateway/tls.pem
    names: [10.20.0.5, gateway.example.net]
  register: gateway_tls_found
  no_log: true
"""

RETURN = r"""
pem:
  description: The file's text - the certificate, its chain, then the private key.
  returned: always
  type: str
certificate:
  description: The served certificate alone (PEM), without its chain.
  returned: always
  type: str
trust_anchor:
  description:
    - The certificate clients trust (PEM) - the served certificate when it is self-signed, else its chain's root.
    - What the roles write beside the identity as C(tls.crt), for the gateway's relays, Prometheus and the benchmark.
  returned: always
  type: str
  version_added: 0.12.0
fingerprint_sha256:
  description: SHA-256 of the certificate, colon-separated hex pairs.
  returned: always
  type: str
  sample: "3A:7F:...:C2"
not_after:
  description: When the certificate expires (UTC).
  returned: always
  type: str
  sample: "2027-12-04T10:00:00Z"
names:
  description: The certificate's subject alternative names.
  returned: always
  type: list
  elements: str
source:
  description: V(given) (the inventory's), V(kept) (the node's) or V(made) (new, self-signed).
  returned: always
  type: str
reason:
  description: Why, in words (what was wrong with the node's certificate when a new one was made).
  returned: always
  type: str
renew:
  description: Whether RV(pem) differs from what the node's file holds.
  returned: always
  type: bool
"""
