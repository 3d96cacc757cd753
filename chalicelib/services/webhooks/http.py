"""The webhook POST itself: urllib3 connection pools pinned to the addresses
``url_safety.check_url`` approved, one per process and (scheme, address, port, host name),
shared by every thread that posts (``concurrency.py``'s and the worker threads), each holding
up to ``pool_size()`` keep-alive connections to its receiver between deliveries.

SSRF: a pool only ever dials the one address in its key, and a POST picks its pool by an
address that ``check_url`` approved for this very attempt, so every connection, new or
reused, is to an address checked under the current settings (a receiver whose name now
resolves elsewhere gets another pool; a private address is refused before any pool is used).

This is ``url_safety.post_pinned``'s contract without requests' session layer, which cost
four to five times the CPU of the request it wraps (~0.5 ms against ~0.1 ms a POST to a
loopback receiver, measured; ~15% of a worker's CPU per message): connect only to ``ips``,
in order, moving on only when the TCP connection itself failed; the Host header, and for
https the SNI name and the certificate check (against certifi's CAs, as requests checks
them), use the URL's host name; no redirects followed, no retries, no proxies and no netrc
from the environment; the response body read by the caller, bounded.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from urllib.parse import urlsplit

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


def post(url: str, ips: list[str], body: bytes, headers: dict[str, str], timeout: float):
    """POST ``body`` to ``url`` connecting only to ``ips``; returns the urllib3 response
    unread (read it with ``read_bounded``). Raises ``Failed``."""
    import urllib3
    from urllib3 import exceptions

    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname
    default_port = 443 if scheme == "https" else 80
    port = parts.port or default_port
    host_header = f"[{host}]" if ":" in host else host
    if port != default_port:
        host_header = f"{host_header}:{port}"
    send = {k: v for k, v in headers.items() if k.lower() != "host"}
    send["Host"] = host_header
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    limit = urllib3.Timeout(connect=timeout, read=timeout)
    last: Exception | None = None
    for ip in ips:
        try:
            return _pool(scheme, ip, port, host).urlopen(
                "POST", target, body=body, headers=send, redirect=False, retries=False,
                timeout=limit, preload_content=False, assert_same_host=False)
        except (exceptions.ConnectTimeoutError, exceptions.NewConnectionError) as exc:
            last = exc  # never reached the server: the next address may answer
        except exceptions.TimeoutError as exc:
            raise Failed(str(exc), timeout=True) from None
        except (exceptions.HTTPError, OSError) as exc:
            raise Failed(f"{type(exc).__name__}: {exc}", timeout=False) from None
    assert last is not None
    # (urllib3's NewConnectionError is a ConnectTimeoutError too: ask for it first)
    if isinstance(last, exceptions.NewConnectionError):
        raise Failed(f"{type(last).__name__}: {last}", timeout=False)
    raise Failed(str(last), timeout=True)


def read_bounded(response, keep: int, drain: int, deadline: float) -> bytes:
    """The first ``keep`` bytes of the body. The rest is read and dropped so the connection
    can serve the next POST, up to ``drain`` bytes and ``deadline`` (perf_counter); past
    either, or on a read error, the connection is closed instead."""
    import time

    from urllib3 import exceptions

    kept = bytearray()
    read = 0
    finished = False
    try:
        while read <= drain and time.perf_counter() <= deadline:
            chunk = response.read(16 * 1024)
            if not chunk:
                finished = True
                break
            if len(kept) < keep:
                kept += chunk[:keep - len(kept)]
            read += len(chunk)
            if response.length_remaining == 0:  # all of a Content-Length body: no empty read
                finished = True
                break
    except (exceptions.HTTPError, OSError):
        pass  # the status is known; a body cut short is still an answer
    if not finished:
        response.close()  # unread bytes must not reach the next request on this connection
    response.release_conn()
    return bytes(kept)


def _pool(scheme: str, ip: str, port: int, host: str):
    key = (scheme, ip, port, host)
    with _pools_lock:
        pool = _pools.pop(key, None)
        if pool is None:
            pool = _new_pool(scheme, ip, port, host)
            if len(_pools) >= MAX_POOLS:
                # A POST still using it finishes; its connection is closed when returned.
                _pools.popitem(last=False)[1].close()
        _pools[key] = pool  # most recently used last
        return pool


def _new_pool(scheme: str, ip: str, port: int, host: str):
    import urllib3

    address = ip.strip("[]")
    size = pool_size()
    # block=False: past maxsize a POST opens one more connection rather than waiting, and it
    # is closed after use (the bound on POSTs in flight is concurrency.py's, not the pool's).
    if scheme == "https":
        # SNI and the certificate's name are the URL's host, not the address dialled.
        return urllib3.HTTPSConnectionPool(address, port, maxsize=size, block=False,
                                           server_hostname=host, cert_reqs="CERT_REQUIRED",
                                           ca_certs=ca_bundle())
    return urllib3.HTTPConnectionPool(address, port, maxsize=size, block=False)


def close_all() -> None:
    """Close every kept connection (tests; a process about to stop)."""
    with _pools_lock:
        while _pools:
            _pools.popitem()[1].close()
