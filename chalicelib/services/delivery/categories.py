"""Why a message bounced or an attempt failed, as one category, from the enhanced status code
(RFC 3463) and the text of the reply or DSN. Pure: no database, no I/O.

Categories:
    unknown_user       the mailbox does not exist or is disabled (X.1.1, X.1.6, X.2.1, ...)
    mailbox_full       over quota (X.2.2, X.3.1 with quota text)
    message_too_large  the message exceeds a size limit (X.2.3, X.3.4)
    spam_block         refused as spam, or the sending IP/domain is on a block list
    policy             refused by the receiver's policy (X.7.x: authentication, DMARC, relay)
    dns                the recipient domain does not resolve or has no mail servers
    transient          a temporary condition (4.x.x, greylisting, rate limits, connection)
    other              a permanent failure the code and text do not explain
    complaint          a feedback report (ARF): the recipient marked the message as spam

Text wins over the code where receivers are known to misuse codes: many answer "550 5.7.1"
for spam blocks and "550 5.1.1"-less "User unknown" replies; a 4xx reply is never worse than
``transient`` unless its text says which condition will persist (a full mailbox).
"""
from __future__ import annotations

import re

CATEGORIES = ("unknown_user", "mailbox_full", "message_too_large", "spam_block", "policy",
              "dns", "transient", "other", "complaint")

_ENHANCED = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
_BASIC = re.compile(r"^\s*([245])\d\d\b")

_TEXT_RULES = (
    ("spam_block", re.compile(
        r"spam|blocklist|blacklist|block list|black list|spamhaus|barracuda|spamcop|"
        r"\bRBL\b|\bDNSBL\b|listed (?:at|on|in)|poor reputation|bad reputation|"
        r"reputation|junk mail|message content rejected|UCE", re.I)),
    ("mailbox_full", re.compile(
        r"mailbox (?:is )?full|over ?quota|quota exceeded|exceeded (?:the |their |its )?"
        r"(?:storage|quota)|insufficient (?:system )?storage|mailbox size limit|"
        r"out of storage|full mailbox", re.I)),
    ("unknown_user", re.compile(
        r"user unknown|unknown user|no such (?:user|mailbox|recipient|account)|"
        r"(?:mailbox|account|recipient|address|user)(?: name)? (?:does not|doesn't) exist|"
        r"does not exist|unknown (?:recipient|mailbox|local part)|invalid (?:recipient|mailbox)|"
        r"recipient (?:address )?rejected|mailbox unavailable|mailbox not found|"
        r"account (?:is )?disabled|mailbox (?:is )?disabled|inactive (?:user|account|mailbox)",
        re.I)),
    ("message_too_large", re.compile(
        r"message (?:size )?(?:too (?:big|large)|exceeds)|size limit|message size", re.I)),
    ("dns", re.compile(
        r"NXDOMAIN|no MX|null MX|domain (?:not found|does not exist)|host not found|"
        r"name or service not known|no mail servers|unrouteable|unroutable|"
        r"domain has no|does not accept mail|no such domain", re.I)),
    ("policy", re.compile(
        r"DMARC|\bSPF\b|DKIM|not authori[sz]ed|relay(?:ing)? (?:denied|not permitted|access)|"
        r"policy|authentication required|access denied", re.I)),
    ("transient", re.compile(
        r"try again|temporar|greylist|graylist|rate limit|too many|throttl|deferred|"
        r"timed? ?out|connection (?:refused|reset|closed|dropped)|unavailable", re.I)),
)

# Enhanced status code (subject, detail) -> category; a (subject, None) entry covers the rest
# of that subject.
_CODES = {
    (1, 1): "unknown_user", (1, 2): "dns", (1, 3): "unknown_user", (1, 6): "unknown_user",
    (1, 10): "unknown_user", (2, 1): "unknown_user", (2, 2): "mailbox_full",
    (2, 3): "message_too_large", (3, 4): "message_too_large", (4, 4): "dns",
    (4, 3): "dns", (7, 1): "policy", (7, 23): "policy", (7, 25): "policy", (7, 26): "policy",
    (7, 27): "policy", (7, 28): "spam_block", (7, None): "policy",
    (4, None): "transient", (3, None): "other", (5, None): "other", (6, None): "other",
}


def enhanced_code(text: str | None) -> str | None:
    match = _ENHANCED.search(text or "")
    return ".".join(match.groups()) if match else None


def classify(status: str | None = None, code: int | None = None,
             text: str | None = None, *, no_route: bool = False) -> str:
    """The category of a failure. ``status``: an enhanced status code ("5.1.1") when known
    (else one is looked for in ``text``); ``code``: the SMTP reply code; ``text``: the reply
    or diagnostic; ``no_route``: the recipient domain has no usable mail server (DNS)."""
    if no_route:
        return "dns"
    text = text or ""
    status = status or enhanced_code(text)
    klass = status[0] if status else (str(code)[0] if code else None)
    if klass is None:
        match = _BASIC.search(text)
        klass = match.group(1) if match else None
    by_text = next((name for name, rule in _TEXT_RULES if rule.search(text)), None)
    by_code = None
    if status:
        _, subject, detail = (int(x) for x in status.split("."))
        by_code = _CODES.get((subject, detail)) or _CODES.get((subject, None))
    if klass == "4":
        # Temporary: only a full mailbox says more (it stays full for a while).
        return "mailbox_full" if "mailbox_full" in (by_text, by_code) else "transient"
    if by_text == "spam_block":
        return "spam_block"  # 5.7.1 and even 5.1.1 are used for block lists
    if by_code not in (None, "other", "policy", "transient"):
        return by_code
    if by_text not in (None, "transient"):
        return by_text
    if by_code is not None:
        return by_code
    if klass == "5":
        return "other"
    return "transient" if by_text == "transient" or klass is None else "other"
