"""The SMTP gateway's server (aiosmtpd). Started by the local stack and by smtp-gateway/.

One asyncio loop in a thread serves every listener:
* ``port`` and SMTP_SUBMISSION_PORTS: plain connections with STARTTLS (25, 587);
* SMTP_TLS_PORT: implicit TLS (465). aiosmtpd only knows about TLS it negotiated itself
  (STARTTLS), so on this listener it is told not to require TLS for AUTH: the whole
  connection already is TLS.
* OUTBOUND_RELAY_PORT: the outbound relay for IP pools (``relay.py``; its own loop thread).
Received mail is committed by the group committer (``commit.py``), in a child process of its
own unless SMTP_COMMIT_PROCESS is false (``commit_process.py``).
AUTH is offered only after TLS unless SMTP_AUTH_REQUIRE_TLS is false. aiosmtpd 1.4.6 drops
anything pipelined before the STARTTLS handshake (CVE-2024-34083); how DATA lines are read
(bare LF, long lines, only CRLF . CRLF ends DATA: CVE-2024-27305) is ``lines.py``; every
reply carries an enhanced status code (``replies.py``). EHLO also offers PIPELINING (aiosmtpd
answers pipelined commands in order) and ENHANCEDSTATUSCODES (handler.py).
"""
from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor

from aiosmtpd.smtp import SMTP, Session, TLSSetupException

from chalicelib import __version__, observability
from chalicelib.config import Settings, get_settings
from chalicelib.smtp import replies, tls
from chalicelib.smtp.commit import GroupCommitter
from chalicelib.smtp.commit_process import CommitterProcess
from chalicelib.smtp.handler import TEMPORARY, GatewayHandler
from chalicelib.smtp.lines import DataLineReader
from chalicelib.smtp.ratelimit import AuthFailureLimiter

log = logging.getLogger(__name__)

FROM_SETTINGS = object()


#: The answer to a line holding a single dot next to a bare LF or CR (lines.py); the
#: connection is closed after it.
NON_STANDARD_END = ("550 5.5.2 Message refused: a line holding only a dot must be the end of "
                    "the data, CRLF . CRLF; it was next to a bare LF or CR (closing the "
                    "connection)")


class _Session(Session):
    """aiosmtpd's Session without the warning ("Session.login_data is deprecated") that its
    AUTH writes on every successful login: the gateway reads ``auth_data``."""

    @property
    def login_data(self):
        return self._login_data

    @login_data.setter
    def login_data(self, value) -> None:
        self._login_data = value


class GatewaySMTP(SMTP):
    """aiosmtpd's SMTP whose size limit follows ``smtp_server.max_message_size`` live, so the
    EHLO SIZE announcement and the 552 refusal always match the configuration; DATA read by
    lines.DataLineReader; enhanced status codes on aiosmtpd's own replies (replies.py)."""

    _plain_replies = False  # during EHLO/HELO: no enhanced codes (RFC 2034)

    def _create_session(self) -> Session:
        return _Session(self.loop)

    def _cb_client_connected(self, reader, writer) -> None:
        reader = DataLineReader.adopt(reader, refuse=self._refuse_non_standard_end)
        super()._cb_client_connected(reader, writer)

    def _refuse_non_standard_end(self) -> None:
        """A lone dot next to a bare LF or CR came in (lines.py): the refusal, then the
        connection closed, before aiosmtpd reads anything of that read."""
        observability.log("smtp.non_standard_end", "info",
                          client_ip=self.session.peer[0] if self.session.peer else None)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(NON_STANDARD_END.encode() + b"\r\n")
            self.transport.close()

    async def push(self, status) -> None:
        if isinstance(status, str) and not self._plain_replies:
            status = replies.enhanced(status, self.data_size_limit)
        await super().push(status)

    async def _plainly(self, command, hostname: str) -> None:
        self._plain_replies = True
        try:
            await command(hostname)
        finally:
            self._plain_replies = False

    async def smtp_EHLO(self, hostname: str) -> None:
        await self._plainly(super().smtp_EHLO, hostname)

    async def smtp_HELO(self, hostname: str) -> None:
        await self._plainly(super().smtp_HELO, hostname)

    async def smtp_DATA(self, arg: str) -> None:
        # A line may be as long as the message may be (lines.py); aiosmtpd checks a line
        # against line_length_limit too.
        limit = self.data_size_limit + 2
        self._reader.begin_data(limit)
        self.line_length_limit = limit
        try:
            await super().smtp_DATA(arg)
        finally:
            del self.line_length_limit  # back to aiosmtpd's, for commands
            self._reader.end_data()

    async def handle_exception(self, error: Exception) -> str:
        """A client that drops during the TLS handshake is expected: one INFO line, no
        traceback (aiosmtpd then closes the connection). Anything else is a fault of ours:
        logged with its traceback, answered 451 (aiosmtpd answered a permanent 500 that
        named the exception)."""
        peer = self.session.peer[0] if self.session and self.session.peer else None
        if isinstance(error, TLSSetupException):
            cause = error.__cause__ or error
            observability.log("smtp.starttls_failed", "info", client_ip=peer,
                              reason=f"{type(cause).__name__}: {cause}"[:300])
            return "454 4.7.0 TLS negotiation failed"
        log.exception("SMTP session error (client %s)", peer)
        return TEMPORARY

    @property
    def data_size_limit(self) -> int:
        return get_settings().smtp_server_max_message_size

    @data_size_limit.setter
    def data_size_limit(self, value) -> None:  # SMTP.__init__ assigns it; the setting wins
        pass

    def connection_made(self, transport) -> None:
        if self._original_transport is None:  # not the second call that STARTTLS makes
            observability.count("smtp_sessions")
        else:  # TLS is up: aiosmtpd drops what was read before; so does the reader's filter
            self._reader.restart()
        super().connection_made(transport)

    def connection_lost(self, error) -> None:
        super().connection_lost(error)
        observability.flush()  # EMF in the container: no Lambda invocation ends to flush it

    _addresses: dict[tuple[str, int], tuple] = {}

    def _getaddr(self, arg: str):
        """aiosmtpd's MAIL/RCPT address parsing (the email package's header parser, and a
        Protocol class created per call: ~0.2 ms), memoised: it depends only on its input."""
        key = (arg, self.local_part_limit)
        found = self._addresses.get(key)
        if found is None:
            found = super()._getaddr(arg)
            if len(self._addresses) >= 4096:
                self._addresses.clear()
            self._addresses[key] = found
        return found


def _ports(raw: str) -> list[int]:
    return [int(p) for p in (part.strip() for part in raw.split(",")) if p]


class Gateway:
    def __init__(self, host: str, port: int, *, submission_ports=FROM_SETTINGS,
                 tls_port=FROM_SETTINGS, settings: Settings | None = None, workers: int = 16,
                 reuse_port: bool = False):
        """``port``: the first STARTTLS listener (0: any free port). ``submission_ports``:
        more STARTTLS listeners. ``tls_port``: the implicit-TLS listener (None: off, 0: any
        free port). Both default to the settings (SMTP_SUBMISSION_PORTS, SMTP_TLS_PORT).
        ``reuse_port``: every listener binds with SO_REUSEPORT, so several gateway processes
        share the ports (`make run` with SMTP_PROCESSES > 1)."""
        self.reuse_port = reuse_port
        self.settings = settings or get_settings()
        self.host = host
        self.port = port
        self.extra_ports = _ports(self.settings.smtp_submission_ports) \
            if submission_ports is FROM_SETTINGS else list(submission_ports or [])
        if tls_port is FROM_SETTINGS:
            tls_port = self.settings.smtp_tls_port or None
        self.tls_port = tls_port
        self.ports: list[int] = []
        self.relay = None  # relay.OutboundRelay when OUTBOUND_RELAY_PORT is set
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="smtp-db")
        limiter = AuthFailureLimiter(self.settings.smtp_auth_max_failures,
                                     self.settings.smtp_auth_failure_window_seconds,
                                     self.settings.smtp_auth_failure_delay_seconds)
        self._committer = GroupCommitter()
        if self.settings.smtp_commit_process:
            self._committer = CommitterProcess(self._committer)
        self.handler = GatewayHandler(self._executor, limiter, self._committer)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._error: BaseException | None = None

    def _factory(self, context: ssl.SSLContext, implicit: bool):
        settings = self.settings
        kwargs = dict(hostname=settings.smtp_hostname, ident=f"email-service {__version__}",
                      enable_SMTPUTF8=True, timeout=300)
        if implicit:
            # The socket is TLS from the first byte: no STARTTLS to offer, AUTH allowed.
            kwargs.update(tls_context=None, auth_require_tls=False)
        else:
            kwargs.update(tls_context=context, auth_require_tls=settings.smtp_auth_require_tls)
        return lambda: GatewaySMTP(self.handler, **kwargs)

    async def _listen(self) -> None:
        context = tls.server_context(self.settings)
        loop = asyncio.get_running_loop()
        for port in [self.port, *self.extra_ports]:
            server = await loop.create_server(self._factory(context, False), self.host, port,
                                              reuse_port=self.reuse_port or None)
            self._servers.append(server)
            self.ports.append(server.sockets[0].getsockname()[1])
        if self.tls_port is not None:
            server = await loop.create_server(self._factory(context, True), self.host,
                                              self.tls_port, ssl=context,
                                              reuse_port=self.reuse_port or None)
            self._servers.append(server)
            self.tls_port = server.sockets[0].getsockname()[1]
        self.port = self.ports[0]

    def _run(self, ready: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:  # noqa: BLE001  (reported by start())
            self._error = exc
            ready.set()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            for server in self._servers:
                server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    def start(self) -> None:
        if isinstance(self._committer, CommitterProcess):
            self._committer.start()  # meanwhile, mail is committed in this process
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="smtp-gateway",
                                        daemon=True)
        self._thread.start()
        ready.wait(30)
        if self._error is not None:
            raise self._error
        log.info("SMTP gateway listening on %s STARTTLS %s implicit TLS %s", self.host,
                 self.ports, self.tls_port)
        if self.settings.outbound_relay_port:
            from chalicelib.smtp.relay import OutboundRelay

            # The relay's listener too: every process starts one on OUTBOUND_RELAY_PORT.
            self.relay = OutboundRelay(self.host, self.settings.outbound_relay_port,
                                       reuse_port=self.reuse_port).start()

    def stop(self) -> None:
        if self.relay is not None:
            self.relay.stop()
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._committer.stop()
