import datetime
import http.server
import ipaddress
import socket
import ssl
import threading

import pytest

from chalicelib.services.security.url_safety import (
    UnsafeURL,
    check_url,
    describe_ip,
    is_public_ip,
    post_pinned,
)

# --------------------------------------------------------------------------- #
# Fake resolver (no network)
# --------------------------------------------------------------------------- #

DNS = {
    "hooks.example.com": ["93.184.215.14"],
    "dual.example.com": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
    "localhost": ["127.0.0.1", "::1"],
    "internal.corp": ["10.1.2.3"],
    "metadata.google.internal": ["169.254.169.254"],
    "rebind.example.com": ["93.184.215.14", "192.168.1.10"],  # one bad address is enough
    "mapped.example.com": ["::ffff:127.0.0.1"],
    "cgnat.example.com": ["100.64.0.1"],
    "ula.example.com": ["fd12:3456:789a::1"],
    "v6.example.com": ["2606:4700:4700::1111"],
    "sneaky.localhost": ["93.184.215.14"],
    "dup.example.com": ["93.184.215.14", "93.184.215.14"],
}


class FakeResolver:
    def __init__(self, table=DNS):
        self.table = table
        self.calls = []

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        self.calls.append((host, port))
        try:
            addrs = self.table[host.rstrip(".")]
        except KeyError:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None
        out = []
        for a in addrs:
            if ":" in a:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port, 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)))
        return out


@pytest.fixture
def resolver():
    return FakeResolver()


def refused(url, resolver, **kw):
    with pytest.raises(UnsafeURL) as info:
        check_url(url, allow_private=False, resolver=resolver, **kw)
    return str(info.value)


# --------------------------------------------------------------------------- #
# Accepted
# --------------------------------------------------------------------------- #


def test_public_name_accepted_and_ips_returned(resolver):
    assert check_url("https://hooks.example.com/x?y=1", allow_private=False, resolver=resolver) == [
        "93.184.215.14"
    ]
    assert resolver.calls == [("hooks.example.com", 443)]


def test_port_passed_to_resolver_and_defaults(resolver):
    check_url("http://hooks.example.com/", allow_private=False, resolver=resolver)
    check_url("http://hooks.example.com:8443/", allow_private=False, resolver=resolver)
    check_url("http://hooks.example.com:/", allow_private=False, resolver=resolver)
    assert [c[1] for c in resolver.calls] == [80, 8443, 80]


def test_dual_stack_and_dedup(resolver):
    assert check_url("https://dual.example.com", allow_private=False, resolver=resolver) == [
        "93.184.215.14",
        "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
    ]
    assert check_url("https://dup.example.com", allow_private=False, resolver=resolver) == [
        "93.184.215.14"
    ]
    assert check_url("https://v6.example.com", allow_private=False, resolver=resolver) == [
        "2606:4700:4700::1111"
    ]


def test_public_literals_accepted_without_resolving(resolver):
    assert check_url("https://8.8.8.8/hook", allow_private=False, resolver=resolver) == ["8.8.8.8"]
    assert check_url("https://[2606:4700::1111]:8443/", allow_private=False, resolver=resolver) == [
        "2606:4700::1111"
    ]
    assert resolver.calls == []


def test_scheme_and_host_case_insensitive(resolver):
    assert check_url("HTTPS://Hooks.Example.COM/", allow_private=False, resolver=resolver)
    assert resolver.calls[-1][0] == "hooks.example.com"


def test_trailing_dot_name(resolver):
    assert check_url("https://hooks.example.com./", allow_private=False, resolver=resolver)


# --------------------------------------------------------------------------- #
# Shape of the URL
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/file",
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_INFO",
        "dict://hooks.example.com:11211/",
        "javascript:alert(1)",
        "hooks.example.com/path",
        "//hooks.example.com/path",
        "ws://hooks.example.com/",
    ],
)
def test_other_schemes_refused(url, resolver):
    msg = refused(url, resolver)
    assert "scheme" in msg and "http" in msg
    assert resolver.calls == []


@pytest.mark.parametrize(
    "url",
    [
        "http://user:pass@hooks.example.com/",
        "http://user@hooks.example.com/",
        "http://:pass@hooks.example.com/",
        "http://hooks.example.com@127.0.0.1/",
        "http://a@b@hooks.example.com/",
    ],
)
def test_userinfo_refused(url, resolver):
    assert "credentials" in refused(url, resolver)
    # refused even when private targets are allowed
    with pytest.raises(UnsafeURL):
        check_url(url, allow_private=True, resolver=resolver)


@pytest.mark.parametrize("url", ["http://", "http:///path", "https://:443/", "http://?x", "http://#f"])
def test_host_required(url, resolver):
    assert "host" in refused(url, resolver)


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com:0/",
        "http://hooks.example.com:65536/",
        "http://hooks.example.com:99999999/",
        "http://hooks.example.com:-1/",
        "http://hooks.example.com:+80/",
        "http://hooks.example.com:8o/",
        "http://[2606:4700::1111]:0/",
    ],
)
def test_bad_ports_refused(url, resolver):
    assert "port" in refused(url, resolver)


def test_port_limits_accepted(resolver):
    check_url("http://hooks.example.com:1/", allow_private=False, resolver=resolver)
    check_url("http://hooks.example.com:65535/", allow_private=False, resolver=resolver)


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com\\@127.0.0.1/",
        "http://127.0.0.1\\.hooks.example.com/",
        "http://hooks.example.com /",
        " http://hooks.example.com/",
        "http://hooks.example.com/\r\nX: y",
        "http://hooks.exa\tmple.com/",
        "http://hooks.example.com\x00.evil/",
        "http://bücher.example/",
        "http://hooks.example.com/\u202e",
        "http://exa_mple..com/",
        "http://-/",
        "http://a%2e127.0.0.1/",
        "http://" + "a" * 64 + ".com/",
        "http://[127.0.0.1]/",
        "http://[::1/",
        "http://[fe80::1%25eth0]/",
        "",
    ],
)
def test_malformed_urls_refused(url, resolver):
    refused(url, resolver)
    with pytest.raises(UnsafeURL):
        check_url(url, allow_private=True, resolver=resolver)


def test_non_string_refused(resolver):
    with pytest.raises(UnsafeURL):
        check_url(b"http://hooks.example.com/", allow_private=False, resolver=resolver)


# --------------------------------------------------------------------------- #
# Private / special targets
# --------------------------------------------------------------------------- #


def test_localhost_message_is_actionable(resolver):
    msg = refused("http://localhost:8080/hook", resolver)
    assert msg == (
        "webhook URL host 'localhost' resolves to 127.0.0.1, a loopback address; "
        "set WEBHOOKS_ALLOW_PRIVATE_TARGETS=true to allow private targets"
    )


def test_label_and_setting_customise_message(resolver):
    msg = refused("http://internal.corp/", resolver, label="endpoint URL", setting="ALLOW_PRIVATE")
    assert msg.startswith("endpoint URL host 'internal.corp' resolves to 10.1.2.3, a private")
    assert msg.endswith("set ALLOW_PRIVATE=true to allow private targets")


@pytest.mark.parametrize(
    "host, reason",
    [
        ("internal.corp", "private (RFC 1918)"),
        ("metadata.google.internal", "metadata"),
        ("rebind.example.com", "192.168.1.10"),
        ("mapped.example.com", "IPv4-mapped"),
        ("cgnat.example.com", "carrier-grade NAT"),
        ("ula.example.com", "unique local"),
        ("localhost.", "loopback"),
        ("sneaky.localhost", "loopback name"),
    ],
)
def test_names_resolving_to_private_addresses_refused(host, reason, resolver):
    msg = refused(f"https://{host}/hook", resolver)
    assert reason in msg
    assert "WEBHOOKS_ALLOW_PRIVATE_TARGETS=true" in msg


@pytest.mark.parametrize(
    "literal, reason",
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.0.0.1", "RFC 1918"),
        ("172.16.0.1", "RFC 1918"),
        ("172.31.255.255", "RFC 1918"),
        ("192.168.0.1", "RFC 1918"),
        ("169.254.169.254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.255", "carrier-grade NAT"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("192.0.2.1", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("192.0.0.8", "reserved"),
        ("[::1]", "loopback"),
        ("[::]", "unspecified"),
        ("[fe80::1]", "link-local"),
        ("[febf::1]", "link-local"),
        ("[fc00::1]", "unique local"),
        ("[fdff:ffff::1]", "unique local"),
        ("[ff02::1]", "multicast"),
        ("[fec0::1]", "site-local"),
        ("[2001:db8::1]", "documentation"),
        ("[::ffff:127.0.0.1]", "IPv4-mapped"),
        ("[::ffff:7f00:1]", "IPv4-mapped"),
        ("[::ffff:10.0.0.1]", "RFC 1918"),
        ("[::ffff:169.254.169.254]", "metadata"),
        ("[::ffff:0.0.0.0]", "unspecified"),
        ("[::127.0.0.1]", "IPv4-compatible"),
        ("[64:ff9b::7f00:1]", "NAT64"),
        ("[64:ff9b::a9fe:a9fe]", "metadata"),
        ("[64:ff9b:1::1]", "local-use NAT64"),
        ("[2002:7f00:1::1]", "6to4"),
        ("[2002:c0a8:101::1]", "192.168.1.1"),
        ("[2001:0:4136:e378:8000:63bf:80ff:fffe]", "Teredo"),  # client 127.0.0.1
        ("[2001:0:a00:1::1]", "Teredo"),  # server 10.0.0.1
        ("[100::1]", "discard"),
    ],
)
def test_private_literals_refused(literal, reason, resolver):
    msg = refused(f"http://{literal}/", resolver)
    assert reason in msg, msg
    assert f"host '{literal}' is " in msg
    assert resolver.calls == []


@pytest.mark.parametrize(
    "host",
    [
        "2130706433",  # decimal 127.0.0.1
        "017700000001",  # octal 127.0.0.1
        "0x7f000001",  # hex
        "0x7f.0.0.1",
        "0x7F.1",
        "0177.0.0.1",
        "0177.0.0.01",
        "127.1",
        "127.0.1",
        "10.1",
        "012.0.0.1",  # octal 10.0.0.1, or decimal 12.0.0.1 depending on the parser
        "08.8.8.8",
        "3232235777",  # 192.168.1.1
        "0",
        "0x",
        "1.2.3.4.5",
        "256.0.0.1",
        "127.0.0.1.",
        "hooks.example.123",
    ],
)
def test_odd_numeric_forms_refused(host, resolver):
    msg = refused(f"http://{host}/", resolver)
    assert "numeric" in msg or "trailing dot" in msg
    assert resolver.calls == []  # never handed to a resolver that could normalise them
    with pytest.raises(UnsafeURL):
        check_url(f"http://{host}/", allow_private=True, resolver=resolver)


def test_odd_numeric_forms_refused_with_real_getaddrinfo():
    # No network needed: numeric hosts never reach DNS.
    for host in ("2130706433", "0177.0.0.1", "0x7f.0.0.1", "127.1"):
        with pytest.raises(UnsafeURL):
            check_url(f"http://{host}/", allow_private=False)


def test_real_getaddrinfo_normalises_loopback_literal():
    assert check_url("http://127.0.0.1:9/", allow_private=True) == ["127.0.0.1"]


def test_unresolvable_host(resolver):
    msg = refused("https://nope.example.com/", resolver)
    assert "could not be resolved" in msg


def test_resolver_returning_nothing(resolver):
    with pytest.raises(UnsafeURL, match="did not resolve"):
        check_url("https://x.example.com/", allow_private=False, resolver=lambda *a, **k: [])


def test_resolver_errors_become_unsafeurl():
    def boom(*a, **k):
        raise UnicodeError("label too long")

    with pytest.raises(UnsafeURL, match="could not be resolved"):
        check_url("https://x.example.com/", allow_private=False, resolver=boom)


# --------------------------------------------------------------------------- #
# allow_private
# --------------------------------------------------------------------------- #


def test_allow_private_accepts_loopback_and_private(resolver):
    assert check_url("http://localhost:8080/", allow_private=True, resolver=resolver) == [
        "127.0.0.1",
        "::1",
    ]
    assert check_url("http://127.0.0.1/", allow_private=True, resolver=resolver) == ["127.0.0.1"]
    assert check_url("http://[::1]:8000/", allow_private=True, resolver=resolver) == ["::1"]
    assert check_url("http://169.254.169.254/", allow_private=True, resolver=resolver)
    assert check_url("http://internal.corp/", allow_private=True, resolver=resolver) == ["10.1.2.3"]


def test_allow_private_still_checks_scheme(resolver):
    with pytest.raises(UnsafeURL, match="scheme"):
        check_url("file:///etc/passwd", allow_private=True, resolver=resolver)
    with pytest.raises(UnsafeURL, match="could not be resolved"):
        check_url("http://nope.example.com/", allow_private=True, resolver=resolver)


# --------------------------------------------------------------------------- #
# is_public_ip / describe_ip
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "ip",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.215.14",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.169.0.1",
        "223.255.255.254",
        "2606:4700:4700::1111",
        "2a00:1450:4001:80b::200e",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ],
)
def test_public_ips(ip):
    assert is_public_ip(ip), describe_ip(ip)
    assert describe_ip(ip) is None


@pytest.mark.parametrize(
    "ip",
    [
        "127.0.0.1",
        "10.255.255.255",
        "172.16.5.4",
        "192.168.255.255",
        "169.254.169.254",
        "100.64.0.0",
        "0.0.0.0",
        "224.0.0.251",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fe80::1%eth0",
        "fc00::",
        "fd00::1",
        "ff0e::1",
        "::ffff:127.0.0.1",
        "::ffff:192.168.0.1",
        "::ffff:100.64.0.1",
        "2002:a00:1::",
        "[::1]",
        "not an ip",
        "",
        "2130706433",
        "0177.0.0.1",
    ],
)
def test_non_public_ips(ip):
    assert not is_public_ip(ip)
    assert describe_ip(ip)


def test_is_public_ip_accepts_ipaddress_objects():
    assert is_public_ip(ipaddress.ip_address("8.8.8.8"))
    assert not is_public_ip(ipaddress.ip_address("127.0.0.1"))


# --------------------------------------------------------------------------- #
# post_pinned
# --------------------------------------------------------------------------- #


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        type(self).seen.append((self.path, self.headers.get("Host"), dict(self.headers), body))
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


@pytest.fixture
def http_server():
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_post_pinned_connects_to_ip_with_original_host_header(http_server, monkeypatch):
    # Proxies from the environment must not be used.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    port = http_server.server_address[1]
    url = f"http://hooks.example.com:{port}/hook?a=1"
    resp = post_pinned(
        url, ["127.0.0.1"], data=b'{"x":1}', headers={"Content-Type": "application/json",
                                                     "Host": "evil.example"}, timeout=5
    )
    assert resp.status_code == 200 and resp.content == b"ok"
    path, host, headers, body = _Recorder.seen[-1]
    assert path == "/hook?a=1"
    assert host == f"hooks.example.com:{port}"
    assert headers["Content-Type"] == "application/json"
    assert body == b'{"x":1}'


def test_post_pinned_does_not_follow_redirects(http_server):
    port = http_server.server_address[1]
    resp = post_pinned(f"http://hooks.example.com:{port}/redirect", ["127.0.0.1"], data=b"x", timeout=5)
    assert resp.status_code == 302
    assert len(_Recorder.seen) == 1


def test_post_pinned_connect_error_surfaces():
    import requests

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    dead_port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    with pytest.raises(requests.exceptions.ConnectionError):
        post_pinned(f"http://hooks.example.com:{dead_port}/", ["127.0.0.1"], data=b"x", timeout=5)


def test_post_pinned_falls_back_to_second_address(http_server):
    port = http_server.server_address[1]
    # 127.0.0.2 is loopback on Linux but the server listens on 127.0.0.1 only.
    try:
        s = socket.create_connection(("127.0.0.2", port), timeout=2)
    except OSError:
        pass
    else:
        s.close()
        pytest.skip("127.0.0.2 reaches the test server on this platform")
    resp = post_pinned(f"http://hooks.example.com:{port}/hook", ["127.0.0.2", "127.0.0.1"],
                       data=b"x", timeout=5)
    assert resp.status_code == 200
    assert len(_Recorder.seen) == 1


def test_post_pinned_requires_ips():
    with pytest.raises(ValueError):
        post_pinned("http://hooks.example.com/", [], data=b"x")


# --- TLS: SNI and certificate verification use the URL host, not the IP ---- #


def _make_ca_and_cert(tmp_path, dns_name):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns_name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = tmp_path / "ca.pem"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path = tmp_path / "cert.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = tmp_path / "key.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(ca_path), str(cert_path), str(key_path)


@pytest.fixture
def https_server(tmp_path):
    ca_path, cert_path, key_path = _make_ca_and_cert(tmp_path, "hooks.example.test")
    _Recorder.seen = []
    sni_seen = []
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_path, key_path)
    ctx.sni_callback = lambda sock, name, c: sni_seen.append(name)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, ca_path, sni_seen
    server.shutdown()
    server.server_close()


def test_post_pinned_https_uses_hostname_for_sni_and_verification(https_server):
    server, ca_path, sni_seen = https_server
    port = server.server_address[1]
    resp = post_pinned(
        f"https://hooks.example.test:{port}/hook", ["127.0.0.1"], data=b"tls", timeout=5,
        verify=ca_path,
    )
    assert resp.status_code == 200
    assert sni_seen[-1] == "hooks.example.test"
    assert _Recorder.seen[-1][1] == f"hooks.example.test:{port}"


def test_post_pinned_https_rejects_certificate_for_other_name(https_server):
    import requests

    server, ca_path, _ = https_server
    port = server.server_address[1]
    with pytest.raises(requests.exceptions.SSLError):
        post_pinned(
            f"https://other.example.test:{port}/hook", ["127.0.0.1"], data=b"tls", timeout=5,
            verify=ca_path,
        )
    assert _Recorder.seen == []


def test_post_pinned_https_default_verification_rejects_unknown_ca(https_server):
    import requests

    server, _, _ = https_server
    port = server.server_address[1]
    with pytest.raises(requests.exceptions.SSLError):
        post_pinned(f"https://hooks.example.test:{port}/hook", ["127.0.0.1"], data=b"x", timeout=5)
