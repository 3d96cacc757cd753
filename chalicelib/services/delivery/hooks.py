"""Seams in the SMTP connection path for policies that watch it (per-destination pacing):
``connecting`` runs right before a new connection to a host is opened, ``replied`` whenever a
remote server's reply is classified (greeting, EHLO, MAIL, RCPT, DATA). The connection path
(``smtp.py``, ``connect.py``) knows nothing of what is registered here.

A connect hook may raise ``Refused``: no connection is opened, the attempt is recorded as a
temporary failure (SoftFail) with the hook's ``details``, and the next host is tried only when
``next_host`` says so. Reply hooks only observe: an error in one is logged and delivery goes
on (what a remote server said must be recorded whatever a watcher does with it).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Connecting:
    domain: str              # the recipient domain
    host: str                # the MX host (or relay) name
    port: int
    address: str             # the IP address about to be dialled
    source: str | None       # the address bound (the IP pool's), None: the system's choice


@dataclass(frozen=True)
class Reply:
    domain: str
    host: str
    stage: str               # connect (greeting, EHLO, STARTTLS), envelope, data, done
    code: int
    text: str | None
    source: str | None


class Refused(Exception):
    """Raised by a connect hook: do not open this connection now."""

    def __init__(self, details: str, next_host: bool = False):
        super().__init__(details)
        self.details = details
        self.next_host = next_host


_connect: list[Callable[[Connecting], None]] = []
_reply: list[Callable[[Reply], None]] = []


def on_connect(hook: Callable[[Connecting], None]) -> Callable[[Connecting], None]:
    _connect.append(hook)
    return hook


def on_reply(hook: Callable[[Reply], None]) -> Callable[[Reply], None]:
    _reply.append(hook)
    return hook


def remove(hook) -> None:
    for hooks in (_connect, _reply):
        if hook in hooks:
            hooks.remove(hook)


def connecting(event: Connecting) -> None:
    """Before a new connection: every connect hook, which may raise ``Refused``."""
    for hook in tuple(_connect):
        hook(event)


def replied(event: Reply) -> None:
    for hook in tuple(_reply):
        try:
            hook(event)
        except Exception:  # noqa: BLE001  (a watcher must not lose a delivery's outcome)
            log.exception("reply hook %r failed", hook)
