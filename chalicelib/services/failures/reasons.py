"""The reasons a message was not delivered: one documented list, each reason with what it says
about the recipient's address, whether it may pass, which of the sender's infrastructure it
blames, its coarse category and what the suppression policy does with it. Pure data."""
from __future__ import annotations

from dataclasses import dataclass

# Coarse categories (the grouping that predates reasons; message and bounce records, the
# statistics and the ``category`` filters use them). ``complaint`` and ``auth_failure`` are
# feedback reports, not delivery failures: no reason maps to them.
CATEGORIES = ("unknown_user", "mailbox_full", "message_too_large", "spam_block", "policy",
              "dns", "transient", "other", "complaint", "auth_failure")

# Groups of reasons.
ADDRESS = "address"    # the recipient's address is bad
REFUSED = "refused"    # the message or its sender was refused (nothing wrong with the address)
MAY_PASS = "may_pass"  # a condition of the mailbox or of the moment
UNKNOWN = "unknown"

# What the suppression policy does after a final failure for the reason.
AT_ONCE = "at_once"              # suppress the recipient now
AFTER_REPEATS = "after_repeats"  # only after repeated failures spanning days
NEVER = "never"                  # never suppress the recipient for it

IP, DOMAIN = "ip", "domain"  # what ``blames`` names


@dataclass(frozen=True)
class Reason:
    name: str
    group: str               # ADDRESS, REFUSED, MAY_PASS or UNKNOWN
    category: str            # one of CATEGORIES
    blames: str | None       # "ip", "domain" or None: the sender's infrastructure at fault
    suppression: str         # AT_ONCE, AFTER_REPEATS or NEVER (for a permanent failure)
    description: str

    @property
    def about_recipient(self) -> bool:
        """The reason says the recipient's address itself is bad."""
        return self.group == ADDRESS

    @property
    def transient(self) -> bool:
        """The condition may pass by itself (a later message may be delivered)."""
        return self.group == MAY_PASS


_ALL = (
    # -- the address is bad
    Reason("no_such_user", ADDRESS, "unknown_user", None, AT_ONCE,
           "the mailbox does not exist at the recipient's domain (X.1.1, X.1.3)"),
    Reason("no_such_domain", ADDRESS, "dns", None, AT_ONCE,
           "the recipient's domain does not exist or cannot be routed to (NXDOMAIN, X.1.2)"),
    Reason("mailbox_moved", ADDRESS, "unknown_user", None, AT_ONCE,
           "the mailbox has moved and mail to the old address is not forwarded (X.1.6)"),
    Reason("domain_accepts_no_mail", ADDRESS, "dns", None, AT_ONCE,
           "the recipient's domain accepts no mail (a null MX, RFC 7505; no mail host; X.1.10)"),
    # -- the message or the sender was refused
    Reason("ip_reputation", REFUSED, "spam_block", IP, NEVER,
           "refused for the reputation of the sending IP address"),
    Reason("domain_reputation", REFUSED, "spam_block", DOMAIN, NEVER,
           "refused for the reputation of the sending domain (or a domain block list)"),
    Reason("block_list", REFUSED, "spam_block", IP, NEVER,
           "the sending IP address is on a block list (Spamhaus, Spamcop, a provider's own)"),
    Reason("spam_content", REFUSED, "spam_block", None, NEVER,
           "the message was judged to be spam by its content"),
    Reason("virus", REFUSED, "spam_block", None, NEVER,
           "the message carried a virus or another harmful attachment"),
    Reason("authentication", REFUSED, "policy", DOMAIN, NEVER,
           "the message failed SPF, DKIM or DMARC (X.7.20-X.7.24, X.7.26)"),
    Reason("ptr_required", REFUSED, "policy", IP, NEVER,
           "the sending IP address has no (matching) reverse DNS name (X.7.25)"),
    Reason("sender_refused", REFUSED, "policy", DOMAIN, NEVER,
           "the envelope sender (the return path) was refused (X.1.7, X.1.8, X.7.27)"),
    Reason("policy", REFUSED, "policy", None, NEVER,
           "refused by the receiver's policy: relaying denied, TLS required, not authorised "
           "(X.7.x)"),
    Reason("message_too_large", REFUSED, "message_too_large", None, NEVER,
           "the message is larger than the receiver takes (X.2.3, X.3.4)"),
    Reason("invalid_message", REFUSED, "other", None, NEVER,
           "the message or the SMTP dialogue broke a rule: headers, syntax, encoding "
           "(X.5.x, X.6.x)"),
    # -- may pass
    Reason("mailbox_full", MAY_PASS, "mailbox_full", None, AFTER_REPEATS,
           "the mailbox is over its quota (X.2.2)"),
    Reason("mailbox_disabled", MAY_PASS, "unknown_user", None, AFTER_REPEATS,
           "the mailbox exists but is suspended, disabled or inactive (X.2.1, X.7.13)"),
    Reason("rate_limited", MAY_PASS, "transient", None, NEVER,
           "the receiver limits how fast or how much it takes (too many connections or "
           "messages, X.4.5)"),
    Reason("greylisted", MAY_PASS, "transient", None, NEVER,
           "greylisting: the receiver asks for a later retry"),
    Reason("network", MAY_PASS, "transient", None, NEVER,
           "no connection, a timeout, a lost connection, a DNS failure or a mail loop (X.4.x)"),
    Reason("expired", MAY_PASS, "transient", None, AFTER_REPEATS,
           "a relay gave up after retrying for its time limit (X.4.7; a failed DSN with a "
           "4.x.x status)"),
    Reason("system_error", MAY_PASS, "transient", None, NEVER,
           "the receiving system failed or is out of resources (X.3.x)"),
    # -- nothing tells
    Reason("unknown", UNKNOWN, "other", None, NEVER,
           "the code and the text do not say why"),
)

REASONS: dict[str, Reason] = {r.name: r for r in _ALL}
NAMES = tuple(REASONS)


def reason(name: str) -> Reason:
    """The reason called ``name`` (KeyError for none)."""
    return REASONS[name]


def about_recipient(name: str | None) -> bool | None:
    """Whether the reason called ``name`` says the address is bad; None for no (or an
    unknown) name, as records show it."""
    found = REASONS.get(name) if name else None
    return None if found is None else found.about_recipient
