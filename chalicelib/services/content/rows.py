"""The columns that name content, and the order things are written in.

Write order: ``put``/``put_many`` store the bytes (fsynced, or the PUT completed) and return
the ``Ref`` (key, size, sha256) the caller then writes in its row; so a crash between leaves an
object no row names (``sweep`` deletes it after CONTENT_SWEEP_GRACE_HOURS), never a row
naming missing bytes. Keys are the bytes' sha256: storing the same bytes again (an SQS
redelivery, a retried request or backfill batch) writes the same one object.

Erasure (``erase``) goes the other way: the rows are marked EXPIRED first, and the objects no
row names any more are deleted once that commits.

Reads (``read``, ``source_bytes``, ``sent_bytes``) fall back to the old ``raw`` column while
a row's key is LEGACY; ``backfill`` moves those rows' bytes into the store in bounded batches
while the service runs (resumable: it picks the rows still LEGACY; idempotent).
"""
from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select, union, update

from chalicelib import clock
from chalicelib.db import after_commit, tenancy
from chalicelib.db.models import Message, MessageRaw, Submission
from chalicelib.services.content.store import get_store

LEGACY = ""  # the bytes are in the row's old ``raw`` column (rows written before 0021)
EXPIRED = "expired"  # erased: the row stays, its content is gone

S, R, M = Submission.__table__, MessageRaw.__table__, Message.__table__


@dataclass(frozen=True)
class Ref:
    key: str
    size: int
    sha256: str


def key_for(sha256: str) -> str:
    """The store key of bytes with this (hex) sha256: two hex digits of prefix, so a
    directory store keeps 256 directories and a listing may start anywhere."""
    return f"{sha256[:2]}/{sha256}"


def _ref(data: bytes) -> Ref:
    sha = hashlib.sha256(data).hexdigest()
    return Ref(key_for(sha), len(data), sha)


def put(data: bytes) -> Ref:
    """Store ``data``; returns once it is durable. Write the Ref in a row only after this."""
    ref = _ref(data)
    get_store().put(ref.key, data)
    return ref


_pool: tuple | None = None  # (the process id it belongs to, the pool)


def _writers():
    """A pool of this process's own (a forked worker process does not inherit its threads)."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        _pool = (os.getpid(), ThreadPoolExecutor(max_workers=16,
                                                 thread_name_prefix="content-put"))
    return _pool[1]


def put_many(items: list[bytes]) -> list[Ref]:
    """Store several at once: the PUTs (or the files' fsyncs) overlap, rather than one
    round trip or disk flush after the other (a batch send, the SMTP gateway's commits)."""
    refs = [_ref(data) for data in items]
    store = get_store()
    todo = {ref.key: data for ref, data in zip(refs, items)}
    if len(todo) > 1:
        list(_writers().map(lambda kv: store.put(*kv), todo.items()))
    else:
        for key, data in todo.items():
            store.put(key, data)
    return refs


def submission_columns(ref: Ref) -> dict:
    """A submission row's columns for stored bytes (``raw`` stays NULL)."""
    return {"content_key": ref.key, "content_sha256": ref.sha256, "size": ref.size}


def read(key: str | None, legacy: bytes | None = None) -> bytes | None:
    """The bytes a row names: its old column's (``legacy``) while LEGACY, None when EXPIRED
    (or no row), else the store's (``store.Missing`` if the object is gone)."""
    if key is None or key == EXPIRED:
        return None
    if key == LEGACY:
        return legacy
    return get_store().get(key)


def source_bytes(db, submission_id: int | None) -> bytes | None:
    """A submission's raw source (None: no such submission, or its content expired)."""
    if submission_id is None:
        return None
    row = db.execute(select(S.c.content_key, S.c.raw).where(S.c.id == submission_id)).first()
    return read(*row) if row is not None else None


def sent_bytes(db, message_id: int) -> tuple[bool, bytes | None]:
    """(whether the message has a sent copy, its bytes: None when expired)."""
    row = db.execute(select(R.c.content_key, R.c.raw).where(R.c.message_id == message_id)).first()
    return (False, None) if row is None else (True, read(*row))


def is_expired(row) -> bool:
    """Whether the content of ``row`` was erased: a Message (marked ``content_expired_at``
    when its content was erased, or its submission's source gone), a Submission or
    MessageRaw (their key). The row itself, with its status and history, stays."""
    if isinstance(row, Message):
        if row.content_expired_at is not None:
            return True
        row = row.submission
    return getattr(row, "content_key", None) == EXPIRED


def erase(db, message_ids: list[int]) -> int:
    """Delete the content of these messages and mark them (``content_expired_at``): each
    one's sent copy at once; their submission's raw source, shared by the submission's other
    recipients, only once none of its messages keeps content (so a sibling still pending or
    kept longer is never left without its bytes). The rows stay, EXPIRED where their bytes
    went. Returns how many of these messages were newly erased (idempotent). The objects go
    once this commits, if no other row names them."""
    ids = sorted(set(message_ids))
    if not ids:
        return 0
    erased = db.execute(update(M).where(M.c.id.in_(ids), M.c.content_expired_at.is_(None))
                        .values(content_expired_at=clock.now())).rowcount
    sub_ids = {sub for sub in db.scalars(select(M.c.submission_id).where(
        M.c.id.in_(ids), M.c.submission_id.is_not(None)))}
    kept = {sub for sub in db.scalars(select(M.c.submission_id).where(
        M.c.submission_id.in_(sub_ids), M.c.content_expired_at.is_(None)))} if sub_ids else set()
    subs = db.execute(select(S.c.id, S.c.content_key).where(
        S.c.id.in_(sub_ids - kept), S.c.content_key != EXPIRED)).all() if sub_ids - kept else []
    sents = db.execute(select(R.c.message_id, R.c.content_key).where(
        R.c.message_id.in_(ids), R.c.content_key != EXPIRED)).all()
    erased_subs, erased_sent = {i for i, _ in subs}, {i for i, _ in sents}
    if erased_subs:
        db.execute(update(S).where(S.c.id.in_(erased_subs))
                   .values(content_key=EXPIRED, content_sha256="", raw=None))
    if erased_sent:
        db.execute(update(R).where(R.c.message_id.in_(erased_sent))
                   .values(content_key=EXPIRED, content_sha256="", raw=None))
    keys = {key for _, key in (*subs, *sents) if key not in (LEGACY, EXPIRED)}
    if keys:
        gone = sorted(keys - _named(db, keys))
        if gone:
            after_commit(db, lambda: get_store().delete(gone))
    return erased


def _named(db, keys) -> set[str]:
    """Which of ``keys`` a row of any tenant names (the same bytes are stored once)."""
    keys = list(keys)
    found: set[str] = set()
    with tenancy.across_tenants(db, "content-store"):
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            found.update(db.scalars(union(
                select(S.c.content_key).where(S.c.content_key.in_(chunk)),
                select(R.c.content_key).where(R.c.content_key.in_(chunk)))))
    return found


def sweep(db, *, grace_hours: float, limit: int = 1000, start_after: str | None = None) -> int:
    """Delete objects no row names, written more than ``grace_hours`` ago (a crash between
    the write and the commit, a failed commit, a leftover temporary file): at most ``limit``
    objects looked at, from a random point of the key space (``start_after``), so that
    runs cover all of it without keeping a cursor. Returns how many were deleted."""
    if start_after is None:
        start_after = f"{random.randrange(256):02x}"
    older_than = clock.now() - timedelta(hours=grace_hours)
    store = get_store()
    with tenancy.across_tenants(db, "content-store"):
        return _sweep(db, store, start_after, older_than, limit)


def _sweep(db, store, start_after: str, older_than, limit: int) -> int:
    keys = list(store.list_older(start_after, older_than, limit))
    if start_after and len(keys) < limit:  # wrap around to the start of the key space
        keys += [k for k in store.list_older("", older_than, limit - len(keys))
                 if k <= start_after]
    if not keys:
        return 0
    gone = sorted(set(keys) - _named(db, keys))
    store.delete(gone)
    return len(gone)


def backfill(db, *, limit: int = 200) -> int:
    """Move up to ``limit`` rows' bytes from their old ``raw`` column into the store (the
    store written first, then the row; a row another run moved meanwhile is left as it is).
    Returns how many rows moved; run it again until it returns 0 (the caller commits)."""
    with tenancy.across_tenants(db, "content-store"):
        return _backfill(db, limit)


def _backfill(db, limit: int) -> int:
    moved = 0
    for table, pk in ((S, S.c.id), (R, R.c.message_id)):
        left = limit - moved
        if left <= 0:
            break
        rows = db.execute(select(pk, table.c.raw).where(
            table.c.content_key == LEGACY, table.c.raw.is_not(None)).order_by(pk)
            .limit(left)).all()
        if not rows:
            continue
        refs = put_many([bytes(raw) for _, raw in rows])
        for (row_id, _), ref in zip(rows, refs):
            db.execute(update(table).where(pk == row_id, table.c.content_key == LEGACY)
                       .values(content_key=ref.key, content_sha256=ref.sha256, raw=None,
                               **({"size": ref.size} if table is R else {})))
        moved += len(rows)
    return moved


def legacy_left(db) -> int:
    """How many rows still keep their bytes in the old columns (0: the backfill is done and
    a later release may drop them)."""
    from sqlalchemy import func

    with tenancy.across_tenants(db, "content-store"):
        return sum(db.scalar(select(func.count()).select_from(t).where(
            t.c.content_key == LEGACY, t.c.raw.is_not(None))) for t in (S, R))
