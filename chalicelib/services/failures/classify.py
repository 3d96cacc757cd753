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
_AFTER_DATA = re.compile(r"in reply to (?:the )?end\s+of\s+data|in reply to data\b|>>> data\b|"
                         r"after (?:the )?(?:end of )?data\b|data command failed|"
                         r"smtp command\W{0,20}data\b|\[(?:end[ _-]of[ _-])?data\]", re.I)
# After a pipelining client's ">>> DATA", the RCPT replies and then DATA's own refusal.
_RCPT_REFUSED = re.compile(r"<<<\s*503\b|need rcpt|no valid recipients|"
                           r"rcpt commands were rejected|rcpt to: command before data", re.I)
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
    # The wording about the address is the kind receivers' filters use too (KDDI/au's
    # "550 : User unknown", with no address, for mail the user's filter refuses): weak
    # evidence that the address is bad.
    doubtful: bool = False

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
        if base == AT_ONCE and (self.temporary or self.after_data or self.doubtful):
            return AFTER_REPEATS
        return base

    def as_dict(self) -> dict:
        return {"reason": self.reason, "category": self.category,
                "about_recipient": self.about_recipient, "transient": self.transient,
                "temporary": self.temporary, "after_data": self.after_data,
                "doubtful": self.doubtful,
                "blames": self.blames, "suppression": self.suppression}


def answered_data(text: str | None) -> bool:
    """The text says the refusal answered the message's data (Postfix's "in reply to end of
    DATA command", Exim's "after end of data", a transcript's ">>> DATA"). A pipelining
    client's transcript shows ">>> DATA" followed by the RCPT replies and then DATA's own
    "503 need RCPT" / "554 no valid recipients": that refusal was the recipient's, at RCPT."""
    text = text or ""
    for match in _AFTER_DATA.finditer(text):
        if match.group(0).startswith(">>>") and _RCPT_REFUSED.search(
                text[match.end():match.end() + 600]):
            continue
        return True
    return False


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
    gave_up = (reason == "network" and klass != "5") or (reason == "unknown" and temporary)
    if (action or "").lower() == "expired" or (gave_up and (action or "").lower() == "failed"):
        # A failed report without a permanent status whose words say no more than that the
        # connection failed: a relay retried until its time limit and gave up (a refusal
        # the words name, a block list or a rate limit, stays what it is).
        reason = "expired"
    if sender and REASONS[reason].about_recipient:
        reason = "sender_refused"
    after_data = after_data or answered_data(text)
    doubtful = REASONS[reason].about_recipient and rules.FILTER_WORDING.search(text) is not None
    return Verdict(reason, temporary, status, code, after_data, doubtful)


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


__all__ = ["Verdict", "classify", "answered_data", "AT_ONCE", "AFTER_REPEATS", "NEVER"]
