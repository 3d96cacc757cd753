"""Why mail was not delivered: the taxonomy of failures, shared by delivery (an SMTP reply
during an attempt, a DNS failure) and inbound (a DSN's per-recipient fields, the text of a
non-standard bounce). Pure: no database, no I/O.

Interface (stable; other packages build on it):

    from chalicelib.services import failures

    verdict = failures.classify(status="5.1.1", code=550, text="...", action="failed",
                                no_route=False, sender=False)
    verdict.reason           # a key of failures.REASONS, e.g. "no_such_user"
    verdict.about_recipient  # the address itself is bad
    verdict.transient        # the condition may pass (the reason's, or a 4xx reply)
    verdict.temporary        # the reply or report was 4xx / 4.x.x
    verdict.blames           # "ip", "domain" or None: what the receiver held against us
    verdict.category         # the coarse category (failures.CATEGORIES)
    verdict.suppression      # "at_once", "after_repeats" or "never" for a final failure
    verdict.status, .code    # the enhanced status and basic reply code used
    verdict.as_dict()        # the above as a record

    failures.REASONS[name]   # Reason(name, group, category, blames, suppression, description)
                             # with .about_recipient and .transient
    failures.about_recipient(name)  # True/False, None for no name (records use it)
    failures.NAMES, failures.CATEGORIES
    failures.enhanced_status(text), failures.reply_code(text), failures.is_enhanced_status(s)
    failures.answered_data(text)   # the text says the refusal answered the message's data

The reasons (``reasons.py``; docs/api.md lists them with their meaning):

    the address is bad   no_such_user, no_such_domain, mailbox_moved, domain_accepts_no_mail
    refused              ip_reputation, domain_reputation, block_list (blame the IP or the
                         domain), spam_content, virus, authentication (SPF/DKIM/DMARC),
                         ptr_required, sender_refused, policy, message_too_large,
                         invalid_message
    may pass             mailbox_full, mailbox_disabled, rate_limited, greylisted, network,
                         expired (a relay gave up), system_error
    unknown              unknown

How: the wording of the text is read first (``rules.TEXT_RULES``, specific before general:
a block list named in a 5.1.1 reply is a block list), then the enhanced status code
(``rules.STATUS_CODES``), then the basic reply code; a status that names authentication,
reverse DNS, the sender or a null MX is not overridden by wording about the recipient. The
suppression policy that acts on a verdict is ``services/suppressions/policy.py``.
"""
from chalicelib.services.failures.classify import Verdict, answered_data, classify
from chalicelib.services.failures.codes import enhanced_status, is_enhanced_status, reply_code
from chalicelib.services.failures.reasons import (AFTER_REPEATS, AT_ONCE, CATEGORIES, NAMES,
                                                  NEVER, REASONS, Reason, about_recipient,
                                                  reason)

__all__ = ["Verdict", "classify", "answered_data", "enhanced_status", "is_enhanced_status", "reply_code",
           "CATEGORIES", "NAMES", "REASONS", "Reason", "reason", "about_recipient", "AT_ONCE", "AFTER_REPEATS",
           "NEVER"]
