"""A certificate authority for tests (``cryptography``), and an HTTPS server on loopback that
serves MTA-STS policy files under certificates it issued.

    ca = TestCA(tmp_path)                      # ca.bundle: the PEM to trust (MTA_STS_CA_BUNDLE)
    context = ca.server_context("mx.a.example")  # an ssl server context for these names
    with PolicyServer(ca, {"mta-sts.a.example": policy_text(...)}) as https:
        https.port, https.requests              # Host headers of the requests, in order
"""
from __future__ import annotations

import datetime
import os
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class TestCA:
    __test__ = False  # not a test class

    def __init__(self, folder) -> None:
        self.folder = str(folder)
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA")])
        self.name = name
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(_now() - datetime.timedelta(days=1))
                     .not_valid_after(_now() + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(
                         digital_signature=True, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(
                         self.key.public_key()), critical=False)
                     .sign(self.key, hashes.SHA256()))
        self.bundle = os.path.join(self.folder, "test-ca.pem")
        with open(self.bundle, "wb") as fh:
            fh.write(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, *names: str) -> tuple[str, str]:
        """A certificate for ``names`` (DNS names), signed by this CA: (cert path, key path)."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(_now() - datetime.timedelta(days=1))
                .not_valid_after(_now() + datetime.timedelta(days=30))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                               critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                               critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self.key.public_key()), critical=False)
                .sign(self.key, hashes.SHA256()))
        stem = os.path.join(self.folder, names[0].replace("*", "star"))
        with open(stem + ".crt", "wb") as fh:
            fh.write(cert.public_bytes(serialization.Encoding.PEM))
        with open(stem + ".key", "wb") as fh:
            fh.write(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
        return stem + ".crt", stem + ".key"

    def server_context(self, *names: str) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self.issue(*names))
        return context


def policy_text(mode: str, *mx: str, max_age: int = 86400) -> str:
    lines = ["version: STSv1", f"mode: {mode}", *(f"mx: {m}" for m in mx), f"max_age: {max_age}"]
    return "\r\n".join(lines) + "\r\n"


class PolicyServer:
    """HTTPS on 127.0.0.1 answering GET /.well-known/mta-sts.txt per Host header from
    ``policies`` ({host: text}; a host not there: 404), with a certificate from ``ca`` for
    whichever name the client asks for (SNI). ``policies`` may change while it serves;
    ``requests`` lists each request's host."""

    def __init__(self, ca: TestCA, policies: dict[str, str], content_type: str = "text/plain"):
        self.policies = policies
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                host = (self.headers.get("Host") or "").rpartition(":")[0] or self.headers["Host"]
                server.requests.append(host)
                body = server.policies.get(host)
                if body is None or self.path != "/.well-known/mta-sts.txt":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        contexts: dict[str, ssl.SSLContext] = {}

        def by_name(sslobj, name, _context):
            if name and name not in contexts:
                contexts[name] = ca.server_context(name)
            if name:
                sslobj.context = contexts[name]

        context = ca.server_context("policy-server.invalid")
        context.sni_callback = by_name
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "PolicyServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
