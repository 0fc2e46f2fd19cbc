# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A TLS identity (certificate and private key, one PEM file as HAProxy reads it): read, judged and made on the
controller with the ``cryptography`` package (a requirement of ansible-core), never on a node.

:func:`plan` is the whole decision of the ``dgxspark.vllm.tls_identity`` action: keep the node's identity when it is
still good for the names asked, else take the inventory's, else make a new self-signed one.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import urllib.parse

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
except ImportError as _exc:  # pragma: no cover - ansible-core requires cryptography
    x509 = None
    CRYPTOGRAPHY_ERROR = str(_exc)
else:
    CRYPTOGRAPHY_ERROR = ""

DNS_NAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----\r?\n?", re.S)


class TlsError(ValueError):
    """A name, certificate or key that cannot be used; the message says why and what to do."""


def _require():
    if x509 is None:
        raise TlsError(f"the Python package cryptography is not importable on the controller ({CRYPTOGRAPHY_ERROR}); "
                       "install the collection's requirements.txt")


def check_names(names, what: str) -> list[str]:
    """The subject alternative names asked (IP addresses and DNS names), normalised, deduplicated, in order."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise TlsError(f"{what} is {names!r}: give a list of IP addresses and DNS names")
    out: list[str] = []
    for name in names:
        text = str(name if name is not None else "").strip()
        try:
            text = str(ipaddress.ip_address(text))
        except ValueError:
            if not DNS_NAME.match(text):
                raise TlsError(f"{what} holds {name!r}, neither an IP address nor a DNS name") from None
            text = text.lower()
        if text not in out:
            out.append(text)
    if not out:
        raise TlsError(f"{what} is empty: a certificate needs at least one name (the address clients use)")
    return out


def _sans(names: list[str]):
    entries = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return entries


def cert_names(cert) -> list[str]:
    """The certificate's subject alternative names, as check_names() writes them."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(v) for v in ext.get_values_for_type(x509.IPAddress)] + \
        [v.lower() for v in ext.get_values_for_type(x509.DNSName)]


def fingerprint(cert) -> str:
    """SHA-256 of the certificate's DER, as ``openssl x509 -fingerprint -sha256`` prints it (AA:BB:...)."""
    return ":".join(f"{b:02X}" for b in cert.fingerprint(hashes.SHA256()))


def _not_after(cert) -> datetime.datetime:
    return cert.not_valid_after_utc


def split_pem(text: str, what: str):
    """(certificate, private key, the certificate's PEM) from one PEM text holding both, in either order."""
    _require()
    if not isinstance(text, str) or not text.strip():
        raise TlsError(f"{what} is empty")
    cert_pem = key_pem = ""
    for match in PEM_BLOCK.finditer(text):
        block, kind = match.group(0), match.group(1)
        if kind == "CERTIFICATE" and not cert_pem:
            cert_pem = block if block.endswith("\n") else block + "\n"
        elif kind.endswith("PRIVATE KEY") and not key_pem:
            key_pem = block
    if not cert_pem or not key_pem:
        raise TlsError(f"{what} does not hold both a PEM certificate and a PEM private key")
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise TlsError(f"{what} cannot be read ({exc}); give an unencrypted PEM certificate and key") from None
    return cert, key, cert_pem


def _public_bytes(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def judge(cert, key, names: list[str] | None, now: datetime.datetime, renew_before_days: int) -> str:
    """Why CERT with KEY cannot serve NAMES (None: any names) until NOW + RENEW_BEFORE_DAYS; '' when it can."""
    if _public_bytes(key) != cert.public_key().public_bytes(serialization.Encoding.DER,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo):
        return "its private key is not the certificate's"
    if cert.not_valid_before_utc > now:
        return f"it is valid only from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    if _not_after(cert) <= now + datetime.timedelta(days=renew_before_days):
        return f"it expires on {_not_after(cert):%Y-%m-%d} (within {renew_before_days} days)"
    if names is not None:
        missing = [n for n in names if n not in cert_names(cert)]
        if missing:
            return f"it does not name {', '.join(missing)}"
    return ""


def _is_self_signed(cert) -> bool:
    if cert.issuer != cert.subject:
        return False
    try:
        cert.verify_directly_issued_by(cert)
    except Exception:  # pylint: disable=broad-except  # InvalidSignature, ValueError, TypeError: not self-signed
        return False
    return True


def certificates(text: str) -> list:
    """The PEM certificates of TEXT, in order (a private key in it is skipped)."""
    out = []
    for match in PEM_BLOCK.finditer(text or ""):
        if match.group(1) == "CERTIFICATE":
            try:
                out.append(x509.load_pem_x509_certificate(match.group(0).encode()))
            except ValueError as exc:
                raise TlsError(f"a certificate of the chain cannot be read ({exc})") from None
    return out


def trust_anchor(chain: list, now: datetime.datetime):
    """The certificate a client must trust to accept CHAIN (the served certificate first, then its issuers): the chain
    itself when it is one self-signed certificate, else its last, self-signed root. Raises TlsError, saying what to
    add, when a certificate is not issued by the next one, an issuer is no CA or has expired, or the chain stops short
    of its root: the gateway's relays (HAProxy), Prometheus and the benchmark trust the anchor alone, and OpenSSL
    accepts no chain that does not end at it."""
    if not chain:
        raise TlsError("it holds no certificate")
    for cert, issuer in zip(chain, chain[1:]):
        try:
            cert.verify_directly_issued_by(issuer)
        except Exception:  # pylint: disable=broad-except  # InvalidSignature, ValueError (names), TypeError (key)
            raise TlsError(f"{_subject(cert)} is not issued by the next certificate, {_subject(issuer)}: give the "
                           "certificate first, then each issuer in order up to the root") from None
    for issuer in chain[1:]:
        try:
            is_ca = issuer.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca:
            raise TlsError(f"{_subject(issuer)} issues a certificate of the chain but is no CA (basicConstraints CA:TRUE)")
        if _not_after(issuer) <= now:
            raise TlsError(f"the chain's {_subject(issuer)} expired on {_not_after(issuer):%Y-%m-%d}")
    root = chain[-1]
    if not _is_self_signed(root):
        raise TlsError(f"the chain ends at {_subject(root)}, issued by {_subject(root, issuer=True)}, which it does not "
                       "hold: append the issuing CA's certificates up to its self-signed root (the gateway's relays, "
                       "Prometheus and the benchmark trust that root alone)")
    return root


def _subject(cert, issuer: bool = False) -> str:
    name = cert.issuer if issuer else cert.subject
    common = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return repr(str(common[0].value) if common else name.rfc4514_string())


def make(names: list[str], common_name: str, now: datetime.datetime, valid_days: int) -> tuple[str, object]:
    """A new P-256 key and a self-signed certificate for NAMES: (the PEM file's text, the certificate)."""
    _require()
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64]),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dgxspark.vllm")])
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.SubjectAlternativeName(_sans(names)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return cert_pem + key_pem, cert


def optional(names) -> list[str]:
    """Those of NAMES that are IP addresses or DNS names (an ansible_host such as ``spark_gw``, which SSH resolves but
    no certificate can name, is left out)."""
    out = []
    for name in names if isinstance(names, (list, tuple)) else []:
        try:
            out += check_names([name], "")
        except TlsError:
            continue
    return out


def _judge_file(text: str, read, names, now, renew_before_days):
    """(why the node's file TEXT, READ by split_pem, cannot serve NAMES: '' when it can; its trust anchor or None)."""
    why = judge(read[0], read[1], names, now, renew_before_days)
    if why:
        return why, None
    try:
        return "", trust_anchor(certificates(text), now)
    except TlsError as exc:
        return f"its chain cannot be trusted: {exc}", None


def given_problem(certificate, private_key, now: datetime.datetime | None = None) -> str:
    """Why an inventory's CERTIFICATE (with its chain) and PRIVATE_KEY cannot be served ('' when they can): what
    plan() would refuse, said before any node is changed. Neither value is repeated."""
    if not certificate and not private_key:
        return ""
    try:
        plan(None, ["localhost"], "", given_certificate=str(certificate or ""), given_private_key=str(private_key or ""),
             now=now)
    except TlsError as exc:
        return str(exc)
    return ""


def plan(current: str | None, names, common_name: str, given_certificate: str = "", given_private_key: str = "",
         valid_days=397, renew_before_days=30, now: datetime.datetime | None = None, optional_names=()) -> dict:
    """What the node's identity file should hold, and why.

    CURRENT is the file's text on the node (None: no file). With GIVEN_CERTIFICATE and GIVEN_PRIVATE_KEY (the
    inventory's), the file holds them (refused when they do not match or have expired; names are the owner's
    business). Else the node's identity is kept while it names every one of NAMES and has more than RENEW_BEFORE_DAYS
    left; otherwise a new self-signed one is made, valid VALID_DAYS.

    OPTIONAL_NAMES are added to NAMES when they are IP addresses or DNS names (:func:`optional`), left out otherwise.

    Returns ``{"pem", "certificate", "trust_anchor", "fingerprint_sha256", "not_after", "names",
    "source": given|kept|made, "reason", "changed"}`` (``changed``: the file's text differs from CURRENT;
    ``trust_anchor``: what clients trust, :func:`trust_anchor`).
    """
    _require()
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if isinstance(names, (list, tuple)):
        names = list(names) + optional(optional_names)
    names = check_names(names, "the certificate's names")
    try:
        valid_days = int(valid_days)
        renew_before_days = int(renew_before_days)
    except (TypeError, ValueError):
        raise TlsError("valid_days and renew_before_days must be whole numbers of days") from None
    if not 2 <= valid_days <= 3650 or not 0 <= renew_before_days < valid_days:
        raise TlsError(f"valid_days is {valid_days} and renew_before_days {renew_before_days}: give 2 to 3650 days of "
                       "validity and a renewal margin shorter than it")
    if bool(given_certificate) != bool(given_private_key):
        raise TlsError("only one of the certificate and its private key is given: give both (the key from a vault), "
                       "or neither for a generated one")
    current_ok = None
    current_why, current_anchor = "", None
    if current:
        try:
            current_ok = split_pem(current, "the node's file")
        except TlsError:
            current_ok = None
        else:
            current_why, current_anchor = _judge_file(current, current_ok, names, now, renew_before_days)
    if given_certificate:
        cert, key, cert_pem = split_pem(given_certificate.strip() + "\n" + given_private_key.strip() + "\n",
                                        "the given certificate and private key")
        why = judge(cert, key, None, now, 0)
        if why:
            raise TlsError(f"the given certificate cannot be used: {why}")
        try:
            anchor = trust_anchor(certificates(given_certificate), now)
        except TlsError as exc:
            raise TlsError(f"the given certificate cannot be used: {exc}") from None
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        # Chain certificates given after the first are kept, in order.
        chain = [m.group(0).rstrip("\n") + "\n" for m in PEM_BLOCK.finditer(given_certificate)
                 if m.group(1) == "CERTIFICATE"][1:]
        pem = cert_pem + "".join(chain) + key_pem
        source, reason = "given", "the inventory's certificate"
    elif current_ok is not None and not current_why:
        cert, _key, cert_pem = current_ok
        anchor = current_anchor
        pem, source, reason = current, "kept", "the node's certificate is still good"
    else:
        if current is None:
            reason = "the node has none"
        elif current_ok is None:
            reason = "the node's file holds no readable certificate and key"
        else:
            reason = "the node's certificate is not good: " + current_why
        pem, cert = make(names, common_name or names[0], now, valid_days)
        cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        anchor = cert
        source = "made"
    return {"pem": pem, "certificate": cert_pem, "trust_anchor": anchor.public_bytes(serialization.Encoding.PEM).decode(),
            "fingerprint_sha256": fingerprint(cert),
            "not_after": _not_after(cert).strftime("%Y-%m-%dT%H:%M:%SZ"), "names": cert_names(cert),
            "source": source, "reason": reason, "changed": pem != (current or "")}


def advice(tls, who: str, url: str, file: str, plain: str, given: str) -> str:
    """What the run tells the operator about WHO's identity at URL: how to save and check a self-signed certificate
    (saved as FILE), that the inventory's certificate is served (the variable GIVEN), or, with no TLS (an empty TLS),
    that it serves plain HTTP (because of PLAIN, the setting that turned it off).

    TLS is what :func:`plan` returned (``fingerprint_sha256``, ``names``, ``not_after`` and ``source`` are read)."""
    if not tls:
        return f"{who}: plain HTTP ({plain}): client keys and prompts cross the network in clear"
    if not isinstance(tls, dict) or not tls.get("fingerprint_sha256"):
        raise TlsError(f"{who}: the TLS identity has no fingerprint (is {type(tls).__name__}): pass tls_identity's "
                       "result")
    said = f"{who}: TLS certificate SHA-256 {tls['fingerprint_sha256']}"
    if tls.get("source") == "given":
        return f"{said} (the inventory's {given})"
    netloc = urllib.parse.urlsplit(str(url)).netloc
    if not netloc:
        raise TlsError(f"{who}: {url!r} is not a URL with a host and port")
    return (f"{said} (self-signed, for {', '.join(tls.get('names') or [])}; until {tls.get('not_after')}): save it "
            f"with `openssl s_client -connect {netloc} </dev/null | openssl x509 > {file}`, check `openssl x509 -in "
            f"{file} -noout -fingerprint -sha256` prints this, then `curl --cacert {file} ...`")
