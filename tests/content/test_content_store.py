"""Message content in the content store (issue 35 items 1-3): rows name their bytes by key,
size and sha256; the bytes are written before the row; an orphan is swept, a named object
never; rows written before the store read from their old column until the backfill moves
them; erasure leaves the rows, marked expired. The file store by default, the S3 adapter on
moto (``test_s3_*``)."""
from __future__ import annotations

import base64
import hashlib
import os
from types import SimpleNamespace

import pytest
from sqlalchemy import select, text, update

from chalicelib.db.models import Message, MessageRaw, Submission
from chalicelib.services import content
from chalicelib.services.content import store as content_store
from chalicelib.services.organizations import credentials
from chalicelib.services.sending import submission
from tests.support.sending import sent_ok, wait_status
from tests.support import Api, all_tenants, unique

SERVER = "/api/v2/server"


@pytest.fixture
def server(db, tenant):
    """The tenant's server (id, domain_name), the session's transaction ended (SQLite: no
    write lock held while other sessions write)."""
    found = SimpleNamespace(id=credentials.authenticate_key(db, tenant.api_key, "API").server.id,
                            domain_name=tenant.domain)
    db.commit()
    return found


@pytest.fixture
def private_store(tmp_path):
    """A store of this test's own, so a sweep sees only this test's objects."""
    store = content_store.FileStore(str(tmp_path / "content"))
    content.set_store(store)
    yield store
    content.set_store(None)


def _raw(server, body: bytes) -> bytes:
    return (f"From: App <app@{server.domain_name}>\r\nTo: x@example.org\r\nSubject: c\r\n\r\n"
            ).encode() + body


class CommitFailed(Exception):
    pass


def _submit(server, rcpt: str, body: bytes, *, fail: bool = False) -> dict:
    """A submission in a session of its own, committed (or, with ``fail``, its commit
    failing after the bytes were stored)."""
    from chalicelib.db.models import Server

    with all_tenants() as db:
        own = db.get(Server, server.id)
        own.domain_name = server.domain_name
        result = submission.submit_raw(db, own, mail_from="", rcpt_to=[rcpt],
                                       raw=_raw(server, body))
        if fail:
            raise CommitFailed
    return result


def _objects(store) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), store.root)
                  for d, _, files in os.walk(store.root) for f in files
                  if not os.path.relpath(d, store.root).startswith("tmp"))


def test_a_sent_message_keeps_its_bytes_in_the_store_and_reads_back(api, tenant, mx):
    [r] = sent_ok(api, tenant, subject="Stored", text_body="in the store")["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    got = base64.b64decode(Api.data(api.get(f"{SERVER}/messages/{r['id']}/raw",
                                            server_key=tenant.api_key))["raw_base64"])
    assert b"DKIM-Signature:" in got
    with all_tenants() as db:
        message = db.get(Message, r["id"])
        source = db.get(Submission, message.submission_id)
        sent = db.get(MessageRaw, r["id"])
        rows = [(source.content_key, source.content_sha256, source.size,
                 db.scalar(select(Submission.raw).where(Submission.id == source.id))),
                (sent.content_key, sent.content_sha256, sent.size, sent.raw)]
    store = content.get_store()
    for key, sha, size, legacy in rows:
        data = store.get(key)
        assert legacy is None, "no bytes in the database"
        assert hashlib.sha256(data).hexdigest() == sha and len(data) == size and sha in key
    assert store.get(rows[1][0]) == got  # GET .../raw answers the stored signed copy


def test_the_same_bytes_are_stored_once(private_store):
    data = os.urandom(2000)
    first, again = content.put(data), content.put(data)
    assert first == again
    assert _objects(private_store) == [first.key]
    assert content.put_many([data, data, b"other"])[0] == first
    assert len(_objects(private_store)) == 2


def test_a_file_store_makes_its_directories_when_they_are_missing(private_store):
    """A fresh store has no directories yet, and one may go after it wrote (an operator
    emptying it): a put makes what is missing instead of asking before every write."""
    import shutil

    assert not os.path.exists(private_store.root)
    first = content.put(b"first object")
    shutil.rmtree(os.path.join(private_store.root, first.key.split("/")[0]))
    shutil.rmtree(os.path.join(private_store.root, "tmp"))
    second = content.put(b"second object")
    again = content.put(b"first object")
    assert again == first
    assert _objects(private_store) == sorted([first.key, second.key])
    assert content.read(first.key) == b"first object"
    assert content.read(second.key) == b"second object"


def _development(db, server) -> None:
    """Held, never delivered: no attempt writes a sent copy while the test looks."""
    from chalicelib.db.models import Server

    db.execute(update(Server).where(Server.id == server.id).values(mode="Development"))
    db.commit()


def test_the_ops_command_backfills_until_none_is_left(db, server, private_store):
    from chalicelib import deploy_tasks

    made = _legacy_rows(db, server.id, 2)
    db.commit()
    assert content.legacy_left(db) >= 4
    db.commit()
    report = deploy_tasks.content_backfill()
    assert report["left"] == 0 and report["moved"] >= 4
    for sub_id, message_id, source, sent in made:
        assert content.source_bytes(db, sub_id) == source
        assert content.sent_bytes(db, message_id) == (True, sent)


def test_a_failed_commit_leaves_an_orphan_that_the_sweep_deletes(db, server, private_store):
    _development(db, server)  # no delivery writes a signed copy while the test counts
    kept = _submit(server, "kept@example.org", b"kept\r\n")
    with pytest.raises(CommitFailed):  # after the bytes were written: an object no row names
        _submit(server, "lost@example.org", os.urandom(64).hex().encode() + b"\r\n", fail=True)
    named = db.scalar(select(Submission.content_key)
                      .where(Submission.id == kept["message_id"]))
    assert len(_objects(private_store)) == 2
    # Within the grace period nothing goes (its row may be about to commit)...
    assert content.sweep(db, grace_hours=1) == 0
    assert len(_objects(private_store)) == 2
    # ...after it, the orphan goes and the named object stays, from any starting point.
    assert content.sweep(db, grace_hours=0, start_after="ff") == 1
    assert _objects(private_store) == [named]
    assert content.source_bytes(db, kept["message_id"]).endswith(b"kept\r\n")


def test_an_object_written_again_starts_its_grace_period_over(private_store):
    ref = content.put(b"written twice")
    path = os.path.join(private_store.root, ref.key)
    os.utime(path, (1, 1))  # written long ago...
    content.put(b"written twice")  # ...and again now (a retried request): not an orphan yet
    assert os.path.getmtime(path) > 1


def _legacy_rows(db, server_id: int, n: int) -> list[tuple[int, int, bytes, bytes]]:
    """Rows as written before 0021: the bytes in ``raw``, the key empty."""
    made = []
    for i in range(n):
        source, sent = os.urandom(300) + b"source", os.urandom(300) + b"sent"
        sub_id = db.execute(text(
            "INSERT INTO submissions (server_id, size, raw, created_at) "
            "VALUES (:s, :n, :r, CURRENT_TIMESTAMP) RETURNING id"),
            {"s": server_id, "n": len(source), "r": source}).scalar()
        message = Message(server_id=server_id, submission_id=sub_id, token=unique("legacy")[:32],
                          rcpt_to=f"legacy{i}@example.org", mail_from="a@example.org",
                          status="Sent")
        db.add(message)
        db.flush()
        db.execute(text("INSERT INTO message_raws (message_id, raw) VALUES (:m, :r)"),
                   {"m": message.id, "r": sent})
        made.append((sub_id, message.id, source, sent))
    db.commit()
    return made


def test_the_backfill_moves_old_rows_in_batches_and_reads_never_change(db, server,
                                                                       private_store):
    made = _legacy_rows(db, server.id, 3)
    for sub_id, message_id, source, sent in made:  # read from the old column meanwhile
        assert content.source_bytes(db, sub_id) == source
        assert content.sent_bytes(db, message_id) == (True, sent)
    moved = content.backfill(db, limit=4)  # a bounded batch; the rest waits for the next
    db.commit()
    assert moved == 4
    while content.backfill(db, limit=4):  # resumable: picks up the rows still left
        db.commit()
    db.commit()
    assert content.backfill(db, limit=4) == 0  # idempotent: nothing left to move
    for sub_id, message_id, source, sent in made:
        key, legacy = db.execute(select(Submission.content_key, Submission.raw)
                                 .where(Submission.id == sub_id)).one()
        assert key and legacy is None
        assert content.source_bytes(db, sub_id) == source
        assert content.sent_bytes(db, message_id) == (True, sent)
        row = db.get(MessageRaw, message_id)
        assert (row.size, row.raw) == (len(sent), None)


def test_erase_deletes_the_bytes_and_leaves_the_rows_marked_expired(db, server,
                                                                    private_store):
    _development(db, server)
    gone = _submit(server, "gone@example.org", b"erase me\r\n")
    same = _submit(server, "same@example.org", b"shared\r\n")
    twin = _submit(server, "twin@example.org", b"shared\r\n")
    [legacy] = _legacy_rows(db, server.id, 1)
    ids = [gone["recipients"][0]["id"], same["recipients"][0]["id"], legacy[1]]
    source_key = db.scalar(select(Submission.content_key)
                           .where(Submission.id == gone["message_id"]))
    shared_key = db.scalar(select(Submission.content_key)
                           .where(Submission.id == twin["message_id"]))
    db.commit()  # (SQLite: no reader holds the file while another session writes)
    with all_tenants() as other:  # the objects go once the rows' marks commit
        assert content.erase(other, ids) == 3
    with all_tenants() as other:
        assert content.erase(other, ids) == 0  # already erased
    db.rollback()  # a fresh snapshot
    keys = _objects(private_store)
    assert source_key not in keys
    assert shared_key in keys, "another row still names the same bytes"
    for message_id in ids:
        message = db.get(Message, message_id)
        assert message is not None  # the record stays
        assert content.is_expired(message)
        assert content.source_bytes(db, message.submission_id) is None
    assert content.sent_bytes(db, legacy[1]) == (True, None)
    assert not content.is_expired(db.get(Message, twin["recipients"][0]["id"]))
    assert content.source_bytes(db, twin["message_id"]).endswith(b"shared\r\n")


def test_an_expired_message_answers_content_expired(api, tenant, db, server, private_store):
    _development(db, server)
    result = _submit(server, "exp@example.org", b"soon gone\r\n")
    message_id = result["recipients"][0]["id"]
    with all_tenants() as other:
        assert content.erase(other, [message_id]) == 1
    Api.error(api.get(f"{SERVER}/messages/{message_id}/raw", server_key=tenant.api_key),
              410, "ContentExpired")


# -- the S3 adapter, on moto ---------------------------------------------------------------

@pytest.fixture
def s3_store():
    moto = pytest.importorskip("moto")
    with moto.mock_aws():
        import boto3

        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="content-test")
        store = content_store.S3Store("content-test", client=client)
        content.set_store(store)
        yield store, client
        content.set_store(None)


def test_s3_store_puts_reads_lists_and_deletes(s3_store):
    store, client = s3_store
    data = os.urandom(5000)
    ref = content.put(data)
    content.put(data)
    refs = content.put_many([data, b"a", b"b"])  # in parallel
    assert refs[0] == ref
    assert client.list_objects_v2(Bucket="content-test")["KeyCount"] == 3
    assert content.read(ref.key) == data
    with pytest.raises(content.Missing):
        store.get("00/" + "0" * 64)
    from datetime import timedelta

    from chalicelib import clock
    listed = list(store.list_older("", clock.now() + timedelta(hours=1), 10))
    assert sorted(listed) == sorted({r.key for r in refs})
    assert list(store.list_older("", clock.now() - timedelta(hours=1), 10)) == []
    store.delete([ref.key])
    assert client.list_objects_v2(Bucket="content-test")["KeyCount"] == 2


def test_s3_sweep_and_backfill(db, server, s3_store):
    store, client = s3_store
    made = _legacy_rows(db, server.id, 2)
    while content.backfill(db, limit=3):
        db.commit()
    db.commit()
    assert client.list_objects_v2(Bucket="content-test")["KeyCount"] == 4
    content.put(b"an orphan")
    assert content.sweep(db, grace_hours=0, start_after="") == 1
    assert client.list_objects_v2(Bucket="content-test")["KeyCount"] == 4
    for sub_id, message_id, source, sent in made:
        assert content.source_bytes(db, sub_id) == source
        assert content.sent_bytes(db, message_id) == (True, sent)
