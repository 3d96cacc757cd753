"""A batch of delivery wake-ups (an SQS batch of up to 10, or the local queue's) handled
together around the per-message steps of ``workers/delivery.py``.

What a batch changes
--------------------
* **One claim.** The rows named by the wake-ups are claimed in ONE ``UPDATE ... WHERE id IN
  (...) RETURNING`` (the same conditions and the same RETURNING as a single claim); a row not
  claimed gets the single path's closer look (``delivery.not_claimed``).
* **One connection per destination.** Claimed messages are worked through sorted by
  recipient domain, so consecutive messages for one destination go over one SMTP session
  (``services/delivery.py`` keeps it, with RSET between messages; a dropped session or a 421
  is replaced by a fresh one before anything of the next message is sent).
* **Outcomes ride on the next marker.** A message's outcome (status, attempt, event, counters,
  webhook rows) is not committed on its own: it is written in the same statement, and so the
  same commit, as the next message's in-flight marker, and the last one at the batch's end.
  That is one commit per message plus two per batch, where a message alone costs three.

What does not change
--------------------
* Each message is sent at most once per attempt: it is claimed before anything is sent and
  its outcome is recorded against its own claim (``locked_by``).
* The in-flight marker keeps its meaning per message: it is committed right before that
  message's DATA, never earlier or for another message.
* A worker killed anywhere leaves every row done once or due again. Killed before a message's
  marker: that message (and every later one of the batch) has no marker, so when the claims
  expire (CLAIM_TIMEOUT_SECONDS) the sweeper wakes them and they are sent. Killed after a
  marker but before that message's outcome was written (which, in a batch, is until the NEXT
  message's marker commits): the stale marker makes the next worker hold the message as
  ``Unknown`` instead of resending it, as for a single message. The window in which a message
  the remote server accepted ends up ``Unknown`` is therefore a little longer in a batch (it
  includes the next message's MAIL and RCPT); it is the price of the commit saved.
"""
from __future__ import annotations

import logging

from sqlalchemy import BigInteger, cast, literal, select, union_all

from chalicelib.db import session_scope
from chalicelib.services import claims
from chalicelib.workers import delivery

log = logging.getLogger(__name__)


def process_batch(message_ids: list[int]) -> dict[int, str]:
    """Handle a batch of wake-ups; returns what happened to each row id."""
    ids = list(dict.fromkeys(message_ids))  # SQS may deliver the same wake-up twice
    if len(ids) == 1:
        return {ids[0]: delivery.process(ids[0])}
    worker = claims.worker_id()
    results: dict[int, str] = {}
    with session_scope() as db:
        claim = delivery._cached("claim_many", lambda: delivery._claim_statement(many=True))
        params = claims.claim_many_params(ids, worker)
        rows = delivery.claim_rows(db, claim, params)
        db.commit()  # SQLite claims in the session: commit before not_claimed rolls back
        claimed = {row.id: row for row in rows}
        for message_id in ids:
            if message_id not in claimed:
                results[message_id] = delivery.not_claimed(db, message_id,
                                                            params.get(claims.CLAIM_NOW))
        db.commit()
        deferred = Deferred()
        delivery._batch.deferred = deferred
        try:
            for message in sorted(claimed.values(), key=_destination):
                try:
                    results[message.id] = delivery._attempt(db, message, worker)
                except Exception:  # noqa: BLE001
                    # As for a single message: its claim stays and expires, so it is retried;
                    # the rest of the batch goes on.
                    log.exception("delivery of message %s failed unexpectedly", message.id)
                    db.rollback()
                    results[message.id] = "failed"
            delivery._batch.deferred = None
            deferred.flush()
        finally:
            # A BaseException (the worker is being killed) writes nothing more, as a real
            # kill would not: the pending outcome is lost and its marker speaks for it.
            delivery._batch.deferred = None
    return results


def _destination(message) -> tuple:
    return message.rcpt_to.rpartition("@")[2].lower(), message.id


class Deferred:
    """At most one message's outcome waiting to be written with the next in-flight marker."""

    def __init__(self):
        self._outcome: tuple | None = None

    def has_outcome(self) -> bool:
        return self._outcome is not None

    def defer(self, db, key: tuple, build, params: dict, wants_hooks: bool) -> None:
        if self._outcome is not None:  # two outcomes without a marker between: write one now
            self.flush()
        self._outcome = (db, key, build, params, wants_hooks)

    def flush(self) -> None:
        if self._outcome is None:
            return
        db, key, build, params, wants_hooks = self._outcome
        self._outcome = None
        rows = delivery._run(db, key, build, params)
        delivery.wake_webhooks(db, [row[0] for row in rows] if wants_hooks else [])

    def write_with_marker(self, db, key: tuple, build, params: dict) -> int:
        """The marker's statements and the pending outcome's as ONE transaction (on
        PostgreSQL one statement); returns the marker's Delivery id."""
        _, outcome_key, outcome_build, outcome_params, wants_hooks = self._outcome
        self._outcome = None
        tagged = _run_tagged(db, ("with_marker", key, outcome_key),
                             [(build, "marker"), (outcome_build, "hook" if wants_hooks else None)],
                             {**params, **outcome_params})
        delivery.wake_webhooks(db, tagged.get("hook", []))
        markers = tagged.get("marker", [])
        if not markers:  # the previous outcome is written; this message's claim expired
            raise delivery.ClaimLost("the claim expired before DATA")
        return markers[0]


def _run_tagged(db, key: tuple, parts: list, params: dict) -> dict[str, list[int]]:
    """Like ``delivery._run`` for several groups of statements written together: returns,
    per tag, the ids the last statement of that group returned."""
    dialect = db.get_bind().dialect.name
    composed = delivery._cached((dialect, *key),
                                lambda: _compose(dialect, [(b(), t) for b, t in parts]))
    if dialect == "postgresql":
        rows = delivery._single(db, composed, params)
        tagged: dict[str, list[int]] = {}
        for tag, row_id in rows:
            tagged.setdefault(tag, []).append(row_id)
        return tagged
    tagged = {}
    for statements, tag in composed:
        for i, (stmt, names) in enumerate(statements):
            rows = db.execute(stmt, {n: params[n] for n in names if n in params}).all()
            if tag is not None and i == len(statements) - 1:
                tagged[tag] = [row[0] for row in rows]
    db.commit()
    return tagged


def _compose(dialect: str, groups: list):
    if dialect != "postgresql":
        return [([(stmt, tuple(stmt.compile().params)) for stmt in statements], tag)
                for statements, tag in groups]
    ctes, selects = [], []
    for statements, tag in groups:
        for i, stmt in enumerate(statements):
            cte = stmt.cte(f"w{len(ctes)}")
            ctes.append(cte)
            if tag is not None and i == len(statements) - 1:
                selects.append(select(literal(tag).label("tag"),
                                      cast(list(cte.c)[0], BigInteger).label("id")))
    return (union_all(*selects) if len(selects) > 1 else selects[0]).add_cte(*ctes)
