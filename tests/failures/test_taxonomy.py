"""The failure taxonomy (services/failures/): every reason documented with what it says of
the address, and the verdict on real-world wording where code and text disagree."""
from __future__ import annotations

import pytest

from chalicelib.services import failures
from chalicelib.services.failures import AFTER_REPEATS, AT_ONCE, NEVER, REASONS, classify


def test_every_reason_is_documented_and_grouped():
    address = {n for n, r in REASONS.items() if r.about_recipient}
    assert address == {"no_such_user", "no_such_domain", "mailbox_moved",
                       "domain_accepts_no_mail"}
    for reason in REASONS.values():
        assert reason.category in failures.CATEGORIES and reason.description
        assert reason.blames in (None, "ip", "domain")
        # only an address-level reason suppresses at once
        assert (reason.suppression == AT_ONCE) == reason.about_recipient
    assert {n for n, r in REASONS.items() if r.suppression == AFTER_REPEATS} == \
        {"mailbox_full", "mailbox_disabled", "expired"}
    assert {n for n, r in REASONS.items() if r.blames == "ip"} == \
        {"ip_reputation", "block_list", "ptr_required"}
    assert REASONS["authentication"].blames == "domain"
    assert REASONS["mailbox_full"].transient and not REASONS["block_list"].transient
    with open("docs/api.md", encoding="utf-8") as fh:  # the reasons list is documented
        doc = fh.read()
    assert all(f"`{name}`" in doc for name in REASONS)


CASES = [
    # (status, code, text, reason, suppression)
    (None, 550, "550 5.1.1 <ann@example.net>: Recipient address rejected: User unknown in "
                "virtual mailbox table", "no_such_user", AT_ONCE),
    (None, 550, "550 5.1.1 The email account that you tried to reach does not exist.",
     "no_such_user", AT_ONCE),
    (None, 550, "550 Requested action not taken: mailbox unavailable", "no_such_user", AT_ONCE),
    # a block list named in a 5.1.1 / 5.7.1 reply is the sender's IP, not the address
    (None, 554, "554 5.7.1 Service unavailable; Client host [192.0.2.1] blocked using "
                "zen.spamhaus.org", "block_list", NEVER),
    (None, 550, "550 5.7.1 Unfortunately, messages from [192.0.2.1] weren't sent. Please "
                "contact your Internet service provider since part of their network is on our "
                "block list (S3150).", "block_list", NEVER),
    (None, 421, "421 4.7.28 Our system has detected an unusual rate of unsolicited mail "
                "originating from your IP address.", "ip_reputation", NEVER),
    # the status says DMARC / reverse DNS even where the text starts as Postfix's does
    (None, 550, "550 5.7.26 <ann@example.net>: Recipient address rejected: Unauthenticated "
                "email from example.com is not accepted due to domain's DMARC policy",
     "authentication", NEVER),
    (None, 550, "550 5.7.25 The IP address sending this message does not have a PTR record "
                "setup", "ptr_required", NEVER),
    (None, 450, "450 4.7.1 Client host rejected: cannot find your reverse hostname, "
                "[192.0.2.1]", "ptr_required", NEVER),
    (None, 552, "552 5.2.2 The email account that you tried to reach is over quota",
     "mailbox_full", AFTER_REPEATS),
    (None, 550, "550 5.2.1 The email account that you tried to reach is disabled.",
     "mailbox_disabled", AFTER_REPEATS),
    (None, 554, "554 5.7.1 Message rejected as spam by content filtering", "spam_content", NEVER),
    (None, 550, "550 5.7.1 Virus found in message: Eicar-Test-Signature", "virus", NEVER),
    (None, 552, "552 5.3.4 Message size exceeds fixed limit", "message_too_large", NEVER),
    (None, 550, "550 5.7.1 Relaying denied", "policy", NEVER),
    (None, 451, "451 4.7.1 Greylisted, please try again in 5 minutes", "greylisted", NEVER),
    (None, 421, "421 4.7.0 Too many concurrent SMTP connections; please try again later.",
     "rate_limited", NEVER),
    (None, 553, "553 5.1.8 <bounce@rp.example.com>: Sender address rejected: Domain not "
                "found", "sender_refused", NEVER),
    (None, 550, "550 5.1.6 Recipient addressed has moved; no forwarding address",
     "mailbox_moved", AT_ONCE),
    (None, None, "connection refused by 192.0.2.1:25", "network", NEVER),
    (None, 554, "554 transaction failed", "unknown", NEVER),
    # a DSN's fields: a relay that gave up is not a bad address
    ("4.4.7", None, "smtp; 451 4.4.7 delivery time expired", "expired", AFTER_REPEATS),
    ("4.4.1", None, "retry timeout exceeded", "expired", AFTER_REPEATS),
    # address-level wording in a temporary report is counted, never acted on at once
    ("4.1.1", None, "smtp; 450 4.1.1 <ann@example.net>: Recipient address rejected: User "
                    "unknown", "no_such_user", AFTER_REPEATS),
]


@pytest.mark.parametrize("status,code,text,reason,suppression", CASES)
def test_verdicts(status, code, text, reason, suppression):
    verdict = classify(status=status, code=code, text=text)
    assert (verdict.reason, verdict.suppression) == (reason, suppression)
    assert verdict.about_recipient == REASONS[reason].about_recipient
    assert verdict.as_dict()["reason"] == reason


def test_a_basic_code_next_to_user_unknown_is_address_level():
    # Exchange 2003, old Sendmail and Mail.ru write no enhanced code
    for text in ("550 <ann@example.net>... User unknown", "554 delivery error: dd This user "
                 "doesn't have a yahoo.com account (ann@yahoo.com)",
                 "Sorry, no mailbox here by that name. (#5.1.1)"):
        verdict = classify(text=text)
        assert verdict.reason == "no_such_user" and verdict.suppression == AT_ONCE, text


def test_after_data_and_the_sender_never_suppress_at_once():
    text = "550 Unknown user ann@example.net"
    assert classify(text=text).suppression == AT_ONCE
    assert classify(text=text, after_data=True).suppression == AFTER_REPEATS
    assert classify(text=text + " (in reply to end of DATA command)").suppression == \
        AFTER_REPEATS
    # MAIL FROM refused: whatever it says, not about the recipient
    assert classify(code=550, text="550 5.1.1 user unknown", sender=True).reason == \
        "sender_refused"


def test_no_route_and_category_of_temporary_failures():
    assert classify(text="the domain example.invalid does not exist (NXDOMAIN)",
                    no_route=True).reason == "no_such_domain"
    assert classify(text="example.net publishes a null MX: it accepts no mail",
                    no_route=True).reason == "domain_accepts_no_mail"
    # as before reasons: a 4xx is the transient category unless the mailbox is full
    assert classify(code=421, text="421 4.7.28 unusual rate of unsolicited mail from your "
                                   "IP").category == "transient"
    assert classify(code=452, text="452 4.2.2 over quota").category == "mailbox_full"


def test_codes_are_read_once_and_not_from_addresses():
    assert failures.enhanced_status("smtp; 550 5.1.1 user unknown") == "5.1.1"
    assert failures.enhanced_status("host 10.5.1.1 said: no") is None
    assert failures.reply_code("Remote host said: 552 Error: disk quota exceeded") == 552
    assert failures.reply_code("received 2024 bytes") is None
    # an address named "filtered" or a link says nothing of the reason
    assert classify(code=550, text="550 <filtered@example.net>: Recipient address rejected: "
                                   "User unknown").reason == "no_such_user"
