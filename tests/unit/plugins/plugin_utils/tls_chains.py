# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Certificates as operators bring them: an operator's CA (root, issuing CA, server certificate), for the tests of
given TLS identities."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ansible_collections.dgxspark.vllm.plugins.plugin_utils import _tls

NOW = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.timezone.utc)


def _pem(cert) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _issue(subject, issuer=None, issuer_key=None, ca=False, names=(), now=NOW, days=90):
    """(certificate, key): SUBJECT's certificate, issued by ISSUER (with ISSUER_KEY), or self-signed, with the
    extensions a CA sets (key usage, key identifiers, server authentication), which Python 3.13's clients require
    (VERIFY_X509_STRICT)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer.subject if issuer is not None else name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=not ca, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=ca,
                                            crl_sign=ca, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if issuer is not None:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                        critical=False)
    if not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                                        critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(_tls._sans(list(names))), critical=False)
    return builder.sign(issuer_key if issuer is not None else key, hashes.SHA256()), key


def company_ca(names=("127.0.0.1",), now=NOW):
    """An operator's CA: a root, an intermediate, and a server certificate the intermediate issued for NAMES.
    Returns (server certificate PEM, its key PEM, intermediate PEM, root PEM)."""
    root, root_key = _issue("Company Root CA", ca=True, now=now, days=3650)
    middle, middle_key = _issue("Company Issuing CA", root, root_key, ca=True, now=now, days=1000)
    leaf, leaf_key = _issue("door.company.example", middle, middle_key, names=names, now=now)
    return (_pem(leaf), leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()).decode(), _pem(middle), _pem(root))
