"""One failure -> one ``Verdict``: the reason (``reasons.py``) from the enhanced status code,
the basic reply code and the text, and what follows from it."""
from __future__ import annotations

import re
from dataclasses import dataclass

from chalicelib.services.failures import codes, rules
from chalicelib.services.failures.reasons import (AFTER_REPEATS, AT_ONCE, NEVER, REASONS,
                                                  Reason)

# Reasons an enhanced status code names so precisely that wording about the recipient
# ("Recipient address rejected: ...") does not override it: a 5.7.26 is a DMARC failure
# whatever the prefix of its text.
_AFTER_DATA = re.compile(r"in reply to (?:the )?end of data|in reply to data|>>> data\b|"
                         r"after (?:the )?(?:end of )?data\b|data command failed", re.I)
_DECISIVE_CODES = ("authentication", "ptr_required", "sender_refused", "domain_accepts_no_mail")


@dataclass(frozen=True)
class Verdict:
    """What one failure means. ``reason`` is a key of ``REASONS``; ``temporary``: the reply
    or report was a 4xx / 4.x.x (the sender retries, or a relay gave up after retrying)."""

    reason: str
    temporary: bool
    status: str | None = None  # the enhanced status code used, if any
    code: int | None = None    # the basic reply code used, if any
    # The refusal came after DATA: the server had accepted the recipient at RCPT, so wording
    # about the user is a filter's as often as the truth (carriers answer "550 Unknown user"
    # to mail their user's filter refuses).
    after_data: bool = False

    @property
    def info(self) -> Reason:
        return REASONS[self.reason]

    @property
    def about_recipient(self) -> bool:
        """The recipient's address itself is bad."""
        return self.info.about_recipient

    @property
    def transient(self) -> bool:
        """The condition may pass (mailbox full, rate limits, network ...)."""
        return self.info.transient or self.temporary

    @property
    def blames(self) -> str | None:
        """"ip", "domain" or None: the sender's infrastructure the receiver objected to."""
        return self.info.blames

    @property
    def category(self) -> str:
        """The coarse category; a temporary failure is ``transient`` unless the mailbox is
        full (as before reasons existed)."""
        if self.temporary and self.reason != "mailbox_full":
            return "transient"
        return self.info.category

    @property
    def suppression(self) -> str:
        """What a *final* failure with this verdict does to the recipient (the policy in
        ``services/suppressions/policy.py`` acts on it): ``at_once`` for a permanent
        address-level reason; ``after_repeats`` for a mailbox full, disabled or expired, and
        for address-level wording in a temporary reply (a relay's expired 4.x.x report);
        ``never`` for everything about the sender, the IP, the content or the moment."""
        base = self.info.suppression
        if base == AT_ONCE and (self.temporary or self.after_data):
            return AFTER_REPEATS
        return base

    def as_dict(self) -> dict:
        return {"reason": self.reason, "category": self.category,
                "about_recipient": self.about_recipient, "transient": self.transient,
                "temporary": self.temporary, "after_data": self.after_data,
                "blames": self.blames, "suppression": self.suppression}


def classify(status: str | None = None, code: int | None = None, text: str | None = None, *,
             action: str | None = None, no_route: bool = False,
             sender: bool = False, after_data: bool = False) -> Verdict:
    """The verdict on one failure.

    ``status``: the enhanced status code when known (a DSN's Status field), else the first in
    ``text``; ``code``: the basic reply code, else the first in ``text``; ``text``: the
    reply, the Diagnostic-Code or the bounce's words; ``action``: a DSN's Action
    (``failed``/``delayed``); ``no_route``: the recipient's domain has no usable mail server
    (DNS); ``sender``: the receiver refused the envelope sender (MAIL FROM), so no reason
    about the recipient applies; ``after_data``: the refusal answered the message's data
    (also read from the text: "in reply to end of DATA command", ">>> DATA").
    """
    text = text or ""
    if status is not None and not codes.is_enhanced_status(status):
        status = None
    status = status or codes.enhanced_status(text)
    code = code or codes.reply_code(text)
    klass = codes.status_class(status, code)
    temporary = klass == "4" or (klass is None and (action or "").lower() == "delayed")
    if no_route:
        reason = rules.by_text(text) if text else None
        if reason not in ("domain_accepts_no_mail", "no_such_domain"):
            reason = "no_such_domain"
        return Verdict(reason, temporary, status, code)
    reason = _reason(status, code, text, temporary)
    if sender and REASONS[reason].about_recipient:
        reason = "sender_refused"
    after_data = after_data or _AFTER_DATA.search(text) is not None
    return Verdict(reason, temporary, status, code, after_data)


def _reason(status: str | None, code: int | None, text: str, temporary: bool) -> str:
    said = rules.by_text(text) if text else None
    coded = rules.by_status(status) if status else None
    if coded in _DECISIVE_CODES and (said is None or REASONS[said].about_recipient
                                     or said in ("policy", "spam_content")):
        return coded
    if said is not None:
        return said
    if coded is not None and coded != "unknown":
        return coded
    if temporary and code in (421, 451, 452):  # RFC 5321: service or local system trouble
        return "system_error"
    return "unknown"


__all__ = ["Verdict", "classify", "AT_ONCE", "AFTER_REPEATS", "NEVER"]
