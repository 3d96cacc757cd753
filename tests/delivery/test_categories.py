"""Bounce categories from enhanced status codes and reply text (real replies of large
receivers, trimmed)."""
from __future__ import annotations

import pytest

from chalicelib.services.failures import CATEGORIES
from chalicelib.services.failures import classify as verdict_of


def classify(**kwargs):
    return verdict_of(**kwargs).category

CASES = [
    # (status, code, text, expected)
    (None, 550, "550 5.1.1 The email account that you tried to reach does not exist.",
     "unknown_user"),
    (None, 550, "550 5.1.1 <ann@example.net>: Recipient address rejected: User unknown",
     "unknown_user"),
    ("5.1.1", None, "smtp; 550 5.1.1 user unknown", "unknown_user"),
    (None, 550, "550 Requested action not taken: mailbox unavailable", "unknown_user"),
    (None, 550, "550 5.4.1 Recipient address rejected: Access denied", "unknown_user"),
    (None, 552, "552 5.2.2 The email account that you tried to reach is over quota",
     "mailbox_full"),
    (None, 452, "452 4.2.2 The email account that you tried to reach is over quota",
     "mailbox_full"),
    (None, 552, "552 5.3.4 Message size exceeds fixed limit", "message_too_large"),
    (None, 550, "550 5.7.1 Service unavailable; client host [192.0.2.1] blocked using "
                "Spamhaus", "spam_block"),
    (None, 554, "554 5.7.1 Message rejected as spam by content filtering", "spam_block"),
    (None, 550, "550 5.7.26 Unauthenticated email from example.com is not accepted due to "
                "domain's DMARC policy", "policy"),
    (None, 550, "550 5.7.1 Relaying denied", "policy"),
    (None, 421, "421 4.7.0 Try again later, closing connection.", "transient"),
    (None, 451, "451 4.7.1 Greylisted, please try again in 5 minutes", "transient"),
    (None, 421, "421 4.7.28 Our system has detected an unusual rate of unsolicited mail",
     "transient"),
    (None, None, "connection refused by 192.0.2.1:25", "transient"),
    (None, None, "timed out connecting to mx.example.net", "transient"),
    (None, 550, "550 5.1.2 Host unknown: domain not found", "dns"),
    (None, 554, "554 5.4.4 Unable to route", "dns"),
    (None, 554, "554 transaction failed", "other"),
    (None, 550, "550 5.6.0 Content conversion not permitted", "other"),
]


@pytest.mark.parametrize("status,code,text,expected", CASES)
def test_classify(status, code, text, expected):
    assert classify(status=status, code=code, text=text) == expected


def test_no_route_is_dns_whatever_the_text():
    assert classify(text="the domain example.invalid does not exist (NXDOMAIN)",
                    no_route=True) == "dns"
    assert classify(text="example.net publishes a null MX: it accepts no mail") == "dns"


def test_every_answer_is_a_listed_category():
    for status, code, text, _ in CASES:
        assert classify(status=status, code=code, text=text) in CATEGORIES
    assert classify() in CATEGORIES
