"""Content retention: after a server's content_retention_days its messages' content (raw
source, signed copy) is erased by the retention run; the record (status, events, attempts,
statistics) stays, and reads of the content answer ContentExpired (410)."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from chalicelib import clock
from chalicelib.db.models import MessageRaw, Submission
from chalicelib.services import content
from chalicelib.workers import retention
from tests.support.sending import rfc3339
from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support import Api, all_tenants

SERVER = "/api/v2/server"


def _stats(api, tenant, window: dict) -> dict:
    return Api.data(api.get(f"{SERVER}/stats", server_key=tenant.api_key,
                            params=window))["stats"]


def test_the_setting_is_validated_against_the_records_retention(api, tenant):
    server = Api.data(api.get(tenant.server_path))["server"]
    assert server["content_retention_days"] < server["message_retention_days"]
    err = Api.error(api.patch(tenant.server_path, {"content_retention_days": 61,
                                                   "message_retention_days": 60}),
                    422, "ValidationError")
    assert err["field"] == "content_retention_days"
    got = Api.data(api.patch(tenant.server_path, {"content_retention_days": 5}))["server"]
    assert got["content_retention_days"] == 5
    # Keeping the record less long than the content lowers the content's with it.
    got = Api.data(api.patch(tenant.server_path, {"message_retention_days": 3}))["server"]
    assert (got["message_retention_days"], got["content_retention_days"]) == (3, 3)


def test_content_is_erased_after_its_retention_and_the_record_stays(api, tenant, mx):
    Api.data(api.patch(tenant.server_path, {"content_retention_days": 10}))
    a, b = rcpt("a"), rcpt("b")
    sent = sent_ok(api, tenant, to=[a, b], subject="Invoice")
    ids = [r["id"] for r in sent["recipients"]]
    for message_id in ids:
        wait_status(api, tenant, message_id, "Sent")
    # A Held message (a suppressed recipient) is not pending: its content expires too.
    held_to = rcpt("held")
    Api.data(api.post(tenant.server_path + "/suppressions", {"address": held_to}), 201)
    [held] = sent_ok(api, tenant, to=[held_to])["recipients"]
    wait_status(api, tenant, held["id"], "Held")
    window = {"from": rfc3339(clock.now() - timedelta(days=1)),
              "to": rfc3339(clock.now() + timedelta(hours=1))}
    stats = _stats(api, tenant, window)
    history = Api.data(api.get(f"{SERVER}/messages/{ids[0]}/deliveries",
                               server_key=tenant.api_key))

    clock.advance(timedelta(days=9))
    retention.run()
    Api.data(api.get(f"{SERVER}/messages/{ids[0]}/raw", server_key=tenant.api_key))

    clock.advance(timedelta(days=2))
    retention.run()
    for message_id in ids:
        err = Api.error(api.get(f"{SERVER}/messages/{message_id}/raw",
                                server_key=tenant.api_key), 410, "ContentExpired")
        assert "expired" in err["message"]
        Api.error(api.get(f"{SERVER}/messages/{message_id}/content",
                          server_key=tenant.api_key), 410, "ContentExpired")
        record = Api.data(api.get(f"{SERVER}/messages/{message_id}",
                                  server_key=tenant.api_key))["message"]
        assert record["status"] == "Sent" and record["subject"] == "Invoice"
        assert record["content_expired_at"] is not None
    assert Api.data(api.get(f"{SERVER}/messages/{ids[0]}/deliveries",
                            server_key=tenant.api_key)) == history
    assert _stats(api, tenant, window) == stats
    # It cannot be sent again: there is nothing left to send.
    Api.error(api.post(f"{SERVER}/messages/{held['id']}/retry", server_key=tenant.api_key),
              410, "ContentExpired")
    with all_tenants() as db:
        assert content.source_bytes(db, sent["message_id"]) is None
        assert db.get(Submission, sent["message_id"]).content_key == content.EXPIRED
        assert set(db.scalars(select(MessageRaw.content_key).where(
            MessageRaw.message_id.in_(ids)))) <= {content.EXPIRED}
        assert all(content.sent_bytes(db, i)[1] is None for i in ids)
    # A newer message keeps its content.
    [fresh] = sent_ok(api, tenant)["recipients"]
    wait_status(api, tenant, fresh["id"], "Sent")
    Api.data(api.get(f"{SERVER}/messages/{fresh['id']}/raw", server_key=tenant.api_key))
