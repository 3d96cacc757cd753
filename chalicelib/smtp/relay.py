"""The gateway's outbound-relay listener (OUTBOUND_RELAY_PORT): a thin aiosmtpd handler over
``services/delivery/outbound_relay.py``, which says what it relays and how.

It runs on hosts that own an IP pool's addresses, for delivery workers that own none (Lambda
behind NAT; the pool's ``relay_host`` points here). Clients: OUTBOUND_RELAY_CLIENTS (loopback
when empty); one recipient per transaction, as the workers send; no AUTH (the envelope and
the data must be a message being delivered, see the service); STARTTLS offered with the
gateway's certificate. Each DATA is answered only when the onward delivery has been answered,
so a relaying session is held for up to an SMTP conversation with the recipient's MX; the
delivery runs in a thread pool of its own (``workers``), never on the event loop.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from aiosmtpd.smtp import SMTP

from chalicelib import __version__
from chalicelib.config import get_settings
from chalicelib.services.delivery import outbound_relay
from chalicelib.smtp import tls

log = logging.getLogger(__name__)


class RelayHandler:
    def __init__(self, executor: ThreadPoolExecutor):
        self.executor = executor

    async def _run(self, function, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if not outbound_relay.client_allowed(session.peer[0]):
            return "550 5.7.1 this client may not use the outbound relay"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if envelope.rcpt_tos:
            return "452 4.5.3 one recipient per transaction"
        refusal = await self._run(outbound_relay.check_envelope, envelope.mail_from, address)
        if refusal is not None:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        return await self._run(outbound_relay.relay, envelope.mail_from, envelope.rcpt_tos[0],
                               envelope.original_content or envelope.content, session.peer[0])


class OutboundRelay:
    """The listener on ``host``:``port`` (0: any free port; ``port`` then tells which), served
    by an event loop in a thread of its own. ``reuse_port``: bound with SO_REUSEPORT, as every
    gateway listener is when several gateway processes share the ports (aiosmtpd's Controller
    is not used: its start-up probe connects to the port, which another process may answer)."""

    def __init__(self, host: str, port: int, workers: int = 16, *, reuse_port: bool = False):
        settings = get_settings()
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="smtp-relay")
        context = tls.server_context(settings)
        handler = RelayHandler(self.executor)
        kwargs = dict(hostname=settings.smtp_hostname, tls_context=context,
                      require_starttls=False, ident=f"email-service {__version__} relay",
                      timeout=300,
                      # the worker declares SMTPUTF8 for internationalized mail (issue 32);
                      # the onward delivery declares it to the MX, or fails it (5.6.7)
                      enable_SMTPUTF8=True)
        self._factory = lambda: SMTP(handler, **kwargs)
        self.host = host
        self.port = port
        self.reuse_port = reuse_port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "OutboundRelay":
        # The listener is made in the relay's own thread: the caller's thread may already
        # run an event loop (Playwright's sync API does), where run_until_complete refuses.
        self._loop = asyncio.new_event_loop()
        ready: Future = Future()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="smtp-relay",
                                        daemon=True)
        self._thread.start()
        self.port = ready.result()  # raises what binding raised
        log.info("outbound relay listening on %s:%s", self.host, self.port)
        return self

    def _serve(self, ready: Future) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            server = loop.run_until_complete(loop.create_server(
                self._factory, self.host, self.port, reuse_port=self.reuse_port))
        except BaseException as exc:  # noqa: BLE001  (handed to start(), which raises it)
            ready.set_exception(exc)
            loop.close()
            return
        ready.set_result(server.sockets[0].getsockname()[1])
        try:
            loop.run_forever()
        finally:
            server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.executor.shutdown(wait=False, cancel_futures=True)
