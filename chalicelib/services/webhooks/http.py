"""The webhook POST itself: the standard library's ``http.client`` connections pinned to the
addresses ``url_safety.check_url`` approved, kept alive per process and (scheme, address,
port, host name), shared by every thread that posts (``concurrency.py``'s and the worker
threads), up to ``pool_size()`` idle connections per receiver between deliveries.

SSRF: a connection only ever dials the one address in its key, and a POST picks its
connections by an address that ``check_url`` approved for this very attempt, so every
connection, new or reused, is to an address checked under the current settings (a receiver
whose name now resolves elsewhere gets other connections; a private address is refused
before any connection is used).

This is ``url_safety.post_pinned``'s contract without requests' session layer, nor urllib3's
pool (together four to five times the CPU of the request they wrap; urllib3's pool alone
also writes the headers and the body in two sends, two TCP segments): connect only to
``ips``, in order, moving on only when the TCP connection itself failed; the Host header,
and for https the SNI name and the certificate check (the standard library's default TLS
context: certificate and host name required, TLS 1.2 at least, against certifi's CAs, as
requests checks them), use the URL's host name; no redirects followed, no retries, no
proxies and no netrc from the environment; the connect and every read and write bounded by
the timeout; the response body read by the caller, bounded (``read_bounded``). A kept
connection that the receiver closed (or that has anything unasked to read) is dropped
before use, never written to. The request target is percent-encoded as urllib3 encodes it.
"""
from __future__ import annotations

import functools
import http.client
import re
import select
import threading
from collections import OrderedDict
from urllib.parse import quote, urlsplit

MAX_POOLS = 256  # receivers (scheme, address, port, host name) kept; least recently used go

_pools: OrderedDict = OrderedDict()
_pools_lock = threading.Lock()


def pool_size() -> int:
    """Keep-alive connections kept per receiver: the most POSTs this process can have in
    flight at once (the pool of WEBHOOKS_CONCURRENCY threads, plus a worker thread each for a
    lone wake-up or with the setting at 1)."""
    from chalicelib.config import get_settings

    settings = get_settings()
    return settings.webhooks_concurrency + settings.worker_threads


class Failed(Exception):
    """The request got no answer: ``timeout`` tells a timeout from any other failure."""

    def __init__(self, message: str, timeout: bool):
        super().__init__(message)
        self.timeout = timeout


def ca_bundle() -> str:
    import certifi  # what requests verifies against

    return certifi.where()


class Response:
    """A POST's answer, its body unread: ``status``; read it with ``read_bounded``, which
    gives the connection back for the next POST (or closes it)."""

    __slots__ = ("status", "_raw", "_conn", "_pool")

    def __init__(self, raw: http.client.HTTPResponse, conn, pool: "_Receiver"):
        self.status = raw.status
        self._raw, self._conn, self._pool = raw, conn, pool


def post(url: str, ips: list[str], body: bytes, headers: dict[str, str],
         timeout: float) -> Response:
    """POST ``body`` to ``url`` connecting only to ``ips``; returns the answer unread (read
    it with ``read_bounded``). Raises ``Failed``."""
    scheme, host, port, host_header, target = _parts(url)
    send = {k: v for k, v in headers.items() if k.lower() != "host"}
    send["Host"] = host_header
    last: OSError | None = None
    last_ip = ""
    for ip in ips:
        pool = _pool(scheme, ip, port, host)
        conn = pool.take(timeout)
        if conn.sock is None:
            try:
                conn.connect_tcp()
            except OSError as exc:
                last, last_ip = exc, ip  # never reached the server: the next may answer
                continue
            try:
                conn.start_tls()
            except OSError as exc:
                conn.close()
                raise _failed(exc) from None
        try:
            # One send for the request line, the headers and the body (a bytes body).
            conn.request("POST", target, body=body, headers=send)
            return Response(conn.getresponse(), conn, pool)
        except (http.client.HTTPException, OSError) as exc:
            conn.close()
            raise _failed(exc) from None
    assert last is not None
    where = f"a new connection to {last_ip} port {port}"
    if isinstance(last, TimeoutError):
        raise Failed(f"{where} timed out ({last})", timeout=True)
    raise Failed(f"{type(last).__name__}: failed to establish {where}: {last}", timeout=False)


def _failed(exc: Exception) -> Failed:
    if isinstance(exc, TimeoutError):
        return Failed(f"timed out ({exc})", timeout=True)
    return Failed(f"{type(exc).__name__}: {exc}", timeout=False)


def read_bounded(response: Response, keep: int, drain: int, deadline: float) -> bytes:
    """The first ``keep`` bytes of the body. The rest is read and dropped so the connection
    can serve the next POST, up to ``drain`` bytes and ``deadline`` (perf_counter); past
    either, or on a read error, the connection is closed instead."""
    import time

    raw = response._raw
    kept = bytearray()
    read = 0
    finished = False
    try:
        while read <= drain and time.perf_counter() <= deadline:
            chunk = raw.read(16 * 1024)
            if not chunk:
                finished = True
                break
            if len(kept) < keep:
                kept += chunk[:keep - len(kept)]
            read += len(chunk)
            if raw.length == 0:  # all of a Content-Length body: no empty read
                finished = True
                break
    except (http.client.HTTPException, OSError):
        pass  # the status is known; a body cut short is still an answer
    if finished and not raw.will_close:
        raw.close()
        response._pool.give_back(response._conn)
    else:
        # Unread bytes must not reach the next request on this connection (or the receiver
        # closes it after this answer).
        raw.close()
        response._conn.close()
    return bytes(kept)


class _Pinned(http.client.HTTPConnection):
    """A connection that dials only its address; for https, TLS with the URL's host name
    for SNI and the certificate check."""

    def __init__(self, ip: str, port: int, timeout: float, host: str, tls):
        super().__init__(ip, port, timeout=timeout)
        self._server_hostname = host
        self._tls = tls  # an ssl.SSLContext for https, else None

    def connect_tcp(self) -> None:
        http.client.HTTPConnection.connect(self)  # (TCP_NODELAY, the timeout)

    def start_tls(self) -> None:
        if self._tls is not None:
            self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._server_hostname)

    def connect(self) -> None:  # (http.client's own reconnect, after the receiver closed)
        self.connect_tcp()
        self.start_tls()


class _Receiver:
    """One receiver's idle keep-alive connections, most recently used last."""

    def __init__(self, ip: str, port: int, host: str, tls, size: int):
        self.ip, self.port, self.host, self.tls, self.size = ip, port, host, tls, size
        self.idle: list[_Pinned] = []
        self.closed = False
        self.lock = threading.Lock()

    def take(self, timeout: float) -> _Pinned:
        """An idle connection still open, or a new one (not connected yet)."""
        while True:
            with self.lock:
                conn = self.idle.pop() if self.idle else None
            if conn is None:
                return _Pinned(self.ip, self.port, timeout, self.host, self.tls)
            if not _dropped(conn.sock):
                conn.timeout = timeout
                conn.sock.settimeout(timeout)
                return conn
            conn.close()

    def give_back(self, conn: _Pinned) -> None:
        with self.lock:
            if not self.closed and len(self.idle) < self.size:
                self.idle.append(conn)
                return
        conn.close()  # past the size (block=False semantics) or the receiver was dropped

    def close(self) -> None:
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()


def _dropped(sock) -> bool:
    """Whether a kept connection is unusable: closed, or readable (the receiver closed it,
    or sent something nobody asked for) while idle."""
    if sock is None:
        return True
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _pool(scheme: str, ip: str, port: int, host: str) -> _Receiver:
    key = (scheme, ip, port, host)
    with _pools_lock:
        pool = _pools.pop(key, None)
        if pool is None:
            pool = _new_pool(scheme, ip, port, host)
            if len(_pools) >= MAX_POOLS:
                # A POST still using it finishes; its connection is closed when given back.
                _pools.popitem(last=False)[1].close()
        _pools[key] = pool  # most recently used last
        return pool


def _new_pool(scheme: str, ip: str, port: int, host: str) -> _Receiver:
    # Past pool_size() idle connections, a POST opens one more connection rather than
    # waiting, and it is closed after use (the bound on POSTs in flight is concurrency.py's).
    tls = _tls_context(ca_bundle()) if scheme == "https" else None
    return _Receiver(ip.strip("[]"), port, host, tls, pool_size())


@functools.lru_cache(maxsize=4)
def _tls_context(bundle: str):
    import ssl

    context = ssl.create_default_context(cafile=bundle)  # CERT_REQUIRED, host names checked
    context.set_alpn_protocols(["http/1.1"])
    return context


# The characters urllib3 leaves as they are in a request target (RFC 3986 pchar; the query
# also "?"); every other byte is percent-encoded, and an existing %XX is kept (upper-cased)
# unless some "%" in the component starts no such escape (then every "%" is encoded).
_SUB_DELIMS_AND_UNRESERVED = "-._~!$&'()*+,;="
_PATH_SAFE = _SUB_DELIMS_AND_UNRESERVED + ":@/"
_QUERY_SAFE = _PATH_SAFE + "?"
_ESCAPE = re.compile(r"%[a-fA-F0-9]{2}")


def _encoded(component: str, safe: str) -> str:
    component, escapes = _ESCAPE.subn(lambda m: m.group(0).upper(), component)
    if escapes == component.count("%"):
        safe += "%"
    return quote(component, safe=safe)


@functools.lru_cache(maxsize=1024)
def _parts(url: str) -> tuple[str, str, int, str, str]:
    """(scheme, host, port, Host header, request target) of a webhook URL (a receiver's
    URL is posted to again and again: parsed once)."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname
    assert host is not None  # (check_url refuses a URL without one)
    default_port = 443 if scheme == "https" else 80
    port = parts.port or default_port
    host_header = f"[{host}]" if ":" in host else host
    if port != default_port:
        host_header = f"{host_header}:{port}"
    target = _encoded(parts.path or "/", _PATH_SAFE)
    if parts.query:
        target = f"{target}?{_encoded(parts.query, _QUERY_SAFE)}"
    return scheme, host, port, host_header, target


def close_all() -> None:
    """Close every kept connection (tests; a process about to stop)."""
    with _pools_lock:
        while _pools:
            _pools.popitem()[1].close()
