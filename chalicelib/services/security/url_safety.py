"""Guard for operator/customer supplied outbound URLs (webhooks, endpoints): SSRF.

``check_url`` validates the URL's shape, resolves the host and, unless private
targets are explicitly allowed, refuses it when *any* resolved address is not
a public unicast address. It returns the resolved addresses so that the
caller connects to exactly those (``post_pinned``), which closes the DNS
rebinding window between the check and the request.

Numeric hosts must be written as a plain dotted-decimal IPv4 address or a
bracketed IPv6 address: decimal (``http://2130706433/``), octal
(``0177.0.0.1``), hex (``0x7f.1``) and shortened (``127.1``) forms are
refused outright, because HTTP clients, proxies and resolvers disagree on what
they mean.

Public API
----------
- ``check_url(url, *, allow_private, resolver=None, label=..., setting=...)``
  -> ``list[str]`` of resolved IPs; raises ``UnsafeURL``
- ``is_public_ip(ip)`` -> bool
- ``describe_ip(ip)`` -> ``None`` if public, else a reason such as
  ``"a loopback address"``
- ``post_pinned(url, ips, data, headers, timeout, ...)`` -> ``requests.Response``
  (connects only to ``ips``; TLS SNI and certificate check use the URL's host;
  no redirects, no proxies from the environment)
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Callable
from urllib.parse import urlsplit

__all__ = [
    "UnsafeURL",
    "check_url",
    "describe_ip",
    "is_public_ip",
    "post_pinned",
]

ALLOWED_SCHEMES = ("http", "https")
DEFAULT_LABEL = "webhook URL"
DEFAULT_SETTING = "WEBHOOKS_ALLOW_PRIVATE_TARGETS"


class UnsafeURL(ValueError):
    """The URL is malformed or points at a target we refuse to contact."""


# --------------------------------------------------------------------------- #
# Address classification
# --------------------------------------------------------------------------- #

_N4 = ipaddress.IPv4Network
_N6 = ipaddress.IPv6Network

_V4_RULES: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_N4("0.0.0.0/8"), "an unspecified ('this network', 0.0.0.0/8) address"),
    (_N4("127.0.0.0/8"), "a loopback address"),
    (_N4("10.0.0.0/8"), "a private (RFC 1918) address"),
    (_N4("172.16.0.0/12"), "a private (RFC 1918) address"),
    (_N4("192.168.0.0/16"), "a private (RFC 1918) address"),
    (_N4("100.64.0.0/10"), "a carrier-grade NAT (RFC 6598, 100.64.0.0/10) address"),
    (_N4("169.254.169.254/32"), "a link-local address (the cloud instance metadata service)"),
    (_N4("169.254.0.0/16"), "a link-local address"),
    (_N4("192.0.0.0/24"), "a reserved (IETF protocol assignments, 192.0.0.0/24) address"),
    (_N4("192.0.2.0/24"), "a reserved (documentation) address"),
    (_N4("198.51.100.0/24"), "a reserved (documentation) address"),
    (_N4("203.0.113.0/24"), "a reserved (documentation) address"),
    (_N4("192.88.99.0/24"), "a reserved (deprecated 6to4 relay anycast) address"),
    (_N4("198.18.0.0/15"), "a reserved (benchmarking) address"),
    (_N4("224.0.0.0/4"), "a multicast address"),
    (_N4("255.255.255.255/32"), "a broadcast address"),
    (_N4("240.0.0.0/4"), "a reserved (240.0.0.0/4) address"),
)

_V6_RULES: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_N6("::/128"), "an unspecified address"),
    (_N6("::1/128"), "a loopback address"),
    (_N6("::/96"), "a reserved (deprecated IPv4-compatible IPv6) address"),
    (_N6("64:ff9b:1::/48"), "a private (local-use NAT64, 64:ff9b:1::/48) address"),
    (_N6("100::/64"), "a reserved (discard-only) address"),
    (_N6("2001:db8::/32"), "a reserved (documentation) address"),
    (_N6("fc00::/7"), "a private (unique local, fc00::/7) address"),
    (_N6("fe80::/10"), "a link-local address"),
    (_N6("fec0::/10"), "a reserved (deprecated site-local) address"),
    (_N6("ff00::/8"), "a multicast address"),
)

_NAT64_WKP = _N6("64:ff9b::/96")


def _parse_ip(ip) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return ip
    text = str(ip).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    # Zone ids ("fe80::1%eth0") only matter for link-local, which we refuse
    # anyway; classify the bare address.
    text = text.split("%", 1)[0]
    return ipaddress.ip_address(text)


def _describe_v4(addr: ipaddress.IPv4Address) -> str | None:
    for net, reason in _V4_RULES:
        if addr in net:
            return reason
    if addr.is_multicast:
        return "a multicast address"
    if not addr.is_global or addr.is_reserved or addr.is_private:
        return "a non-public (special-purpose) address"
    return None


def _describe_embedded(kind: str, addr, v4: ipaddress.IPv4Address) -> str | None:
    inner = _describe_v4(v4)
    if inner is None:
        return None
    return f"{kind} ({addr}) embedding {v4}, {inner}"


def _describe_v6(addr: ipaddress.IPv6Address) -> str | None:
    mapped = addr.ipv4_mapped
    if mapped is not None:
        # A dual-stack socket connecting to ::ffff:a.b.c.d talks IPv4 to a.b.c.d.
        return _describe_embedded("an IPv4-mapped IPv6 address", addr, mapped)
    if addr in _NAT64_WKP:
        v4 = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        return _describe_embedded("a NAT64 address", addr, v4)
    for net, reason in _V6_RULES:
        if addr in net:
            return reason
    sixtofour = addr.sixtofour
    if sixtofour is not None:
        return _describe_embedded("a 6to4 address", addr, sixtofour)
    teredo = addr.teredo
    if teredo is not None:
        server, client = teredo
        return _describe_embedded("a Teredo address", addr, client) or _describe_embedded(
            "a Teredo address", addr, server
        )
    if addr.is_multicast:
        return "a multicast address"
    if not addr.is_global or addr.is_reserved or addr.is_private:
        return "a non-public (special-purpose) address"
    return None


def describe_ip(ip) -> str | None:
    """``None`` if ``ip`` is a public unicast address, else why not, as a noun
    phrase (``"a loopback address"``). Unparsable input is described as such."""
    try:
        addr = _parse_ip(ip)
    except ValueError:
        return "not a valid IP address"
    if isinstance(addr, ipaddress.IPv4Address):
        return _describe_v4(addr)
    return _describe_v6(addr)


def is_public_ip(ip: str) -> bool:
    """True only for a globally routable unicast address.

    False for loopback, private (RFC 1918, fc00::/7), link-local (incl.
    169.254.169.254), multicast, reserved, unspecified, CGNAT 100.64.0.0/10,
    documentation/benchmark ranges, and IPv4-mapped / NAT64 / 6to4 / Teredo
    addresses embedding any of those. False for anything that does not parse.
    """
    return describe_ip(ip) is None


# --------------------------------------------------------------------------- #
# URL checking
# --------------------------------------------------------------------------- #

_FORBIDDEN_URL_CHARS = re.compile(r"[\x00-\x20\x7f\\]")
_HOST_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
# A last label that some parser could read as a number (decimal, octal, hex).
_NUMERICISH = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")

Resolver = Callable[..., list]


def _fail(message: str) -> UnsafeURL:
    return UnsafeURL(message)


def _host_kind(host: str, label: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Return the literal address for an IP host, None for a DNS name; refuse
    anything ambiguous."""
    if ":" in host:  # urlsplit only yields ':' in hostname for [IPv6]
        if "%" in host:
            raise _fail(f"{label} host '[{host}]' has an IPv6 zone id; zone ids are not allowed")
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise _fail(f"{label} host '[{host}]' is not a valid IPv6 address") from None

    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if _NUMERICISH.match(labels[-1]):
        try:
            addr = ipaddress.IPv4Address(name)  # strict: 4 decimal parts, no leading zeros
        except ValueError:
            raise _fail(
                f"{label} host '{host}' looks like a numeric IP address in a non-standard form "
                "(decimal, octal, hex or shortened); write IPv4 addresses as four decimal "
                "numbers without leading zeros, e.g. 203.0.113.7"
            ) from None
        if host.endswith("."):
            raise _fail(f"{label} host '{host}' is an IP address with a trailing dot; remove it")
        return addr

    if len(name) > 253 or not all(_HOST_LABEL.match(part) for part in labels):
        raise _fail(
            f"{label} host '{host}' is not a valid host name (letters, digits, '-', '_' and "
            "dots only, labels of 1-63 characters)"
        )
    return None


def default_resolver() -> Resolver:
    """DNS_RESOLVERS when set (dns_lookup, imported only then: dnspython is not a cold-start
    import), else the system's getaddrinfo."""
    import os

    if os.environ.get("DNS_RESOLVERS", "").strip():
        from chalicelib import dns_lookup

        return dns_lookup.getaddrinfo
    return socket.getaddrinfo


def _resolve(host: str, port: int, resolver: Resolver, label: str) -> list[str]:
    try:
        infos = resolver(host, port, 0, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise _fail(f"{label} host '{host}' could not be resolved ({exc.strerror or exc})") from None
    except (OSError, UnicodeError, ValueError) as exc:
        raise _fail(f"{label} host '{host}' could not be resolved ({exc})") from None
    ips: list[str] = []
    for info in infos or ():
        try:
            family, sockaddr = info[0], info[4]
            raw = sockaddr[0]
        except (IndexError, TypeError):
            continue
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        try:
            addr = _parse_ip(raw)
        except ValueError:
            raise _fail(f"{label} host '{host}' resolved to an unusable address {raw!r}") from None
        text = str(addr)
        if text not in ips:
            ips.append(text)
    if not ips:
        raise _fail(f"{label} host '{host}' did not resolve to any IPv4 or IPv6 address")
    return ips


def check_url(
    url: str,
    *,
    allow_private: bool,
    resolver: Resolver | None = None,
    label: str = DEFAULT_LABEL,
    setting: str = DEFAULT_SETTING,
) -> list[str]:
    """Validate an outbound URL and return the IP addresses its host resolves to.

    Rules: scheme http or https; a host is required; no ``user:pass@``; port
    1-65535; no whitespace, control characters or backslashes; numeric hosts
    only as canonical dotted-decimal IPv4 or bracketed IPv6. Unless
    ``allow_private``, every resolved address must be public (``is_public_ip``)
    and ``localhost`` names are refused.

    ``resolver`` has ``socket.getaddrinfo``'s signature and result shape; it
    is called as ``resolver(host, port, 0, socket.SOCK_STREAM)`` and only for
    DNS names (IP literals are not resolved). ``label`` and ``setting`` only
    shape error messages.

    Returns the de-duplicated addresses in resolver order; connect only to
    these (see ``post_pinned``). Raises ``UnsafeURL`` with an actionable message.
    """
    if resolver is None:
        resolver = default_resolver()
    if not isinstance(url, str):
        raise _fail(f"{label} must be a string")
    if not url:
        raise _fail(f"{label} is empty")
    if len(url) > 2048:
        raise _fail(f"{label} is longer than 2048 characters")
    bad = _FORBIDDEN_URL_CHARS.search(url)
    if bad:
        what = "a backslash" if bad.group() == "\\" else "whitespace or a control character"
        raise _fail(f"{label} contains {what}; percent-encode it or remove it")
    if not url.isascii():
        raise _fail(
            f"{label} contains non-ASCII characters; use the punycode (xn--) form of the "
            "host name and percent-encode the path"
        )

    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _fail(f"{label} is not a valid URL ({exc})") from None

    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        shown = f"'{parts.scheme}'" if parts.scheme else "missing"
        raise _fail(f"{label} scheme {shown} is not allowed; use an http:// or https:// URL")
    if not parts.netloc:
        raise _fail(f"{label} has no host; expected e.g. https://hooks.example.com/path")
    if "@" in parts.netloc:
        raise _fail(
            f"{label} must not contain credentials (user:password@host); send them in a "
            "header instead"
        )
    host = parts.hostname  # lower-cased, brackets removed
    if not host:
        raise _fail(f"{label} has no host; expected e.g. https://hooks.example.com/path")
    if "[" in parts.netloc and ":" not in host:
        raise _fail(f"{label} host '{host}' is bracketed but not an IPv6 address")
    hostport = parts.netloc
    after_host = hostport.partition("]")[2] if hostport.startswith("[") else hostport
    port_text = after_host.partition(":")[2]
    if port_text and not port_text.isdigit():
        raise _fail(f"{label} port '{port_text}' is not a number between 1 and 65535")
    try:
        port = parts.port
    except ValueError:
        raise _fail(f"{label} port is not a number between 1 and 65535") from None
    if port is None:
        port = 443 if scheme == "https" else 80
    elif not 1 <= port <= 65535:
        raise _fail(f"{label} port {port} is not between 1 and 65535")

    literal = _host_kind(host, label)
    if literal is not None:
        ips = [str(literal)]
    else:
        ips = _resolve(host, port, resolver, label)

    if allow_private:
        return ips

    hint = f"set {setting}=true to allow private targets"
    shown_host = f"[{host}]" if literal is not None and literal.version == 6 else host
    for ip in ips:
        reason = describe_ip(ip)
        if reason is None:
            continue
        if literal is not None:
            raise _fail(f"{label} host '{shown_host}' is {reason}; {hint}")
        raise _fail(f"{label} host '{host}' resolves to {ip}, {reason}; {hint}")

    bare = host.rstrip(".")
    if bare == "localhost" or bare.endswith(".localhost"):
        raise _fail(f"{label} host '{host}' is a loopback name; {hint}")
    return ips


# --------------------------------------------------------------------------- #
# Pinned delivery
# --------------------------------------------------------------------------- #


def _pinned_adapter_class():
    from requests.adapters import HTTPAdapter

    class PinnedHostAdapter(HTTPAdapter):
        """Connects to the IP in the request URL but uses ``tls_hostname`` for
        SNI and certificate verification."""

        def __init__(self, tls_hostname: str, **kwargs):
            self._tls_hostname = tls_hostname
            super().__init__(**kwargs)

        def build_connection_pool_key_attributes(self, request, verify, cert=None):
            host_params, pool_kwargs = super().build_connection_pool_key_attributes(
                request, verify, cert
            )
            if host_params.get("scheme") == "https":
                # SNI and certificate verification use the real host name.
                # (Not assert_hostname: urllib3 would then switch off
                # check_hostname on requests' shared default SSL context.)
                pool_kwargs["server_hostname"] = self._tls_hostname
            return host_params, pool_kwargs

    return PinnedHostAdapter


def _is_connect_failure(exc) -> bool:
    """True if the request never reached the server (safe to try the next IP)."""
    import requests
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if not isinstance(exc, requests.exceptions.ConnectionError):
        return False
    seen = set()
    cur = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (NewConnectionError, ConnectTimeoutError)):
            return True
        reason = getattr(cur, "reason", None)
        if reason is None and cur.args and isinstance(cur.args[0], BaseException):
            reason = cur.args[0]
        cur = reason if isinstance(reason, BaseException) else None
    return False


def post_pinned(
    url: str,
    ips: list[str],
    data=None,
    headers: dict | None = None,
    timeout=10,
    *,
    verify=True,
    method: str = "POST",
    session=None,
    stream: bool = False,
):
    """Send ``method url`` connecting only to ``ips`` (from ``check_url``).

    The Host header and, for https, the TLS SNI name and certificate check use
    the URL's host name. Redirects are not followed (a 3xx is returned as is)
    and proxy/netrc settings from the environment are ignored, so neither can
    lead the request somewhere ``check_url`` did not approve. Addresses are
    tried in order, moving on only when the TCP connection itself failed.
    Returns a ``requests.Response``; raises ``requests`` exceptions.

    ``session`` (optional) is a ``requests.Session`` to reuse; its adapter for
    this call's scheme is replaced unless already pinned to the same host name,
    so pass a dedicated one (one per host name keeps connections alive).
    ``stream=True`` leaves the body unread (bound what you read of an
    untrusted response).
    """
    import requests

    if not ips:
        raise ValueError("post_pinned needs at least one IP address from check_url")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES or not parts.hostname:
        raise UnsafeURL("post_pinned needs an http(s) URL checked by check_url")
    host = parts.hostname
    default_port = 443 if scheme == "https" else 80
    port = parts.port or default_port
    is_v6_host = ":" in host
    host_header = f"[{host}]" if is_v6_host else host
    if port != default_port:
        host_header = f"{host_header}:{port}"

    send_headers = {k: v for k, v in (headers or {}).items() if k.lower() != "host"}
    send_headers["Host"] = host_header

    own_session = session is None
    sess = session if session is not None else requests.Session()
    sess.trust_env = False
    # Keep an adapter already pinned to this host name: its pools (keyed by IP and port)
    # then give keep-alive to a caller that reuses the session for the same host.
    current = sess.adapters.get(f"{scheme}://")
    if getattr(current, "_tls_hostname", None) != host:
        sess.mount(f"{scheme}://", _pinned_adapter_class()(tls_hostname=host))
    try:
        last_exc = None
        for ip in ips:
            addr = _parse_ip(ip)
            netloc = f"[{addr}]" if addr.version == 6 else str(addr)
            target = parts._replace(netloc=f"{netloc}:{port}").geturl()
            try:
                return sess.request(
                    method,
                    target,
                    data=data,
                    headers=send_headers,
                    timeout=timeout,
                    verify=verify,
                    allow_redirects=False,
                    stream=stream,
                )
            except requests.exceptions.RequestException as exc:
                if not _is_connect_failure(exc):
                    raise
                last_exc = exc
        assert last_exc is not None
        raise last_exc
    finally:
        if own_session:
            sess.close()
