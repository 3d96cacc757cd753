"""What the reputation guard counts, through the running stack (issue 34, item 5): a
refusal of the address at RCPT and a DSN that says the address is bad are bounces, once per
message (a DSN sent twice, or after the refusal, counts once); a feedback report is a
complaint (a not-spam one is not); a block-list refusal, a mailbox full and a refusal after
DATA are not bounces of the address. ``sent`` is the outcomes the workers counted."""
from __future__ import annotations

from tests.inbound.postfix_dsn import postfix_dsn
from tests.support.inbound import arf, delivered
from tests.support.reputation import reputation
from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support.smtp import plain_client
from tests.support import Api


def _refused(api, tenant, mx, reply: str) -> dict:
    mx.script = [reply]
    [r] = sent_ok(api, tenant, to=[rcpt("refused")])["recipients"]
    return wait_status(api, tenant, r["id"], "HardFail")


def _send(stack, to: str, raw: bytes) -> None:
    with plain_client(stack.smtp_port) as client:
        assert client.sendmail("", [to], raw) == {}


def test_what_counts_toward_the_rates(api, stack, tenant, mx):
    _refused(api, tenant, mx, "rcpt:550 5.1.1 <x>: Recipient address rejected: User unknown")
    _refused(api, tenant, mx, "rcpt:550 5.7.1 Client host [127.0.0.1] blocked using "
                              "zen.spamhaus.org")
    _refused(api, tenant, mx, "rcpt:552 5.2.2 Mailbox full")
    _refused(api, tenant, mx, "550 5.1.1 User unknown")  # after DATA: a filter as often
    shown = reputation(api, tenant)
    assert (shown["sent"], shown["delivered"], shown["bounces"]) == (4, 0, 1)
    # A carrier's filter wording (KDDI's "550 : User unknown"): counted as a bounce of the
    # address exactly when the suppression policy suppresses it at once
    doubtful = _refused(api, tenant, mx, "rcpt:550 : User unknown")
    suppressed = bool(Api.data(api.get(tenant.server_path + "/suppressions",
                                       params={"query": doubtful["rcpt_to"]}))["suppressions"])
    assert reputation(api, tenant)["bounces"] == 1 + suppressed
    outcomes_so_far = 5

    # A DSN for a delivered message: a bounce of the address; the same DSN again counts once
    first, received, stored = delivered(api, tenant, mx)
    dsn = postfix_dsn(received.mail_from, first["rcpt_to"], received.data)
    _send(stack, received.mail_from, dsn)
    _send(stack, received.mail_from, dsn)
    shown = reputation(api, tenant)
    assert (shown["sent"], shown["delivered"], shown["bounces"]) == \
        (outcomes_so_far + 1, 1, 2 + suppressed)

    # A complaint, once per message; a not-spam report is none
    second, received, stored = delivered(api, tenant, mx)
    report = arf(to=received.mail_from, original=stored)
    _send(stack, received.mail_from, report)
    _send(stack, received.mail_from, report)
    third, received, stored = delivered(api, tenant, mx)
    _send(stack, received.mail_from, arf(to=received.mail_from, original=stored,
                                         feedback_type="not-spam"))
    shown = reputation(api, tenant)
    assert (shown["delivered"], shown["complaints"], shown["complaint_rate"]) == \
        (3, 1, 33.333)
    assert shown["state"] == "ok" and not shown["enough_volume"]  # 7 of 1000 messages
