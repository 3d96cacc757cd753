"""Bulk actions as resumable jobs: release (a recipient still suppressed stays held), retry,
cancel, dry runs, validation; and a job over 10,000 messages whose worker process is killed
mid-way (SIGKILL) finishing exactly once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta

from sqlalchemy import func, select

from chalicelib import clock
from tests.conftest import APP_DATABASE_URL, TEST_DATABASE_URL
from tests.support.sending import message, rcpt, sent_ok, wait_status
from tests.support.sending import later, set_server
from tests.support import Api, make_tenant, unique, wait_for

SERVER = "/api/v2/server"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bulk(api, tenant, status=202, **body) -> dict:
    return Api.data(api.post(f"{SERVER}/messages/bulk", body, server_key=tenant.api_key),
                    status)


def job(api, tenant, job_id: int) -> dict:
    return Api.data(api.get(f"{SERVER}/messages/bulk/{job_id}",
                            server_key=tenant.api_key))["job"]


def wait_done(api, tenant, job_id: int, timeout: float = 60) -> dict:
    return wait_for(lambda: (j := job(api, tenant, job_id))["status"] == "Done" and j, timeout,
                    message=f"bulk job {job_id} to finish")


def test_release_delivers_held_messages_but_a_still_suppressed_recipient_stays_held(
        api, tenant, mx):
    blocked = rcpt("blocked")
    Api.data(api.post(f"{tenant.server_path}/suppressions", {"address": blocked}), 201)
    set_server(api, tenant, mode="Development")
    tag = unique("t")
    dev = [sent_ok(api, tenant, to=[rcpt()], tag=tag)["recipients"][0] for _ in range(3)]
    [suppressed] = sent_ok(api, tenant, to=[blocked], tag=tag)["recipients"]
    [other_tag] = sent_ok(api, tenant, to=[rcpt()])["recipients"]
    # Refused while the server is still in Development mode.
    error = Api.error(api.post(f"{SERVER}/messages/bulk", {"action": "release"},
                               server_key=tenant.api_key), 422, "ValidationError")
    assert "Development" in error["message"]
    set_server(api, tenant, mode="Live")

    assert bulk(api, tenant, 200, action="release", filter={"tag": tag}, dry_run=True) == \
        {"dry_run": True, "action": "release", "matched": 4}
    created = bulk(api, tenant, action="release", filter={"tag": tag, "status": "Held"})["job"]
    assert created["action"] == "release" and created["matched"] == 4
    assert created["status"] in ("Queued", "Running", "Done")
    done = wait_done(api, tenant, created["id"])
    assert (done["done"], done["failed"]) == (3, 1)
    for recipient in dev:
        wait_status(api, tenant, recipient["id"], "Sent")
        assert len(mx.received_for(recipient["rcpt_to"])) == 1
    assert message(api, tenant, suppressed["id"])["status"] == "Held"
    assert message(api, tenant, other_tag["id"])["status"] == "Held"  # not in the filter
    assert mx.received_for(blocked) == []


def test_release_of_messages_held_by_the_send_limit(api, tenant, mx):
    set_server(api, tenant, send_limit_per_hour=1, send_limit_action="hold")
    recipients = sent_ok(api, tenant, to=[rcpt(), rcpt(), rcpt()])["recipients"]
    assert [r["status"] for r in recipients] == ["Pending", "Held", "Held"]
    done = wait_done(api, tenant, bulk(api, tenant, action="release")["job"]["id"])
    assert (done["matched"], done["done"], done["failed"]) == (2, 2, 0)
    for recipient in recipients:
        wait_status(api, tenant, recipient["id"], "Sent")


def test_retry_requeues_hard_failed_messages(api, tenant, mx):
    mx.script = ["rcpt:550 5.1.1 no such user"]
    first = rcpt("hard")
    [failed] = sent_ok(api, tenant, to=[first])["recipients"]
    wait_status(api, tenant, failed["id"], "HardFail")
    Api.data(api.delete(f"{tenant.server_path}/suppressions/{first}"))
    done = wait_done(api, tenant, bulk(api, tenant, action="retry",
                                       filter={"rcpt_to": first.upper()})["job"]["id"])
    assert (done["matched"], done["done"]) == (1, 1)
    wait_status(api, tenant, failed["id"], "Sent")


def test_cancel_scheduled_messages_by_ids_and_time(api, tenant, mx):
    scheduled = [sent_ok(api, tenant, send_at=later(hours=1))["recipients"][0]
                 for _ in range(3)]
    before = clock.now() + timedelta(seconds=1)
    ids = [scheduled[0]["id"], scheduled[2]["id"]]
    done = wait_done(api, tenant, bulk(api, tenant, action="cancel",
                                       filter={"ids": ids, "before": before.isoformat() + "Z"}
                                       )["job"]["id"])
    assert (done["matched"], done["done"]) == (2, 2)
    assert [message(api, tenant, r["id"])["status"] for r in scheduled] == \
        ["Cancelled", "Scheduled", "Cancelled"]
    assert [e["event"] for e in message(api, tenant, ids[0])["events"]] == ["MessageCancelled"]


def test_a_job_covers_only_messages_that_existed_when_it_was_created(api, tenant, db):
    from chalicelib.db.models import Server
    from chalicelib.services.messages import bulk as bulk_actions

    tag = unique("t")
    [early] = sent_ok(api, tenant, tag=tag, send_at=later(hours=1))["recipients"]
    server = db.get(Server, Api.data(api.get(f"{SERVER}/", server_key=tenant.api_key))[
        "server"]["id"])
    created = bulk_actions.create(db, server, "cancel", {"tag": tag})["job"]
    db.info.pop("after_commit", None)  # woken by hand below
    db.commit()
    [late] = sent_ok(api, tenant, tag=tag, send_at=later(hours=1))["recipients"]
    assert bulk_actions.process(created["id"]) == "done"
    assert message(api, tenant, early["id"])["status"] == "Cancelled"
    assert message(api, tenant, late["id"])["status"] == "Scheduled"


def test_bad_requests_and_other_servers_jobs(api, tenant):
    Api.error(api.post(f"{SERVER}/messages/bulk", {"action": "explode"},
                       server_key=tenant.api_key), 422, "ValidationError")
    error = Api.error(api.post(f"{SERVER}/messages/bulk", {"action": "release",
                                                          "filter": {"status": "Sent"}},
                               server_key=tenant.api_key), 422, "ValidationError")
    assert error["field"] == "filter.status"
    error = Api.error(api.post(f"{SERVER}/messages/bulk", {"action": "cancel",
                                                          "filter": {"stream": "nope"}},
                               server_key=tenant.api_key), 422, "ValidationError")
    assert error["field"] == "filter.stream"
    Api.error(api.post(f"{SERVER}/messages/bulk", {}, server_key=tenant.api_key), 400,
              "ParameterMissing")
    created = bulk(api, tenant, action="cancel")["job"]
    other = make_tenant(api)
    Api.error(api.get(f"{SERVER}/messages/bulk/{created['id']}", server_key=other.api_key),
              404, "NotFound")


def _counts(db, server_id: int, tag: str):
    from chalicelib.db.models import Message, MessageEvent

    db.rollback()
    statuses = dict(db.execute(select(Message.status, func.count()).where(
        Message.server_id == server_id, Message.tag == tag).group_by(Message.status)).all())
    events = db.execute(select(func.count(), func.count(func.distinct(MessageEvent.message_id)))
                        .where(MessageEvent.server_id == server_id,
                               MessageEvent.event == "MessageCancelled")).one()
    db.rollback()  # SQLite: never hold the write lock (transactions begin IMMEDIATE)
    return statuses, tuple(events)


def _job_row(reader, job_id: int) -> dict:
    """Read through a plain engine: on SQLite a read then needs no write lock, so polling
    never holds up the worker (the service's sessions begin IMMEDIATE)."""
    from sqlalchemy import text

    with reader.connect() as conn:
        return dict(conn.execute(text("SELECT status, done, locked_by FROM bulk_jobs "
                                      "WHERE id = :id"), {"id": job_id}).mappings().one())


_WORKER = """
import sys, time
from datetime import timedelta
from chalicelib import clock
clock.advance(timedelta(hours=1, seconds=5))
from chalicelib.services.messages import bulk as bulk_actions
apply = bulk_actions.apply
def slowly(*args, **kwargs):  # widen the window between a chunk's changes and its commit
    changed = apply(*args, **kwargs)
    time.sleep(0.15)
    return changed
bulk_actions.apply = slowly
print(bulk_actions.process(int(sys.argv[1])), flush=True)
"""


def test_a_job_over_10000_messages_survives_its_worker_being_killed(api, tenant, db):
    from chalicelib.db.models import BulkJob, Server
    from chalicelib.services.messages import bulk as bulk_actions

    tag = unique("bulk")
    for _ in range(10):  # 10 submissions x 1000 recipients, scheduled far ahead
        Api.data(api.post(f"{SERVER}/messages/batch", {"messages": [{
            "from": f"app@{tenant.domain}", "to": [f"r{i}-{unique('x')}@recipient.example"
                                                   for i in range(1000)],
            "text_body": "x", "tag": tag, "send_at": later(days=29)}]},
            server_key=tenant.api_key))
    server_id = Api.data(api.get(f"{SERVER}/", server_key=tenant.api_key))["server"]["id"]
    assert _counts(db, server_id, tag)[0] == {"Scheduled": 10000}

    # The job is due in an hour, so only the worker process below (its clock an hour ahead)
    # takes it, not the stack's own workers.
    created = bulk_actions.create(db, db.get(Server, server_id), "cancel", {"tag": tag})["job"]
    db.info.pop("after_commit", None)
    db.get(BulkJob, created["id"]).next_attempt_at = clock.now() + timedelta(hours=1)
    db.commit()
    db.rollback()
    assert created["matched"] == 10000

    env = {**os.environ, "DATABASE_URL": APP_DATABASE_URL, "BULK_CHUNK_SIZE": "500",
           "PYTHONPATH": ROOT}
    from sqlalchemy import create_engine

    reader = create_engine(TEST_DATABASE_URL)
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, str(created["id"])], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def progressed():
            return _job_row(reader, created["id"])["done"] >= 1000 or worker.poll() is not None
        wait_for(progressed, 120, interval=0.02, message="the worker to commit some chunks")
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
    killed = _job_row(reader, created["id"])
    reader.dispose()
    assert killed["status"] == "Running" and 1000 <= killed["done"] < 10000, \
        worker.stderr.read()
    assert killed["locked_by"] is not None  # the dead worker's claim
    statuses, events = _counts(db, server_id, tag)
    # Exactly the committed chunks happened: the chunk being worked on rolled back.
    assert statuses["Cancelled"] == killed["done"] and events == (killed["done"],) * 2

    # The claim expires; the stack's sweeper wakes the job and its worker resumes it.
    clock.advance(timedelta(hours=1, seconds=1300))
    finished = wait_done(api, tenant, created["id"], timeout=180)
    assert (finished["matched"], finished["done"], finished["failed"]) == (10000, 10000, 0)
    assert _counts(db, server_id, tag) == ({"Cancelled": 10000}, (10000, 10000))



def test_bulk_filter_edges_are_422s(api, tenant):
    # A number past 64 bits never reaches the model: the JSON parser refuses it (422).
    Api.error(api.post(f"{SERVER}/messages/bulk", {"action": "cancel", "filter": {"ids": [2**64]}},
                       server_key=tenant.api_key), 422, "ValidationError")
    for flt, field in (({"ids": [0]}, "filter.ids[0]"),
                       ({"before": "9999-12-31T23:00:00-05:00"}, "filter.before")):
        error = Api.error(api.post(f"{SERVER}/messages/bulk", {"action": "cancel",
                                                              "filter": flt},
                                   server_key=tenant.api_key), 422, "ValidationError")
        assert error["field"] == field
