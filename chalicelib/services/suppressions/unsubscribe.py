"""One-click unsubscribe (RFC 8058, with RFC 2369's List-Unsubscribe).

Which messages: every message of a broadcast stream, and those of a transactional stream
whose ``list_unsubscribe`` is on (the tenant asks for it). The delivery worker adds, before
DKIM signing (both fields are in dkim/signer.py's signed and oversigned sets)::

    List-Unsubscribe: <{PUBLIC_URL}/u/{token}>,
     <mailto:u-{token}@{RETURN_PATH_DOMAIN}?subject=unsubscribe>
    List-Unsubscribe-Post: List-Unsubscribe=One-Click

replacing any List-Unsubscribe fields of the tenant's own (two would leave the receiver
guessing which one works).

The token is ``<message id>.<HMAC-SHA256 of it, 128 bits>`` under a key derived from the
installation signing key (as tracking's open token, with its own purpose string): no row per
message, nothing guessable. A POST to the URL (the mailbox provider's one-click request, or
the confirmation page's form), or any mail to the mailto address, suppresses the message's
recipient for the message's stream (reason Unsubscribe, origin unsubscribe, no expiry). A GET
only shows the confirmation page: link scanners and prefetchers GET every link, so a GET must
never unsubscribe anyone.
"""
from __future__ import annotations


from sqlalchemy.orm import Session

from chalicelib.config import get_settings
from chalicelib.db import tenancy
from chalicelib.db.models import Message
from chalicelib.services.security import signed_ids

POST_VALUE = "List-Unsubscribe=One-Click"
MAILTO_PREFIX = "u-"
TOKENS = signed_ids.SignedIds("unsubscribe", "email-service/unsubscribe/v1")


def token(message_id: int) -> str:
    return TOKENS.token(message_id)


def message_id_from_token(value: str) -> int | None:
    return TOKENS.verify(value)


def url(message_id: int) -> str:
    return f"{get_settings().effective_public_url}/u/{token(message_id)}"


def mailto_address(message_id: int) -> str:
    return f"{MAILTO_PREFIX}{token(message_id)}@{get_settings().effective_return_path_domain}"


def message_id_from_address(address: str) -> int | None:
    """The message behind an unsubscribe mailto address; None for any other address."""
    local, _, domain = (address or "").rpartition("@")
    if domain.lower().rstrip(".") != get_settings().effective_return_path_domain.lower():
        return None
    if not local.startswith(MAILTO_PREFIX):
        return None
    return message_id_from_token(local[len(MAILTO_PREFIX):])


def add_headers(raw: bytes, message_id: int) -> bytes:
    """``raw`` with our List-Unsubscribe and List-Unsubscribe-Post fields in front (any the
    message had removed). Folded so no line passes 78 characters but the URL's own."""
    from chalicelib.services.tracking.engagement import strip_header

    for name in ("List-Unsubscribe", "List-Unsubscribe-Post"):
        raw = strip_header(raw, name)
    header = (f"List-Unsubscribe: <{url(message_id)}>,\r\n"
              f" <mailto:{mailto_address(message_id)}?subject=unsubscribe>\r\n"
              f"List-Unsubscribe-Post: {POST_VALUE}\r\n")
    return header.encode("ascii") + raw


def _outgoing(db: Session, message_id: int) -> Message | None:
    """The outgoing message ``message_id``: the signed link or address names it across
    tenants ("unsubscribe", db/tenancy.py)."""
    with tenancy.across_tenants(db, "unsubscribe"):
        message = db.get(Message, message_id)
    return message if message is not None and message.scope == "outgoing" and \
        not message.bounce else None


def unsubscribable(db: Session, message_id: int) -> bool:
    return _outgoing(db, message_id) is not None


def unsubscribe(db: Session, message_id: int, origin_details: str) -> Message | None:
    """Suppress the recipient of outgoing message ``message_id`` for its stream; None when
    there is no such message. Repeating it is harmless (the entry stays permanent)."""
    from chalicelib.services.suppressions import entries

    message = _outgoing(db, message_id)
    if message is None:
        return None
    with tenancy.acting(db, tenancy.for_server(message.server_id)):  # the message's server
        entries.suppress(db, message.server_id, message.rcpt_to, reason="Unsubscribe",
                         origin="unsubscribe", stream_id=message.stream_id,
                         details=f"{origin_details} (message {message.id})")
    return message
