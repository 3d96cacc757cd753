"""A scriptable receiving mail server on loopback (aiosmtpd), standing in for a recipient MX.

Each test scripts what the server answers, one entry per message (DATA) in order; when the
script runs out every message is accepted. Entries:

* ``"250"``                 accept (the message is recorded in ``messages``)
* ``"451 try later"``       any 4xx/5xx reply to DATA (not recorded)
* ``"rcpt:550 no such user"`` reply to RCPT TO instead (the message never reaches DATA)
* ``"drop"``                close the connection after the data arrived, before replying

``hold_next_data()`` makes the next DATA wait, its data received, for the test to release it
(a remote server that is slow to answer). ``throttle_after(n)`` makes it a receiver that
rate-limits: once ``n`` messages were accepted it answers every RCPT TO with a throttle reply
(``421 4.7.0 ...`` by default, as Gmail and Yahoo do) and closes the session, until
``stop_throttling()``; ``throttled`` counts those replies (each one an attempt too many).
``"rcpt:drop"`` closes the connection when that RCPT TO arrives (a session dropped in the
middle of a pipelined flight). It offers PIPELINING (as real MX hosts do; aiosmtpd reads
pipelined commands in order) unless ``pipelining=False``. ``open_now``/``peak_open``: sessions
open at once (idle ones included); ``meet_in_data(n)``: each DATA waits (up to 10 s) until
``n`` are in DATA at once, ``peak_in_data`` the most seen (concurrency observed at the MX).
``delay``: seconds before each EHLO and RCPT TO is answered (a server far away, as the
client's round trips see it: a pipelined flight waits for its RCPT's reply).
``connections`` counts sessions, ``rcpts_seen`` every RCPT TO address offered, ``messages``
holds ``Received(mail_from, rcpt_tos, data, peer, helo, tls)``: the client's address as this
server saw it, the name it greeted with and whether the session was TLS, and the MAIL FROM
parameters (``mail_options``). What EHLO offers:
``eightbitmime`` (8BITMIME, offered by default), ``smtputf8`` (SMTPUTF8, not by default),
``size`` (SIZE with that limit, aiosmtpd's 32 MiB by default; None: not offered). ``tls=True`` offers STARTTLS with a throwaway self-signed
certificate, ``tls=<ssl.SSLContext>`` with that context's; ``host`` is the address listened
on (another loopback address, ``::1``).
"""
from __future__ import annotations

import asyncio
import datetime
import ssl
import tempfile
import threading
from dataclasses import dataclass, field

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP

from tests.support import free_port


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes
    peer: str = ""      # the client's address
    helo: str = ""      # the name it greeted with (EHLO/HELO)
    tls: bool = False   # the session had negotiated STARTTLS
    mail_options: list[str] = field(default_factory=list)  # MAIL FROM parameters


def _self_signed_context() -> ssl.SSLContext:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mx.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    folder = tempfile.mkdtemp(prefix="mx-tls-")
    cert_path, key_path = f"{folder}/cert.pem", f"{folder}/key.pem"
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context


class _Handler:
    def __init__(self, mx: "ScriptedMX"):
        self.mx = mx

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        session.host_name = hostname
        if self.mx.delay:  # a server far away, as the client's round trips see it
            await asyncio.sleep(self.mx.delay)
        if self.mx.pipelining:
            responses.insert(1, "250-PIPELINING")
        if not self.mx.eightbitmime:
            responses = [r for r in responses if r[4:].upper() != "8BITMIME"]
        return responses

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self.mx.delay:
            await asyncio.sleep(self.mx.delay)
        self.mx._seen(address)
        throttle = self.mx._throttle_reply()
        if throttle is not None:
            if throttle.startswith("421"):  # 421: the server closes the session after it
                asyncio.get_running_loop().call_soon(server.transport.close)
            return throttle
        entry = self.mx._peek()
        if entry is not None and entry.startswith("rcpt:"):
            self.mx._pop()
            if entry == "rcpt:drop":  # gone at once, nothing answered
                self.mx._note("dropped")
                server.transport.abort()
                return "421 4.3.0 (never sent: the connection is gone)"
            return entry[len("rcpt:"):]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        meeting = self.mx._meeting
        if meeting is not None:
            with self.mx._lock:
                self.mx._in_data += 1
                self.mx.peak_in_data = max(self.mx.peak_in_data, self.mx._in_data)
            try:
                await asyncio.get_running_loop().run_in_executor(None, _meet, meeting)
            finally:
                with self.mx._lock:
                    self.mx._in_data -= 1
        gate = self.mx._take_gate()
        if gate is not None:
            arrived, release = gate
            arrived.set()
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 60)
        entry = self.mx._pop() or "250"
        if entry == "drop":
            self.mx._note("dropped")
            server.transport.close()
            return None
        if entry.startswith("250"):
            self.mx._record(Received(envelope.mail_from, list(envelope.rcpt_tos),
                                     envelope.original_content or envelope.content,
                                     session.peer[0], session.host_name or "",
                                     session.ssl is not None, list(envelope.mail_options)))
            return "250 2.0.0 OK queued"
        return entry


def _meet(barrier: threading.Barrier) -> None:
    try:
        barrier.wait(10)
    except threading.BrokenBarrierError:
        pass


class _CountingSMTP(SMTP):
    def __init__(self, handler, mx, **kwargs):
        super().__init__(handler, **kwargs)
        self._mx = mx
        self._counted = False

    def connection_made(self, transport):
        if self._original_transport is None:  # not the second call that STARTTLS makes
            self._mx._note("connection")
            self._counted = True
        super().connection_made(transport)

    def connection_lost(self, error):
        if self._counted:
            self._counted = False
            self._mx._note("closed")
        super().connection_lost(error)


class ScriptedMX:
    def __init__(self, script: list[str] | None = None, *, tls: bool | ssl.SSLContext = False,
                 port: int | None = None, host: str = "127.0.0.1", pipelining: bool = True,
                 eightbitmime: bool = True, smtputf8: bool = False,
                 size: int | None = 33554432):
        self.script: list[str] = list(script or [])
        self.pipelining = pipelining
        self.delay = 0.0  # seconds before each EHLO and RCPT TO is answered
        self.open_now = self.peak_open = 0
        self.peak_in_data = self._in_data = 0
        self._meeting: threading.Barrier | None = None
        self.messages: list[Received] = []
        self.connections = 0
        self.rcpts_seen: list[str] = []
        self.drops = 0
        self.throttled = 0
        self._throttle: tuple[int, str] | None = None
        self._gate: tuple[threading.Event, threading.Event] | None = None
        self._lock = threading.Lock()
        self.host = host
        self.eightbitmime = eightbitmime
        self.port = port or free_port()
        tls_context = tls if isinstance(tls, ssl.SSLContext) else \
            _self_signed_context() if tls else None
        handler = _Handler(self)
        mx = self

        class Ctl(Controller):
            def factory(self):
                return _CountingSMTP(self.handler, mx, tls_context=tls_context,
                                     require_starttls=False, hostname="mx.test",
                                     enable_SMTPUTF8=smtputf8, data_size_limit=size)

        self._controller = Ctl(handler, hostname=host, port=self.port)

    def hold_next_data(self) -> tuple[threading.Event, threading.Event]:
        """(arrived, release): ``arrived`` is set when the next DATA's data is in; its reply
        waits until the test sets ``release``."""
        gate = (threading.Event(), threading.Event())
        with self._lock:
            self._gate = gate
        return gate

    def meet_in_data(self, count: int) -> None:
        """Each DATA waits until ``count`` conversations are in DATA at once (or 10 s)."""
        self._meeting = threading.Barrier(count)

    def throttle_after(self, accepted: int,
                       reply: str = "421 4.7.0 Try again later, closing connection.") -> None:
        """Answer every RCPT TO with ``reply`` once ``accepted`` messages were accepted."""
        with self._lock:
            self._throttle = (accepted, reply)

    def stop_throttling(self) -> None:
        with self._lock:
            self._throttle = None

    def _throttle_reply(self) -> str | None:
        with self._lock:
            if self._throttle is None or len(self.messages) < self._throttle[0]:
                return None
            self.throttled += 1
            return self._throttle[1]

    def _take_gate(self):
        with self._lock:
            gate, self._gate = self._gate, None
            return gate

    def _peek(self):
        with self._lock:
            return self.script[0] if self.script else None

    def _pop(self):
        with self._lock:
            return self.script.pop(0) if self.script else None

    def _record(self, received: Received):
        with self._lock:
            self.messages.append(received)

    def _seen(self, address: str):
        with self._lock:
            self.rcpts_seen.append(address)

    def _note(self, what: str):
        with self._lock:
            if what == "connection":
                self.connections += 1
                self.open_now += 1
                self.peak_open = max(self.peak_open, self.open_now)
            elif what == "closed":
                self.open_now -= 1
            else:
                self.drops += 1

    def received_for(self, address: str) -> list[Received]:
        with self._lock:
            return [m for m in self.messages if address in m.rcpt_tos]

    @property
    def relay(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def start(self) -> "ScriptedMX":
        self._controller.start()
        with self._lock:
            self.connections = 0  # the controller's own start-up probe
            self.peak_open = self.open_now
        return self

    def stop(self) -> None:
        self._controller.stop()
