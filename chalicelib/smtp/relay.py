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
from concurrent.futures import ThreadPoolExecutor

from aiosmtpd.controller import Controller
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
    """The listener on ``host``:``port`` (0: any free port; ``port`` then tells which)."""

    def __init__(self, host: str, port: int, workers: int = 16):
        settings = get_settings()
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="smtp-relay")
        context = tls.server_context(settings)
        handler = RelayHandler(self.executor)
        kwargs = dict(hostname=settings.smtp_hostname, tls_context=context,
                      require_starttls=False, ident=f"email-service {__version__} relay",
                      timeout=300)

        class _Controller(Controller):
            def factory(self):
                return SMTP(self.handler, **kwargs)

        self.host = host
        self.port = port or _free_port(host)
        self._controller = _Controller(handler, hostname=host, port=self.port)

    def start(self) -> "OutboundRelay":
        self._controller.start()
        log.info("outbound relay listening on %s:%s", self.host, self.port)
        return self

    def stop(self) -> None:
        self._controller.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)


def _free_port(host: str) -> int:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
