"""The TLS identity the gateway serves with (security review M2): kept while good for the names asked, the
inventory's taken as given, otherwise made new and self-signed; every bad input refused with what to do."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ansible_collections.dgxspark.vllm.plugins.plugin_utils import _tls
from ansible_collections.dgxspark.vllm.tests.unit.plugins.plugin_utils.tls_chains import _issue, _pem, company_ca

NOW = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.timezone.utc)


def made(names=("10.0.0.5", "127.0.0.1"), now=NOW, days=397):
    return _tls.plan(None, list(names), "gateway", now=now, valid_days=days)


def test_a_node_without_one_gets_a_self_signed_certificate_for_every_name():
    found = made(["10.0.0.5", "Gateway.Example.NET", "fd00::5", "10.0.0.5"])
    cert = x509.load_pem_x509_certificate(found["certificate"].encode())
    assert found["source"] == "made" and found["reason"] == "the node has none" and found["changed"]
    assert found["names"] == ["10.0.0.5", "fd00::5", "gateway.example.net"]
    assert cert.issuer == cert.subject and found["not_after"] == "2028-01-08T12:00:00Z"
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert found["fingerprint_sha256"] == ":".join(f"{b:02X}" for b in cert.fingerprint(hashes.SHA256()))
    # HAProxy's crt: the certificate, then its key, in one file.
    assert found["pem"].index("BEGIN CERTIFICATE") < found["pem"].index("BEGIN PRIVATE KEY")


def test_a_good_certificate_is_kept_as_it_is():
    first = made()
    again = _tls.plan(first["pem"], ["127.0.0.1"], "gateway", now=NOW + datetime.timedelta(days=300))
    assert again["source"] == "kept" and not again["changed"] and again["pem"] == first["pem"]
    assert again["fingerprint_sha256"] == first["fingerprint_sha256"]


@pytest.mark.parametrize("case, names, later, why", [
    ("a new address", ["10.0.0.6"], 0, "it does not name 10.0.0.6"),
    ("close to its end", ["10.0.0.5"], 380, "it expires on 2028-01-08 (within 30 days)"),
    ("expired", ["10.0.0.5"], 400, "it expires on 2028-01-08"),
])
def test_a_certificate_that_does_not_serve_is_replaced(case, names, later, why):
    first = made()
    again = _tls.plan(first["pem"], names, "gateway", now=NOW + datetime.timedelta(days=later))
    print(f"{case}: {again['reason']}")
    assert again["source"] == "made" and why in again["reason"] and again["changed"]
    assert again["fingerprint_sha256"] != first["fingerprint_sha256"]


def test_a_file_whose_key_is_not_the_certificates_or_that_holds_garbage_is_replaced():
    one, two = made(), made()
    mixed = one["certificate"] + two["pem"].split("-----END CERTIFICATE-----\n", 1)[1]
    assert _tls.plan(mixed, ["10.0.0.5"], "", now=NOW)["reason"].endswith("its private key is not the certificate's")
    assert _tls.plan("not a pem", ["10.0.0.5"], "", now=NOW)["reason"] == (
        "the node's file holds no readable certificate and key")


def _given(names=("gw.example.net",), days=90):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "gw")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(7).not_valid_before(NOW - datetime.timedelta(days=1))
            .not_valid_after(NOW + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM).decode(),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                              serialization.NoEncryption()).decode())


def test_the_inventorys_certificate_is_served_as_given_with_its_chain():
    cert, key, middle, root = company_ca(["gw.example.net"])
    found = _tls.plan(made()["pem"], ["10.0.0.5"], "", given_certificate=cert + middle + root, given_private_key=key,
                      now=NOW)
    assert found["source"] == "given" and found["names"] == ["gw.example.net"] and found["changed"]
    assert found["pem"].count("BEGIN CERTIFICATE") == 3 and found["pem"].startswith(cert)
    assert found["certificate"] == cert and found["trust_anchor"] == root
    # Given again, the node's file already holds it: nothing to write.
    assert not _tls.plan(found["pem"], ["10.0.0.5"], "", given_certificate=cert + middle + root, given_private_key=key,
                         now=NOW)["changed"]
    # Kept later (no longer given, still naming what is asked), its root is still what clients trust.
    kept = _tls.plan(found["pem"], ["gw.example.net"], "", now=NOW)
    assert kept["source"] == "kept" and kept["trust_anchor"] == root


def test_a_self_signed_certificate_is_its_own_trust_anchor():
    cert, key = _given()
    assert _tls.plan(None, ["10.0.0.5"], "", given_certificate=cert, given_private_key=key,
                     now=NOW)["trust_anchor"] == cert
    found = made()
    assert found["trust_anchor"] == found["certificate"]
    assert _tls.plan(found["pem"], ["10.0.0.5"], "", now=NOW)["trust_anchor"] == found["certificate"]


def _handshake(pem: str, cadata: str) -> str:
    """A TLS handshake to a server on 127.0.0.1 serving PEM (certificate, chain, key) from a client that trusts
    CADATA alone, as HAProxy's `verify required ca-file` and OpenSSL's defaults do (no partial chain), strictly as
    Python 3.13's clients do: '' when it verifies, else the client's error."""
    import socket
    import ssl
    import tempfile
    import threading

    with tempfile.NamedTemporaryFile("w", suffix=".pem") as file:
        file.write(pem)
        file.flush()
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(file.name)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cadata=cadata)
    client.verify_flags &= ~getattr(ssl, "VERIFY_X509_PARTIAL_CHAIN", 0)
    # As Python 3.13's default context does: the certificates must follow RFC 5280 strictly.
    client.verify_flags |= getattr(ssl, "VERIFY_X509_STRICT", 0)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve():
            conn = listener.accept()[0]
            try:
                with server.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                with client.wrap_socket(raw, server_hostname="127.0.0.1"):
                    return ""
        except ssl.SSLError as exc:
            return str(exc)
        finally:
            thread.join(10)


def test_a_ca_signed_certificate_is_trusted_through_its_root_by_clients_that_trust_one_certificate():
    """Found in the review of 96ffade: the door's and the gateway's certificate file (tls.crt), which the gateway's
    relays, Prometheus and the benchmark trust alone, held the served certificate. Signed by an operator's CA, it is no
    trust anchor to OpenSSL: every relay's health check failed and the gateway marked every door down. The file now
    holds the chain's root (trust_anchor)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    cert, key, middle, root = company_ca(["127.0.0.1"], now=now)
    found = _tls.plan(None, ["127.0.0.1"], "", given_certificate=cert + middle + root, given_private_key=key, now=now)
    assert _handshake(found["pem"], found["trust_anchor"]) == ""
    assert "certificate verify failed" in _handshake(found["pem"], found["certificate"])
    # A made (self-signed) one: the certificate is its own anchor.
    own = _tls.plan(None, ["127.0.0.1"], "", now=now)
    assert _handshake(own["pem"], own["trust_anchor"]) == ""


@pytest.mark.parametrize("chain, match", [
    (lambda c, m, r: c + m, "the chain ends at 'Company Issuing CA', issued by 'Company Root CA', which it does not "
                            "hold: append the issuing CA's certificates up to its self-signed root"),
    (lambda c, m, r: c, "the chain ends at 'door.company.example', issued by 'Company Issuing CA'"),
    (lambda c, m, r: c + r + m, "'door.company.example' is not issued by the next certificate, 'Company Root CA': "
                                "give the certificate first, then each issuer in order up to the root"),
])
def test_a_chain_that_clients_cannot_follow_to_its_root_is_refused_saying_what_to_add(chain, match):
    cert, key, middle, root = company_ca()
    with pytest.raises(_tls.TlsError, match="the given certificate cannot be used: " + match):
        _tls.plan(None, ["10.0.0.5"], "", given_certificate=chain(cert, middle, root), given_private_key=key, now=NOW)
    assert _tls.given_problem(chain(cert, middle, root), key, now=NOW).startswith("the given certificate cannot be used")


def test_an_issuer_that_is_no_ca_is_refused():
    root, root_key = _issue("Not A CA")
    leaf, leaf_key = _issue("door", root, root_key)
    key = leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode()
    assert "'Not A CA' issues a certificate of the chain but is no CA" in _tls.given_problem(
        _pem(leaf) + _pem(root), key, now=NOW)


def test_given_problem_is_empty_for_a_good_pair_or_none_and_never_repeats_the_key():
    cert, key, middle, root = company_ca()
    assert _tls.given_problem(cert + middle + root, key, now=NOW) == ""
    assert _tls.given_problem("", "", now=NOW) == ""
    assert "give both" in _tls.given_problem(cert, "", now=NOW)
    problem = _tls.given_problem(cert + middle + root, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE "
                                 "KEY-----\n", now=NOW)
    assert problem and "c2VjcmV0" not in problem


def test_a_given_certificate_that_cannot_serve_is_refused_saying_why():
    cert, key = _given(days=1)
    _other_cert, other_key = _given()
    with pytest.raises(_tls.TlsError, match="private key is not the certificate's"):
        _tls.plan(None, ["10.0.0.5"], "", given_certificate=cert, given_private_key=other_key, now=NOW)
    with pytest.raises(_tls.TlsError, match="expires on"):
        _tls.plan(None, ["10.0.0.5"], "", given_certificate=cert, given_private_key=key,
                  now=NOW + datetime.timedelta(days=2))
    with pytest.raises(_tls.TlsError, match="give both"):
        _tls.plan(None, ["10.0.0.5"], "", given_certificate=cert, now=NOW)
    with pytest.raises(_tls.TlsError, match="both a PEM certificate and a PEM private key"):
        _tls.plan(None, ["10.0.0.5"], "", given_certificate=cert, given_private_key="secret", now=NOW)


@pytest.mark.parametrize("names, match", [
    ([], "is empty"), ("10.0.0.5", "give a list"), (["10.0.0.5 x"], "neither an IP address nor a DNS name"),
    (["-bad.example"], "neither"), (["a" * 64 + ".example"], "neither"), ([None], "neither"),
])
def test_names_are_checked(names, match):
    with pytest.raises(_tls.TlsError, match=match):
        _tls.plan(None, names, "", now=NOW)


@pytest.mark.parametrize("valid, renew", [(1, 0), (3651, 30), (30, 30), ("x", 3)])
def test_validity_is_checked(valid, renew):
    with pytest.raises(_tls.TlsError, match="days"):
        _tls.plan(None, ["10.0.0.5"], "", valid_days=valid, renew_before_days=renew, now=NOW)


def test_an_optional_name_no_certificate_can_hold_is_left_out_and_a_good_one_is_added():
    """An ansible_host such as spark_gw (an alias SSH resolves) cannot be a certificate's name: it is left out, where
    a required name would stop the run."""
    found = _tls.plan(None, ["10.0.0.5"], "", optional_names=["spark_gw", "gw.example.net", "10.0.0.5"], now=NOW)
    assert found["names"] == ["10.0.0.5", "gw.example.net"]
    with pytest.raises(_tls.TlsError, match="neither an IP address nor a DNS name"):
        _tls.plan(None, ["10.0.0.5", "spark_gw"], "", now=NOW)


def test_m2_the_operator_is_told_how_to_check_a_made_certificate_and_that_plain_http_is_in_clear():
    """Security review M2: a made certificate's line gives its fingerprint, names and end, and the commands that save it
    from the address clients use and check it; the inventory's is named; plain HTTP says keys cross in clear."""
    door = _tls.plan(None, ["10.0.0.11"], "pair1 door", now=NOW)
    line = _tls.advice(door, "pair1's door", "https://10.0.0.11:8000/v1", "pair1.pem", "gateway_door_tls: false",
                       "gateway_door_tls_certificate")
    assert line.startswith(f"pair1's door: TLS certificate SHA-256 {door['fingerprint_sha256']} (self-signed, for "
                           f"10.0.0.11; until {door['not_after']}): ")
    assert "openssl s_client -connect 10.0.0.11:8000 </dev/null | openssl x509 > pair1.pem" in line
    assert "openssl x509 -in pair1.pem -noout -fingerprint -sha256" in line and "curl --cacert pair1.pem" in line
    given = dict(door, source="given")
    assert _tls.advice(given, "gw", "https://gw:8000/v1", "g.pem", "x", "gateway_tls_certificate") == (
        f"gw: TLS certificate SHA-256 {door['fingerprint_sha256']} (the inventory's gateway_tls_certificate)")
    assert _tls.advice({}, "gateway gw", "http://gw:8000/v1", "g.pem", "gateway_tls: false", "x") == (
        "gateway gw: plain HTTP (gateway_tls: false): client keys and prompts cross the network in clear")
    with pytest.raises(_tls.TlsError, match="no fingerprint"):
        _tls.advice({"pem": "x"}, "gw", "https://gw:8000/v1", "g.pem", "x", "y")
    with pytest.raises(_tls.TlsError, match="not a URL"):
        _tls.advice(door, "gw", "gw:8000", "g.pem", "x", "y")
