"""The webhook POST itself: urllib3 connection pools pinned to the addresses
``url_safety.check_url`` approved, one per worker thread and (scheme, address, port, host
name), kept alive between deliveries.

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

MAX_POOLS_PER_THREAD = 32

_local = threading.local()


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
    pools = getattr(_local, "pools", None)
    if pools is None:
        pools = _local.pools = OrderedDict()
    key = (scheme, ip, port, host)
    pool = pools.pop(key, None)
    if pool is None:
        import urllib3

        address = ip.strip("[]")
        if scheme == "https":
            # SNI and the certificate's name are the URL's host, not the address dialled.
            pool = urllib3.HTTPSConnectionPool(address, port, maxsize=1, block=False,
                                               server_hostname=host, cert_reqs="CERT_REQUIRED",
                                               ca_certs=ca_bundle())
        else:
            pool = urllib3.HTTPConnectionPool(address, port, maxsize=1, block=False)
        if len(pools) >= MAX_POOLS_PER_THREAD:
            pools.popitem(last=False)[1].close()
    pools[key] = pool  # most recently used last
    return pool
