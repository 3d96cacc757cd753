"""Claiming due outgoing messages for a delivery attempt, and why a wake-up found nothing to
claim.

The claim is one ``UPDATE ... RETURNING`` (db/claims.py) whose RETURNING also reads what the
attempt needs: the source, the bytes of an earlier attempt, the signing domain and its key, a
stale InFlight attempt, an active suppression, whether the stream wants List-Unsubscribe and
the IP pool to send from.
So the claim and its reads are ONE round trip; the row it returns works where a Message is
expected (its columns are named like Message's attributes).

A wake-up names a row, not a tenant: the claim (and the closer look when it fails) finds it
across tenants (db/tenancy.py, "delivery-claim"), and the worker then acts for the servers of
the rows it claimed.
"""
from __future__ import annotations

import time

from sqlalchemy import bindparam, func, literal_column, or_, select

from chalicelib import clock, queues, statuses
from chalicelib.db import claims, tenancy
from chalicelib.db.engine import autocommit_engine
from chalicelib.db.models import (Delivery, Domain, IPPool, Message, MessageRaw, Server,
                                  Stream, Submission, Suppression)
from chalicelib.queues import SQS_MAX_DELAY
from chalicelib.services import content
from chalicelib.services.delivery import writes
from chalicelib.services.domains import names as domain_names

M, D, R = Message.__table__, Delivery.__table__, MessageRaw.__table__


def _claimed_columns():
    now = bindparam(claims.CLAIM_NOW, type_=Suppression.expires_at.type)

    def outer(name: str):
        # RETURNING renders columns unqualified, where a subquery's own table would win.
        return literal_column(f"messages.{name}")

    def domain(column):
        return select(column).where(Domain.id == outer("domain_id")).scalar_subquery()

    return (
        M.c.id, M.c.server_id, M.c.token, M.c.rcpt_to, M.c.mail_from, M.c.scope, M.c.bounce,
        M.c.tag, M.c.metadata.label("metadata_json"), M.c.stream_id, M.c.domain_id,
        M.c.status, M.c.held, M.c.created_at, M.c.attempts, M.c.track_opens,
        M.c.track_clicks,
        select(Server.mode).where(Server.id == outer("server_id")).scalar_subquery()
        .label("server_mode"),
        # The IP pool it sends from: the server's, else the default pool (egress.py);
        # pacing keeps each destination's state per pool (pacing.py).
        func.coalesce(
            select(Server.ip_pool_id).where(Server.id == outer("server_id")).scalar_subquery(),
            select(IPPool.id).where(IPPool.is_default.is_(True)).order_by(IPPool.id).limit(1)
            .scalar_subquery()).label("ip_pool_id"),
        # The content's keys (services/content/), and the old columns' bytes while a row
        # written before the content store is not yet moved (NULL otherwise: nothing read).
        select(Submission.content_key).where(Submission.id == outer("submission_id"))
        .scalar_subquery().label("source_key"),
        select(Submission.raw).where(Submission.id == outer("submission_id"))
        .scalar_subquery().label("source_raw"),
        select(R.c.content_key).where(R.c.message_id == outer("id")).scalar_subquery()
        .label("sent_key"),
        select(R.c.raw).where(R.c.message_id == outer("id")).scalar_subquery().label("sent_raw"),
        domain(Domain.name).label("domain_name"),
        domain(Domain.dkim_selector).label("dkim_selector"),
        domain(Domain.dkim_private_key_encrypted).label("dkim_key"),
        domain(domain_names.verified_return_path_column()).label("return_path_domain"),
        select(D.c.id).where(D.c.message_id == outer("id"), D.c.status == statuses.IN_FLIGHT)
        .limit(1).scalar_subquery().label("stale"),
        # suppressions.normalize() in SQL: rcpt_to was validated, so only case can differ.
        # An entry for every stream (key 0) or for the message's stream holds it.
        select(Suppression.reason).where(
            Suppression.server_id == outer("server_id"),
            Suppression.address == func.lower(func.trim(outer("rcpt_to"))),
            Suppression.stream_key.in_((0, func.coalesce(outer("stream_id"), 0))),
            or_(Suppression.expires_at.is_(None), Suppression.expires_at > now))
        .limit(1).scalar_subquery().label("suppressed"),
        # Whether the message carries List-Unsubscribe (suppressions/unsubscribe.py).
        select(or_(Stream.stream_type == "broadcast", Stream.list_unsubscribe))
        .where(Stream.id == outer("stream_id")).scalar_subquery().label("unsubscribable"),
    )


_UNREAD = object()


class Claimed:
    """A claimed row: its columns as attributes (``id``, ``rcpt_to``...), and its content
    (``source``: the submission's raw source; ``sent``: the bytes an earlier attempt sent, or
    None) read through the content store the first time they are asked for."""

    def __init__(self, row, claimed_at: float = 0.0):
        # The columns are plain attributes: an attempt reads them ~50 times, which through
        # __getattr__ and the row was ~2% of a message's CPU.
        self.__dict__.update(row._mapping)
        self.claimed_at = claimed_at  # time.monotonic() before the claim ran (handoff.py)
        self._source = self._sent = _UNREAD

    @property
    def has_source(self) -> bool:
        """Its source exists and was not erased (without reading it)."""
        return self.source_key is not None and self.source_key != content.EXPIRED

    @property
    def source(self) -> bytes | None:
        if self._source is _UNREAD:
            self._source = content.read(self.source_key, self.source_raw)
        return self._source

    @property
    def sent(self) -> bytes | None:
        if self._sent is _UNREAD:
            self._sent = content.read(self.sent_key, self.sent_raw)
        return self._sent


def statement(many: bool = False):
    """The claim of one row (``claims.claim_params``) or of several
    (``claims.claim_many_params``), built once."""
    return writes.cached(("claim", many), lambda: claims.claim_statement(
        Message, _claimed_columns(), M.c.status.in_(statuses.DELIVERABLE),
        M.c.scope == "outgoing", many=many))


def run(db, claim, params: dict, autocommit: bool = True) -> list:
    """Run a claim statement and return its rows, fetched; ``db`` then acts for the claimed
    rows' servers. On PostgreSQL it is one statement in autocommit mode (its own
    transaction, committed at once) unless ``autocommit`` is false (it then opens ``db``'s
    transaction)."""
    engine = autocommit_engine() if autocommit else None
    started = time.monotonic()
    if engine is not None:
        with tenancy.connect(engine, tenancy.cross_tenant("delivery-claim")) as conn:
            rows = conn.execute(claim, params).all()
    else:
        with tenancy.across_tenants(db, "delivery-claim"):
            rows = db.execute(claim, params).all()
    tenancy.act(db, tenancy.for_servers(row.server_id for row in rows))
    return [Claimed(row, started) for row in rows]


def not_claimed(db, message_id: int, claim_now=None) -> str:
    """Why a wake-up's claim failed: nothing to do, woken early (sleep again for the rest,
    nothing else), or another worker holds the row. Early means "not due at the claim's own
    now", not at a later now: a wake-up microseconds ahead of its row was otherwise dropped
    as claimed elsewhere."""
    db.rollback()
    with tenancy.across_tenants(db, "delivery-claim"):
        message = db.get(Message, message_id)
    if message is None or message.status not in statuses.DELIVERABLE or \
            message.scope != "outgoing" or message.next_attempt_at is None:
        return "nothing-to-do"
    if message.next_attempt_at > (claim_now or clock.now()):
        wait = max(0.0, (message.next_attempt_at - clock.now()).total_seconds())
        queues.enqueue_after_commit(db, queues.DELIVERIES, message_id, min(wait, SQS_MAX_DELAY))
        return "early"
    return "claimed-elsewhere"


def find_due(db, limit: int, grace: float, sweeping: bool = True) -> list[int]:
    """Due messages whose wake-up may have been lost (for the sweeper; ``sweeping=False``:
    claims.due_ids' read for the queue-lag metric)."""
    return claims.due_ids(db, Message, limit, grace, Message.status.in_(statuses.DELIVERABLE),
                          Message.scope == "outgoing", sweeping=sweeping)
