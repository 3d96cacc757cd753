"""The outbound relay's service (the listener is ``smtp/relay.py``): sending, from this host's
IP pool addresses, mail that a delivery worker on a host owning none of them (a Lambda worker
behind NAT) hands over because its pool's ``relay_host`` points here.

It relays only the service's own mail, as it is being delivered: the envelope sender must be
the return path of an outgoing message (its token), the one recipient that message's, and
the data exactly the bytes the worker prepared for it (stored with its in-flight marker right
before DATA, which must exist). Anything else is refused, so the listener is no open relay
even to clients inside OUTBOUND_RELAY_CLIENTS. It keeps no queue: it answers the worker's DATA
with the MX's own reply once the MX has answered, headed by a report line (``relay_report``),
so the worker records the real outcome and retries as usual. The message goes out as the
worker would send it from here: the server's pool (``egress``, IP_POOL_EGRESS forced to
direct: a relay never hands mail on to another relay), the recipient domain's MTA-STS policy,
DELIVERY_RELAY if this host has one.

The envelope names the message by its return path's token, whoever's it is: that lookup
crosses tenants (db/tenancy.py, "outbound-relay"); the rest acts for the message's server.
"""
from __future__ import annotations

import ipaddress
from types import SimpleNamespace

from sqlalchemy import select

from chalicelib import observability, statuses
from chalicelib.config import get_settings
from chalicelib.db import session_scope, tenancy

from chalicelib.db.models import Delivery, Domain, Message
from chalicelib.services import content
from chalicelib.services.delivery import egress, mta_sts, relay_report, client, steps
from chalicelib.services.delivery.connect import text


def client_allowed(address: str) -> bool:
    """OUTBOUND_RELAY_CLIENTS (CIDR list), or loopback only when it is empty."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    networks = [n for n in get_settings().outbound_relay_clients.split(",") if n]
    if not networks:
        return ip.is_loopback
    return any(ip in ipaddress.ip_network(n) for n in networks)


def _message(db, mail_from: str, rcpt_to: str):
    """The message being delivered that the envelope names; ``db`` then acts for its server."""
    token = mail_from.rpartition("@")[0]
    with tenancy.across_tenants(db, "outbound-relay"):
        message = db.scalar(select(Message).where(Message.token == token,
                                                  Message.scope == "outgoing"))
    if message is None or message.rcpt_to.lower() != rcpt_to.lower() or \
            message.locked_by is None or message.status not in statuses.DELIVERABLE:
        return None
    tenancy.act(db, tenancy.for_server(message.server_id))
    return message


# Temporary: a refusal here means a misconfiguration (or a probe), never a bad recipient.
REFUSED = "451 4.7.1 not a message this service is delivering now: relaying refused"


def check_envelope(mail_from: str, rcpt_to: str) -> str | None:
    """At RCPT: None when the envelope is that of an outgoing message being delivered (its
    worker holds its claim), else the refusal to answer."""
    with session_scope() as db:
        return None if _message(db, mail_from, rcpt_to) is not None else REFUSED


def relay(mail_from: str, rcpt_to: str, data: bytes, peer: str) -> str:
    """At DATA: deliver and answer with the MX's reply (or the refusal)."""
    with session_scope() as db:
        message = _message(db, mail_from, rcpt_to)
        in_flight = message is not None and db.scalar(
            select(Delivery.id).where(Delivery.message_id == message.id,
                                      Delivery.status == statuses.IN_FLIGHT).limit(1))
        raw = content.sent_bytes(db, message.id)[1] if in_flight else None
        if raw is None or raw.rstrip(b"\r\n") != data.rstrip(b"\r\n"):
            return REFUSED
        server_id, message_id = message.server_id, message.id
        path = egress.for_pool(db, egress.server_pool(db, server_id), mode="direct")
        downgrade = _seven_bit(db, message)
    domain = rcpt_to.rpartition("@")[2]
    try:
        route = client.route(domain, path)
    except client.TargetError as exc:
        outcome = client.Outcome(exc.status, exc.details, recipient_rejected=exc.recipient_rejected)
    else:
        policy = mta_sts.policy_for(domain) if route.to_mx else None
        outcome = client.send(route.hosts, mail_from=mail_from, rcpt_to=rcpt_to, data=data,
                            egress=path, policy=policy, downgrade=downgrade)
    observability.log("delivery.relayed", "info" if outcome.status == statuses.SENT else
                      "warning", message_id=message_id, server_id=server_id, client=peer,
                      host=outcome.host, source_address=outcome.source_address,
                      status=outcome.status, code=outcome.code, details=outcome.details)
    return reply(outcome)


def _seven_bit(db, message):
    """Issue 32: the worker's bytes made 7-bit and signed again for an MX without 8BITMIME,
    as the worker would (steps.seven_bit); None when the signing domain is gone."""
    domain = db.get(Domain, message.domain_id) if message.domain_id is not None else None
    if domain is None:
        return None
    return steps.seven_bit(SimpleNamespace(domain_name=domain.name,
                                           dkim_selector=domain.dkim_selector,
                                           dkim_key=domain.dkim_private_key_encrypted))


def reply(outcome: client.Outcome) -> str:
    """The answer to the worker's DATA: the MX's code (ours when none answered), the report
    line, the MX's text (or what went wrong)."""
    code = outcome.code or {statuses.SENT: 250, statuses.HARD_FAIL: 550}.get(outcome.status, 451)
    if outcome.status == statuses.SENT and not 200 <= code < 300:
        code = 250
    words = text(outcome.output if outcome.code else outcome.details) or "-"
    return f"{code}-{relay_report.line(outcome)}\r\n{code} {words[:900]}"
