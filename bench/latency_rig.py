"""The pieces of ``bench/bench_latency.py``: a receiving MX that counts sessions per
destination, a proxy that adds a one-way delay to every byte in both directions, and the
DNS zone that sends each recipient domain to its own loopback address.

* **Destinations.** Destination ``k`` is the recipient domain ``d<k>.latency.example.net``;
  its MX host ``mx.d<k>.latency.example.net`` resolves to ``127.0.0.<FIRST_OCTET + k>``
  (all of 127.0.0.0/8 is loopback on Linux). The proxy listens on each of those addresses,
  on one port (the service dials it as DELIVERY_MX_PORT), and connects on to the one sink
  *from* the same address: the sink tells destinations apart by its peer's address.
* **The sink** (``CountingMX``): aiosmtpd, offering PIPELINING (aiosmtpd reads commands one
  line at a time from its buffer, so a pipelined flight is answered in order), accepting
  everything; per peer address it counts the sessions open now and the peak, and it counts
  the messages received. The counters live in shared memory (``Counters``) so the bench
  reads them from another process.
* **The delay proxy** (``DelayProxy``): asyncio; each accepted connection waits one delay
  (the SYN crossing) before it connects on, then two pumps carry the bytes, each chunk
  handed on ``delay`` seconds after it was read, in order; end of stream is delayed the
  same way. Connections never wait for each other: a round trip through it costs two
  delays, and nothing else is serialised.

Each runs in a process of its own in the bench (``serve_sink``, ``serve_proxy``), so their
CPU and GIL are not the service's nor the reference sender's."""
from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections import deque

FIRST_OCTET = 10          # destination k is 127.0.0.(FIRST_OCTET + k)
MAX_DESTINATIONS = 200    # 127.0.0.10 .. 127.0.0.209
SLOTS = 256               # counters indexed by the peer address's last octet
HOOK_ADDRESS = "127.0.0.9"  # the webhook receiver's side of the proxy


def destination_domain(k: int) -> str:
    return f"d{k}.latency.example.net"


def destination_address(k: int) -> str:
    assert 0 <= k < MAX_DESTINATIONS, k
    return f"127.0.0.{FIRST_OCTET + k}"


def zone(destinations: int) -> dict:
    """The LoopbackDNS zone: MX and A records of ``destinations`` recipient domains."""
    records: dict = {}
    for k in range(destinations):
        domain = destination_domain(k)
        records[(f"{domain}.", "MX")] = [(10, f"mx.{domain}.")]
        records[(f"mx.{domain}.", "A")] = [destination_address(k)]
    return records


class Counters:
    """Shared-memory counters of the sink: ``messages`` received in all, and per peer
    address (last octet) the sessions ``open`` now and the ``peak`` since ``reset_peaks``.
    Built from a multiprocessing context (``Counters(ctx)``) or, in one process, plain lists
    (``Counters()``)."""

    def __init__(self, ctx=None):
        if ctx is None:
            self.messages, self.open, self.peak = [0], [0] * SLOTS, [0] * SLOTS
            self.sessions = [0]
        else:
            self.messages = ctx.Array("q", 1, lock=False)
            self.sessions = ctx.Array("q", 1, lock=False)  # sessions opened in all
            self.open = ctx.Array("i", SLOTS, lock=False)
            self.peak = ctx.Array("i", SLOTS, lock=False)

    def reset_peaks(self) -> None:
        for i in range(SLOTS):
            self.peak[i] = self.open[i]

    def peaks(self, destinations: int) -> list[int]:
        """Peak concurrent sessions of each destination since the last reset."""
        return [self.peak[FIRST_OCTET + k] for k in range(destinations)]


def new_loop() -> asyncio.AbstractEventLoop:
    """The rig's event loop: uvloop's when installed (requirements-dev.txt), else asyncio's.
    The rig shares the machine's cores with the stack it measures, unlike a real MX: the
    cheaper its loop, the less of the service's CPU it takes."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _slot(peer) -> int:
    try:
        return int(str(peer[0]).rsplit(".", 1)[1]) % SLOTS
    except (TypeError, ValueError, IndexError):
        return 0


def counting_mx(counters: Counters, host: str = "127.0.0.1", port: int = 0):
    """An aiosmtpd Controller (started) whose sessions count into ``counters``."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import SMTP

    class CountingSMTP(SMTP):
        slot = 0

        def connection_made(self, transport):
            self.slot = _slot(transport.get_extra_info("peername"))
            counters.sessions[0] += 1
            counters.open[self.slot] += 1
            if counters.open[self.slot] > counters.peak[self.slot]:
                counters.peak[self.slot] = counters.open[self.slot]
            super().connection_made(transport)

        def connection_lost(self, error):
            counters.open[self.slot] -= 1
            super().connection_lost(error)

    class Handler:
        async def handle_EHLO(self, server, session, envelope, hostname, responses):
            session.host_name = hostname
            # The last line of the reply has no hyphen: offer PIPELINING before it.
            return [*responses[:-1], "250-PIPELINING",
                    responses[-1] if responses[-1].startswith("250 ")
                    else "250 " + responses[-1][4:]]

        async def handle_DATA(self, server, session, envelope):
            counters.messages[0] += len(envelope.rcpt_tos)
            return "250 2.0.0 OK"

    class CountingController(Controller):
        def factory(self):
            return CountingSMTP(self.handler, **self.SMTP_kwargs)

    if port == 0:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
    controller = CountingController(Handler(), hostname=host, port=port, loop=new_loop(),
                                    server_hostname="sink.latency.example.net",
                                    data_size_limit=0)
    controller.start()
    return controller


def serve_sink(counters: Counters, ready, stop) -> None:
    """The sink in a process of its own: sends its port through ``ready``, serves until
    ``stop`` is set."""
    controller = counting_mx(counters)
    ready.send(controller.port)
    stop.wait()
    controller.stop()


class _Side(asyncio.Protocol):
    """One end of a proxied connection: what it reads is written to the other end's
    transport ``delay()`` seconds later. Each side keeps its own first-in first-out list of
    what is due, and one timer, for the head of it (no task, queue or stream per chunk: the
    rig's CPU is on the same cores as the service's, unlike a real MX's). The order is the
    list's, never the event loop's: asyncio's timer heap does not keep the order of timers due
    at the same moment, and uvloop runs a timer whose delay rounds to 0 ms at once, ahead of
    earlier ones still waiting for their millisecond (chunks held while the far end was
    being connected were written in the wrong order so, under load). Due times only go
    forwards, so a delay that changes mid-stream does not reorder them either."""

    SLACK = 0.001  # uvloop's timers are whole milliseconds: one may fire up to 0.5 ms early

    def __init__(self, proxy: "DelayProxy", way: str):
        self.proxy, self.way = proxy, way
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.other: _Side | None = None
        self.pending: deque = deque()  # (due, callback, args), oldest first
        self.timer: asyncio.TimerHandle | None = None
        self.last_due = 0.0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def _later(self, callback, *args) -> None:
        due = max(self.loop.time() + self.proxy.delay(), self.last_due)
        self.last_due = due
        self.pending.append((due, callback, args))
        self.start()

    def start(self) -> None:
        """Time the head of the list, once the other end is connected (until then what
        arrives waits in the list)."""
        if self.timer is None and self.pending and self.other is not None \
                and self.other.transport is not None:
            self.timer = self.loop.call_at(self.pending[0][0], self._run)

    def _run(self) -> None:
        self.timer = None
        now = self.loop.time() + self.SLACK
        while self.pending and self.pending[0][0] <= now:
            _, callback, args = self.pending.popleft()
            callback(*args)
        self.start()

    def _write(self, data: bytes) -> None:
        transport = self.other.transport if self.other is not None else None
        if transport is not None and not transport.is_closing():
            transport.write(data)
            self.proxy.forwarded[self.way] += len(data)

    def _eof(self) -> None:
        transport = self.other.transport if self.other is not None else None
        if transport is not None and not transport.is_closing() and transport.can_write_eof():
            transport.write_eof()

    def _close(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()

    def data_received(self, data: bytes) -> None:
        self._later(self._write, data)

    def eof_received(self) -> bool:
        self._later(self._eof)
        return True  # half-close: the other way may still carry bytes

    def connection_lost(self, exc) -> None:
        self._later(self._close)


class DelayProxy:
    """``listens`` [(address, port, target host, target port, source address or None)]:
    each listening address forwards to its target, connecting from the source address when
    given, every chunk ``delay()`` seconds late in each direction (``delay`` is read per
    chunk, so it may change between phases). The connection to the target is opened one
    delay after the client's (its first packet crossing). ``forwarded`` counts the bytes
    carried each way ({"up": n, "down": n}) and ``connections`` the connections accepted."""

    def __init__(self, listens, delay):
        self.listens, self.delay = listens, delay
        self.forwarded = {"up": 0, "down": 0}
        self.connections = 0
        self.servers: list = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None

    def _factory(self, target_host: str, target_port: int, source: str | None):
        def accepted() -> _Side:
            self.connections += 1
            client = _Side(self, "up")
            loop = client.loop

            async def connect() -> None:
                try:
                    _, upstream = await loop.create_connection(
                        lambda: _Side(self, "down"), target_host, target_port,
                        local_addr=(source, 0) if source else None)
                except OSError:
                    if client.transport is not None:
                        client.transport.close()
                    return
                upstream.other, client.other = client, upstream
                client.start()
                upstream.start()

            loop.call_later(self.delay(), lambda: loop.create_task(connect()))
            return client
        return accepted

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        for address, port, target_host, target_port, source in self.listens:
            self.servers.append(await loop.create_server(
                self._factory(target_host, target_port, source), address, port,
                reuse_address=True, backlog=1024))

    def start(self) -> "DelayProxy":
        """Serve on an event loop in a thread of this process."""
        self.loop = new_loop()
        started = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self._start())
            except BaseException as exc:  # noqa: BLE001  (reported to start's caller)
                failed.append(exc)
                started.set()
                return
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait()
        if failed:
            raise failed[0]
        return self

    @property
    def port(self) -> int:
        return self.servers[0].sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def close() -> None:
            for server in self.servers:
                server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()


def free_port_on(addresses: list[str]) -> int:
    """A TCP port free on every one of ``addresses`` (tried on the first, checked on all)."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind((addresses[0], 0))
            port = sock.getsockname()[1]
        try:
            for address in addresses:
                with socket.socket() as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    probe.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no port free on every destination address")


def serve_proxy(destinations: int, mx_port: int, sink_port: int, hook_port: int,
                receiver_port: int, mx_delay, hook_delay, ready, stop) -> None:
    """The proxy in a process of its own: destination k's address at ``mx_port`` to the sink
    (from destination k's address), HOOK_ADDRESS at ``hook_port`` to the webhook receiver;
    one-way delays (seconds) read from the shared values ``mx_delay`` and ``hook_delay``."""
    mx = [(destination_address(k), mx_port, "127.0.0.1", sink_port, destination_address(k))
          for k in range(destinations)]
    proxies = [DelayProxy(mx, lambda: mx_delay.value).start()]
    if receiver_port:
        proxies.append(DelayProxy([(HOOK_ADDRESS, hook_port, "127.0.0.1", receiver_port, None)],
                                  lambda: hook_delay.value).start())
    ready.send(True)
    stop.wait()
    for proxy in proxies:
        proxy.stop()


def wait_for(read, target: int, what: str, timeout: float = 900) -> float:
    deadline = time.perf_counter() + timeout
    while read() < target:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"timed out: {read()} of {target} {what}")
        time.sleep(0.002)
    return time.perf_counter()


def new_database_url(folder: str, label: str, url: str) -> str:
    if url:
        from bench.bench_pipeline import ensure_database

        ensure_database(url)
        from bench.common import prepare_database

        env = dict(os.environ)
        prepare_database(url)  # empties it (drops the public schema)
        os.environ.clear()
        os.environ.update(env)
        return url
    return f"sqlite:///{os.path.join(folder, label + '.db')}"
