"""Bounce categories end to end: failed attempts against a scripted MX and DSNs arriving over
SMTP carry a category in the message, delivery and bounce records, counted in stats."""
from __future__ import annotations

from tests.support.smtp import plain_client
from tests.support.inbound import dsn
from tests.support.sending import message, rcpt, sent_ok, wait_status
from tests.support import Api, wait_for

SERVER = "/api/v2/server"


def stats(api, tenant) -> dict:
    return Api.data(api.get(f"{SERVER}/stats", server_key=tenant.api_key))["stats"]


def test_failed_attempts_and_messages_carry_categories(api, tenant, mx):
    mx.script = ["rcpt:550 5.1.1 <x>: Recipient address rejected: User unknown",
                 "rcpt:554 5.7.1 Service unavailable; client host blocked using Spamhaus",
                 "rcpt:452 4.2.2 Mailbox full, try again later"]
    unknown, full, blocked = rcpt("unknown"), rcpt("full"), rcpt("blocked")
    ids = {}
    # The soft failure last: its retry (at once, TIME_SCALE) must find the script empty.
    for to in (unknown, blocked, full):  # one at a time: each takes its scripted answer
        [r] = sent_ok(api, tenant, to=[to])["recipients"]
        ids[to] = r["id"]
        wait_for(lambda: message(api, tenant, r["id"])["deliveries"], 20,
                 message="first attempt")
    gone = wait_status(api, tenant, ids[unknown], "HardFail")
    assert gone["bounce_category"] == "unknown_user" and gone["bounce_reason"] == "no_such_user"
    assert gone["deliveries"][0]["category"] == "unknown_user"
    assert gone["deliveries"][0]["reason"] == "no_such_user"
    assert gone["deliveries"][0]["about_recipient"] is True
    refused = wait_status(api, tenant, ids[blocked], "HardFail")
    assert refused["bounce_category"] == "spam_block" and refused["bounce_reason"] == "block_list"
    assert refused["deliveries"][0]["about_recipient"] is False
    # The suppression follows the reason: the unknown user is suppressed, the recipient
    # refused because our IP is on a block list is not (any 5xx used to suppress).
    listed = [s["address"] for s in Api.data(api.get(tenant.server_path + "/suppressions"))[
        "suppressions"]]
    assert unknown in listed and blocked not in listed
    # The soft failure carried its category; the retry then succeeded (and it stays).
    delivered = wait_status(api, tenant, ids[full], "Sent")
    first, last = delivered["deliveries"][-1], delivered["deliveries"][0]
    categories = sorted([first["category"] or "", last["category"] or ""])
    assert categories == ["", "mailbox_full"]
    assert delivered["bounce_category"] == "mailbox_full"  # why it was late
    found = stats(api, tenant)
    assert found["bounce_categories"] == {"spam_block": 1, "unknown_user": 1}
    # every failed attempt: the two hard failures and the soft one that was retried
    assert found["failed_attempt_categories"] == {"mailbox_full": 1, "spam_block": 1,
                                                  "unknown_user": 1}
    [default_stream] = found["streams"]
    assert default_stream["bounce_categories"] == {"spam_block": 1, "unknown_user": 1}
    listed = Api.data(api.get(f"{SERVER}/messages", params={"bounce_category": "spam_block"},
                              server_key=tenant.api_key))["messages"]
    assert [m["id"] for m in listed] == [ids[blocked]]
    Api.error(api.get(f"{SERVER}/messages", params={"bounce_category": "nope"},
                      server_key=tenant.api_key), 422, "ValidationError")


def test_a_dsn_is_categorised(stack, api, tenant, mx):
    to = rcpt("dsn")
    [r] = sent_ok(api, tenant, to=[to])["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    [received] = mx.received_for(to)
    report = dsn(received.mail_from, to, status="5.2.2",
                 diagnostic="smtp; 552 5.2.2 <{rcpt}>: mailbox is over quota")
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received.mail_from], report)
    [bounce] = Api.data(api.get(f"{SERVER}/bounces", server_key=tenant.api_key))["bounces"]
    assert bounce["category"] == "mailbox_full" and bounce["bounce_type"] == "hard"
    original = message(api, tenant, r["id"])
    assert original["status"] == "Bounced" and original["bounce_category"] == "mailbox_full"
    assert stats(api, tenant)["bounce_categories"] == {"mailbox_full": 1}
