"""Data removal (a data subject's request): an address's messages lose their content and
personal fields on a server, an organization or the installation; the statistics stay; the
suppression is kept as a hash that still holds a send; the audit trail records it without
the address; organization admins act only in their organization."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from chalicelib import clock
from chalicelib.db.models import Message, MessageEvent, Submission, Suppression
from chalicelib.services import content
from chalicelib.services.privacy.removal import REMOVED
from chalicelib.services.suppressions import entries
from tests.support.accounts import ADMIN, events, make_user
from tests.support.sending import rfc3339
from tests.support.sending import message, rcpt, sent_ok, wait_status
from tests.support import Api, all_tenants, make_tenant

SERVER = "/api/v2/server"


def _stats(api, tenant, window: dict) -> dict:
    return Api.data(api.get(f"{SERVER}/stats", server_key=tenant.api_key,
                            params=window))["stats"]


def _sent(api, tenant, to: str, **fields) -> int:
    [r] = sent_ok(api, tenant, to=[to], **fields)["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    return r["id"]


def test_removal_on_a_server_keeps_the_record_and_a_hashed_suppression(api, tenant, mx):
    victim, other = rcpt("victim"), rcpt("other")
    removed_id = _sent(api, tenant, victim, subject="Your order", metadata={"customer": 7})
    kept_id = _sent(api, tenant, other, subject="Your order")
    Api.data(api.post(tenant.server_path + "/suppressions",
                      {"address": victim, "reason": "Unsubscribe"}), 201)
    window = {"from": rfc3339(clock.now() - timedelta(days=1)),
              "to": rfc3339(clock.now() + timedelta(hours=1))}
    stats = _stats(api, tenant, window)

    done = Api.data(api.post(tenant.server_path + "/data_removal",
                             {"address": victim.upper()}))["data_removal"]
    assert done["scope"] == "server" and done["servers"] == 1
    assert (done["messages"], done["content_erased"], done["suppressions_hashed"]) == (1, 1, 1)
    assert done["events"] >= 1 and done["deliveries"] >= 1
    assert done["address_hash"] == entries.hashed(victim)

    gone = message(api, tenant, removed_id)
    assert gone["rcpt_to"] == REMOVED and gone["subject"] is None and gone["metadata"] is None
    assert gone["status"] == "Sent" and gone["content_expired_at"] is not None
    Api.error(api.get(f"{SERVER}/messages/{removed_id}/raw", server_key=tenant.api_key),
              410, "ContentExpired")
    assert message(api, tenant, kept_id)["rcpt_to"] == other
    Api.data(api.get(f"{SERVER}/messages/{kept_id}/raw", server_key=tenant.api_key))
    found = Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                             params={"query": victim}))["messages"]
    assert found == []
    assert _stats(api, tenant, window) == stats
    with all_tenants() as db:
        details = list(db.scalars(select(MessageEvent.details).where(
            MessageEvent.message_id == removed_id)))
        assert details and all(d is None for d in details)
        rows = list(db.scalars(select(Suppression.address).where(
            Suppression.address.in_([victim, entries.hashed(victim)]))))
        assert rows == [entries.hashed(victim)]
        submission_id = db.scalar(select(Message.submission_id).where(Message.id == removed_id))
        assert content.source_bytes(db, submission_id) is None  # erased from the store
        assert db.get(Submission, submission_id).content_key == content.EXPIRED
    # The address is not listed, yet a send to it is held by its hashed entry.
    listed = Api.data(api.get(tenant.server_path + "/suppressions",
                              params={"query": victim}))["suppressions"]
    assert listed == []
    [again] = sent_ok(api, tenant, to=[victim])["recipients"]
    assert message(api, tenant, again["id"])["status"] == "Held"

    # The audit trail says what was done, by its hash, never the address.
    [entry] = [e for e in events(api, event="data_removed")
               if done["address_hash"] in (e["details"] or "")]
    assert victim not in entry["details"] and "server" in entry["details"]
    # Idempotent: once more removes only the message sent since (held), nothing twice.
    second = Api.data(api.post(tenant.server_path + "/data_removal",
                               {"address": victim}))["data_removal"]
    assert (second["messages"], second["suppressions_hashed"]) == (1, 0)
    third = Api.data(api.post(tenant.server_path + "/data_removal",
                              {"address": victim}))["data_removal"]
    assert third["messages"] == 0 and third["content_erased"] == 0


def test_scopes_and_who_may_remove(api, mx):
    admin, member = make_user(api), make_user(api)
    ours, theirs = make_tenant(api), make_tenant(api)
    second = Api.data(api.post(f"{ADMIN}/organizations/{ours.org}/servers",
                               {"name": "Second"}), 201)["server"]["permalink"]
    for person, role in ((admin, "admin"), (member, "member")):
        Api.data(api.post(f"{ADMIN}/organizations/{ours.org}/members",
                          {"user_id": person.id, "role": role}), 201)
    victim = rcpt("victim")
    in_ours, in_theirs = _sent(api, ours, victim), _sent(api, theirs, victim)
    body = {"address": victim}

    # A member may not; an admin of one organization cannot reach another's, nor everyone's.
    Api.error(api.post(f"{ADMIN}/organizations/{ours.org}/data_removal", body,
                       bearer=member.token), 403, "Forbidden")
    Api.error(api.post(f"{ADMIN}/organizations/{theirs.org}/data_removal", body,
                       bearer=admin.token), 404, "NotFound")
    Api.error(api.post(f"{theirs.server_path}/data_removal", body, bearer=admin.token),
              404, "NotFound")
    Api.error(api.post(f"{ADMIN}/data_removal", body, bearer=admin.token), 403, "Forbidden")
    assert message(api, ours, in_ours)["rcpt_to"] == victim

    done = Api.data(api.post(f"{ADMIN}/organizations/{ours.org}/data_removal", body,
                             bearer=admin.token))["data_removal"]
    assert (done["scope"], done["servers"], done["messages"]) == ("organization", 2, 1)
    assert second  # the organization's second server was in scope
    assert message(api, ours, in_ours)["rcpt_to"] == REMOVED
    assert message(api, theirs, in_theirs)["rcpt_to"] == victim

    # An instance admin removes it everywhere.
    root = make_user(api, admin=True)
    everywhere = Api.data(api.post(f"{ADMIN}/data_removal", body,
                                   bearer=root.token))["data_removal"]
    assert everywhere["scope"] == "installation" and everywhere["messages"] == 1
    assert message(api, theirs, in_theirs)["rcpt_to"] == REMOVED
    Api.error(api.post(f"{ADMIN}/data_removal", {"address": "not an address"}), 422,
              "ValidationError")


def test_mail_from_the_address_that_arrived_is_removed_too(stack, api, tenant):
    from tests.support.smtp import make_route, plain_client, simple_mail
    from tests.support import unique

    make_route(api, tenant, "held", mode="hold", endpoint=None)
    sender, subject = f"{unique('writer')}@sender.example", unique("held")
    with plain_client(stack.smtp_port) as client:
        client.sendmail(sender, [f"held@{tenant.domain}"],
                        simple_mail(sender, f"held@{tenant.domain}", subject))
    [found] = Api.data(api.get(f"{SERVER}/inbound", server_key=tenant.api_key,
                               params={"query": subject}))["messages"]
    assert found["mail_from"] == sender
    done = Api.data(api.post(tenant.server_path + "/data_removal",
                             {"address": sender}))["data_removal"]
    assert (done["messages"], done["content_erased"]) == (1, 1)
    shown = Api.data(api.get(f"{SERVER}/inbound/{found['id']}",
                             server_key=tenant.api_key))["message"]
    assert shown["mail_from"] == REMOVED and shown["subject"] is None
    assert shown["content_expired_at"] is not None
    # Nothing is left to hand over, nor to read.
    Api.error(api.post(f"{SERVER}/inbound/{found['id']}/bypass", server_key=tenant.api_key),
              410, "ContentExpired")
    Api.error(api.get(f"{SERVER}/messages/{found['id']}/raw", server_key=tenant.api_key),
              410, "ContentExpired")
