"""Requeueing an outgoing message: a HardFail or Held message goes out again on request;
anything else, or another server's message, is refused."""
from __future__ import annotations

from tests.support.sending import SERVER, rcpt, sent_ok, wait_status
from tests.support import Api, make_tenant


def test_a_hard_failed_message_is_delivered_after_unsuppress_and_retry(api, tenant, mx):  # noqa: F811
    # An unknown user: the reply was "550 5.1.1 mailbox full for now", which suppressed only
    # because any 5xx did; a full mailbox now suppresses only when repeated over days
    # (services/suppressions/policy.py), so the address-level reply this test needs is this.
    mx.script = ["rcpt:550 5.1.1 no such user"]
    to = rcpt("retry")
    [r] = sent_ok(api, tenant, to=[to])["recipients"]
    wait_status(api, tenant, r["id"], "HardFail")

    # Still suppressed: the retry is accepted but the worker holds it again.
    retried = Api.data(api.post(f"{SERVER}/messages/{r['id']}/retry", server_key=tenant.api_key))
    assert retried["message"]["status"] == "Pending"
    wait_status(api, tenant, r["id"], "Held")
    assert not mx.received_for(to)

    Api.data(api.delete(f"{tenant.server_path}/suppressions/{to}"))
    Api.data(api.post(f"{SERVER}/messages/{r['id']}/retry", server_key=tenant.api_key))
    shown = wait_status(api, tenant, r["id"], "Sent")
    assert len(mx.received_for(to)) == 1
    assert [e["event"] for e in shown["events"]][-1] == "MessageSent"


def test_only_held_or_failed_outgoing_messages_of_your_server_can_be_retried(api, tenant, mx):  # noqa: F811
    [r] = sent_ok(api, tenant)["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    error = Api.error(api.post(f"{SERVER}/messages/{r['id']}/retry", server_key=tenant.api_key),
                      422, "ValidationError")
    assert "Sent" in error["message"]
    other = make_tenant(api)
    Api.error(api.post(f"{SERVER}/messages/{r['id']}/retry", server_key=other.api_key),
              404, "NotFound")
    Api.error(api.post(f"{SERVER}/messages/999999999/retry", server_key=tenant.api_key),
              404, "NotFound")
