"""The gateway's TLS: the operator's certificate, or a self-signed one generated for local use."""
from __future__ import annotations

import datetime
import ipaddress
import os
import ssl

from chalicelib.config import Settings


def cert_paths(settings: Settings) -> tuple[str, str]:
    """(certificate, key) paths: configured, or beside SIGNING_KEY_PATH for a generated pair."""
    if settings.smtp_tls_cert_path:
        return settings.smtp_tls_cert_path, settings.smtp_tls_key_path or settings.smtp_tls_cert_path
    base = os.path.dirname(os.path.abspath(settings.signing_key_path))
    return os.path.join(base, "smtp_tls_cert.pem"), os.path.join(base, "smtp_tls_key.pem")


def generate_self_signed(cert_path: str, key_path: str, hostname: str) -> None:
    """An RSA-2048 self-signed certificate for ``hostname`` (and 127.0.0.1), valid 10 years.
    Written to temporary names then renamed, so a concurrent start never reads half a file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(hostname), x509.DNSName("localhost"),
                 x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    os.makedirs(os.path.dirname(os.path.abspath(cert_path)) or ".", exist_ok=True)
    suffix = f".{os.getpid()}.tmp"
    with open(key_path + suffix, "wb") as fh:
        os.chmod(key_path + suffix, 0o600)
        fh.write(key.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.TraditionalOpenSSL,
                                   serialization.NoEncryption()))
    with open(cert_path + suffix, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    os.replace(key_path + suffix, key_path)
    os.replace(cert_path + suffix, cert_path)


def server_context(settings: Settings) -> ssl.SSLContext:
    """The server-side context shared by STARTTLS and implicit-TLS listeners."""
    cert_path, key_path = cert_paths(settings)
    if not settings.smtp_tls_cert_path and not (os.path.exists(cert_path)
                                                and os.path.exists(key_path)):
        generate_self_signed(cert_path, key_path, settings.smtp_hostname)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    return context
