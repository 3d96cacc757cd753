"""Mail from clients that did not authenticate: which recipients the service accepts, and
what becomes of a message for each of them.

A recipient is accepted only as one of these targets: a message's List-Unsubscribe mailto
address (unsubscribes that message's recipient), a feedback-loop address (FBL_ADDRESSES: a
spam complaint), a domain's DMARC report address (services/dmarc/), the return path of an
outgoing message (a bounce, or a complaint when the
mail is a feedback report), or an address an inbound route of a verified domain matches.
Everything else is refused (``Refusal``): the gateway is never an open relay. The SMTP
handler turns a refusal into its reply; nothing here speaks SMTP.

Mail at the MX comes from no tenant: its recipient address names the route (and so the
server), the return path or unsubscribe address the message it answers, a DMARC report
address its domain. Both steps here look across tenants (db/tenancy.py, "inbound-mail");
mail whose every recipient is a route, or a report address, is stored acting for those
addresses' servers (smtp/handler.py).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from sqlalchemy.orm import Session

from chalicelib.config import get_settings
from chalicelib.db import tenancy
from chalicelib.services.dmarc import addresses as dmarc_addresses, intake as dmarc_intake
from chalicelib.services.inbound import bounces, complaints, receive as inbound, return_path, routes
from chalicelib.services.inbound.routes import RouteMatch
from chalicelib.services.suppressions import unsubscribe

FEEDBACK = "feedback"  # target: a feedback-loop address
RETURN_PATH = "return-path"  # target: the return path of an outgoing message


class Unsubscribe(int):
    """Target: a List-Unsubscribe mailto address; the value is the message's id."""


@dataclass(frozen=True, order=True)
class DmarcReport:
    """Target: a domain's DMARC report address: the domain, and the server its reports are
    stored for (the report is written acting for it: smtp/handler.py's DmarcUnit)."""

    domain_id: int
    server_id: int


class Refusal(enum.Enum):
    NO_RELAY = "not an address of this service"
    UNKNOWN_MAILBOX = "no route for this address"
    UNKNOWN_RETURN_PATH = "no message with this return path"
    UNKNOWN_UNSUBSCRIBE = "no message with this unsubscribe address"
    REJECTED = "refused by the recipient's route"
    UNKNOWN_DMARC = "no domain with this DMARC report address"


Target = Unsubscribe | DmarcReport | str | RouteMatch


def classify(db: Session, address: str) -> tuple[Refusal | None, Target | None]:
    """(refusal, None) or (None, target) for one recipient."""
    with tenancy.across_tenants(db, "inbound-mail"):
        return _classify(db, address)


def _classify(db: Session, address: str) -> tuple[Refusal | None, Target | None]:
    message_id = unsubscribe.message_id_from_address(address)
    if message_id is not None:
        if unsubscribe.unsubscribable(db, message_id):
            return None, Unsubscribe(message_id)
        return Refusal.UNKNOWN_UNSUBSCRIBE, None
    token = dmarc_addresses.token_of(address)  # at the return-path domain: asked first
    if token is not None:
        domain = dmarc_addresses.find_domain(db, token)
        if domain is None:
            return Refusal.UNKNOWN_DMARC, None
        return None, DmarcReport(domain.id, domain.server_id)
    if address.strip().lower() in get_settings().fbl_address_set:
        return None, FEEDBACK
    if return_path.is_any_return_path(db, address):
        if return_path.original_for(db, address) is None:
            return Refusal.UNKNOWN_RETURN_PATH, None
        return None, RETURN_PATH
    match = routes.match(db, address)
    if match is None:
        domain = address.rpartition("@")[2]
        return (Refusal.UNKNOWN_MAILBOX if routes.domain_has_routes(db, domain)
                else Refusal.NO_RELAY), None
    if match.mode == "reject":
        return Refusal.REJECTED, None
    return None, match


def route_matches(rcpt_tos: list[str], targets: dict[str, Target]) -> list[RouteMatch]:
    """The route matches among a message's recipients, in recipient order."""
    return [targets[r] for r in rcpt_tos if isinstance(targets.get(r), RouteMatch)]


def receive(db: Session, *, mail_from: str, rcpt_tos: list[str], targets: dict[str, Target],
            raw: bytes) -> bool:
    """Act on one message for each of its recipients' targets. True when every recipient is
    a route in mode ``bounce`` (the message is then refused after it was stored)."""
    with tenancy.across_tenants(db, "inbound-mail"):
        return _receive(db, mail_from, rcpt_tos, targets, raw)


def _receive(db: Session, mail_from: str, rcpt_tos: list[str], targets: dict[str, Target],
             raw: bytes) -> bool:
    for rcpt in rcpt_tos:
        target = targets.get(rcpt)
        if isinstance(target, Unsubscribe):
            unsubscribe.unsubscribe(db, int(target), "unsubscribe by mail")
        elif isinstance(target, DmarcReport):
            dmarc_intake.receive(db, domain_id=target.domain_id, mail_from=mail_from, raw=raw)
        elif target == FEEDBACK:
            complaints.receive(db, rcpt_to=rcpt, mail_from=mail_from, raw=raw)
        elif target == RETURN_PATH:
            report = complaints.parse(raw)  # a feedback report at a return path: a complaint
            if report is not None:
                complaints.receive(db, rcpt_to=rcpt, mail_from=mail_from, raw=raw,
                                   report=report)
            else:
                bounces.receive(db, rcpt_to=rcpt, mail_from=mail_from, raw=raw)
    matches = route_matches(rcpt_tos, targets)
    if matches:
        inbound.receive(db, mail_from=mail_from, matches=matches, raw=raw)
    return bool(matches) and len(matches) == len(rcpt_tos) and \
        all(m.mode == "bounce" for m in matches)
