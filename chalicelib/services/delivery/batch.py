"""A batch of delivery wake-ups (an SQS batch of up to 10, or the local queue's) handled
together: the same steps per message (``attempt.py``), with a ``BatchRecorder``.

What a batch changes
--------------------
* **One claim.** The rows named by the wake-ups are claimed in ONE ``UPDATE ... WHERE id IN
  (...) RETURNING`` (the same conditions and the same RETURNING as a single claim); a row not
  claimed gets the single path's closer look (``claim.not_claimed``, in a session of its
  own).
* **One commit for the claim and the first marker** (PostgreSQL). The claim is not committed
  on its own: it opens the session's transaction, which commits with the first message's
  first write, its in-flight marker right before DATA (or its outcome, when it never gets
  there: suppressed, DNS failure, refused at MAIL or RCPT). SQLite commits the claim at once
  (its write lock would stop every other writer during the network I/O).
* **Destinations side by side.** Claimed messages are grouped by recipient domain; each
  domain's messages go, in order, over one SMTP session (``client.py`` keeps it, with RSET
  between messages when needed; a dropped session or a 421 is replaced by a fresh one
  before anything of the next message is sent), while the batch's other domains run beside
  it on the process's delivery I/O pool (``concurrency.py``, DELIVERY_CONCURRENCY), each on
  a database session of its own. Then the claim is committed before they start (below, the
  merged claim applies to a batch of one domain, or DELIVERY_CONCURRENCY=1). A domain whose
  round trips were seen to be long (``concurrency.far``: 10 ms or more) has its messages
  spread over several runs side by side instead, up to the process's share of its
  connections, each run its own session.
* **One connection slot per destination.** Each message is admitted by per-destination
  pacing (``pacing.py``) before it is sent; the worker takes the destination's connection
  slot with the first and keeps it for the consecutive messages to it, giving it back when
  it moves on or finishes. A message its destination cannot take now (a backoff after a
  throttle reply, no free slot, its messages a minute) is paced: released with its new due
  time like any outcome (riding on the next marker), never claimed and dropped. But when
  every slot is taken and a run of this process holds one, the message is handed to that
  run instead (``handoff.py``), which carries it between its own messages (``Pacer.carry``)
  over its session, for this batch's claim; this run waits and reports what happened.
* **Outcomes ride on the next marker.** A message's outcome (status, attempt, event, counters,
  webhook rows) is not committed on its own: it is written in the same statement, and so the
  same commit, as the next message's in-flight marker, and the last one at the batch's end.
  That is one commit per message plus one per batch on PostgreSQL (plus two on SQLite),
  where a message alone costs three.

What does not change
--------------------
* Each message is sent at most once per attempt: it is claimed before anything is sent and
  its outcome is recorded against its own claim (``locked_by``).
* The in-flight marker keeps its meaning per message: it is committed right before that
  message's DATA, never earlier or for another message.
* A worker killed anywhere leaves every row done once or due again. Killed before the first
  message's first write (PostgreSQL): the claim was never committed; the connection's end
  rolls it back and every row is due at once (no message reached DATA). Killed before a later
  message's marker: that message (and every later one of the batch) has no marker, so when
  the claims expire (CLAIM_TIMEOUT_SECONDS) the sweeper wakes them and they are sent. An
  unexpected error in the first message rolls the open claim back: the rows are claimed
  again at once (the failed one too, so it waits out its claim: no tight loop). Killed after a
  marker but before that message's outcome was written (which, in a batch, is until the NEXT
  message's marker commits): the stale marker makes the next worker hold the message as
  ``Unknown`` instead of resending it, as for a single message. The window in which a message
  the remote server accepted ends up ``Unknown`` is therefore a little longer in a batch (it
  includes the next message's MAIL and RCPT); it is the price of the commit saved.

What the merged claim costs
---------------------------
Until the first write commits, the batch's rows are locked by an open transaction during the
first message's preparation and connection set-up (DNS, the recipient domain's MTA-STS policy
when it is not cached yet, connect, EHLO/STARTTLS, MAIL, RCPT: milliseconds to a reachable MX,
at worst DELIVERY_TIMEOUT_SECONDS per step and host). Anything
updating those rows meanwhile waits for that commit instead of running at once: a duplicate
wake-up's claim (it then finds the rows claimed), the sweeper's wake-up mark (it then finds
them claimed and skips them), an API action on one of them. Nothing is lost or sent twice by
the wait, and a killed worker's connection ends its transaction. A database with an
``idle_in_transaction_session_timeout`` shorter than that set-up would end the session: the
first message then fails before its DATA (retried when its claim expires; the rest go on), so
keep it off (the default) or longer. Each
batch also pays two round trips more (START TRANSACTION and COMMIT around the claim) for the
commit (a WAL flush) it saves.
"""
from __future__ import annotations

import functools
import logging

from sqlalchemy import event

from chalicelib.db import claims, session_scope, tenancy
from chalicelib.db.engine import autocommit_engine
from chalicelib.services.delivery import attempt, claim, concurrency, pacing
from chalicelib.services.delivery.recorder import PendingOutcome, Recorder

log = logging.getLogger(__name__)


class BatchRecorder(Recorder):
    """Holds at most one message's outcome until the next message's marker, which writes it
    in the same commit (or ``flush`` at the batch's end); knows whether the batch's claim is
    still open in the session."""

    def __init__(self, claim_open: bool):
        self.claim_open = claim_open
        self._pending: tuple | None = None  # (session, outcome)
        self.lost: list[int] = []  # messages whose outcome found their claim taken

    def claim_committed(self, _session) -> None:
        """The session committed (its ``after_commit`` event): the claim is durable now."""
        self.claim_open = False

    def take_pending(self) -> PendingOutcome | None:
        pending, self._pending = self._pending, None
        return None if pending is None else pending[1]

    def write(self, db, pending: PendingOutcome) -> bool | None:
        if db.in_transaction():
            # Uncommitted work of this outcome (a suppression, a stale attempt's update) or
            # the batch's open claim commits with it: write it now.
            return super().write(db, pending)
        if self._pending is not None:  # two outcomes without a marker between: write one now
            self.flush()
        self._pending = (db, pending)
        return None

    def holds(self, message_id: int) -> bool:
        return self._pending is not None and self._pending[1].message.id == message_id

    def was_lost(self, message_id: int) -> bool:
        return message_id in self.lost

    def flush(self) -> None:
        if self._pending is not None:
            db, pending = self._pending
            self._pending = None
            super().write(db, pending)

    def settle(self, db, pending: PendingOutcome, tagged: dict) -> bool:
        written = super().settle(db, pending, tagged)
        if not written:
            self.lost.append(pending.message.id)
        return written


def process_batch(ids: list[int], worker: str) -> dict[int, str]:
    """Handle a batch of distinct wake-ups (more than one); returns what happened to each."""
    results: dict[int, str] = {}
    with session_scope() as db:
        statement = claim.statement(many=True)
        params = claims.claim_many_params(ids, worker)
        # PostgreSQL: the claim opens the session's transaction, which commits with the first
        # message's first write (its in-flight marker, or its outcome). SQLite: a write lock
        # must not stay open during network I/O, so the claim commits at once.
        merged = autocommit_engine() is not None
        rows = claim.run(db, statement, params, autocommit=False)
        claimed = {row.id: row for row in rows}
        groups = [run for group in _by_destination(claimed.values())
                  for run in _runs(group)]
        concurrent = len(groups) > 1 and concurrency.width() > 1
        if not merged or concurrent:
            # Destinations side by side: each on its own session, so the claim is committed
            # before any of them starts.
            db.commit()
        if not claimed:
            db.rollback()  # nothing claimed: no transaction to keep open
        unclaimed = [i for i in ids if i not in claimed]
        if unclaimed:  # another session: not_claimed's rollback would drop our open claim
            with session_scope() as other:
                for message_id in unclaimed:
                    results[message_id] = claim.not_claimed(other, message_id,
                                                            params.get(claims.CLAIM_NOW))
        if concurrent:
            for found in concurrency.run_all([functools.partial(_deliver_group, group, worker)
                                              for group in groups]):
                results.update(found)
        else:
            queue = [message for group in groups for message in group]
            results.update(_deliver(db, queue, worker, statement,
                                    claim_open=merged and bool(claimed)))
    return results


def _deliver_group(group: list, worker: str) -> dict[int, str]:
    """One destination's messages of a batch, on a session of their own (an I/O thread)."""
    with session_scope() as db:
        tenancy.act(db, tenancy.for_servers(message.server_id for message in group))
        return _deliver(db, group, worker, claim.statement(many=True), claim_open=False)


def _deliver(db, queue: list, worker: str, statement, claim_open: bool) -> dict[int, str]:
    """The claimed messages in order, each through the steps; outcomes ride on the next
    marker. ``claim_open``: the batch's claim is not committed yet (see above)."""
    results: dict[int, str] = {}
    recorder = BatchRecorder(claim_open=claim_open)
    pacer = pacing.Pacer(worker)  # one connection slot at a time, kept per destination
    if claim_open:  # told when a write commits it (a run whose claim is committed needs not:
        # an event listener on a fresh session costs ~20 us, a destination's run each)
        event.listen(db, "after_commit", recorder.claim_committed)
    finished = False
    try:
        queue = list(queue)
        while queue:
            message = queue.pop(0)
            try:
                results[message.id] = attempt.attempt(db, message, worker, recorder, pacer)
            except Exception:  # noqa: BLE001
                # As for a single message: its claim stays and expires, so it is retried;
                # the rest of the batch goes on.
                log.exception("delivery of message %s failed unexpectedly", message.id)
                db.rollback()
                results[message.id] = "failed"
                if recorder.claim_open:  # the rollback took the claim back
                    recorder.claim_open = False
                    queue = _claim_again(db, statement, worker, message.id, queue, results)
            if recorder.claim_open:  # not committed by a write after all: now
                db.commit()
            # Messages other runs of the process handed to our slot (handoff.py): now,
            # between our own, over the same session.
            pacer.carry(db, recorder)
        recorder.flush()
        pacer.finish(db)
        finished = True
        for message_id in recorder.lost:  # its outcome was not written: see settle()
            results[message_id] = "claim-lost"
    finally:
        if not finished:  # the run ends in error: what was handed to it goes back
            pacer.abandon()
        # A BaseException (the worker is being killed) writes nothing more, as a real
        # kill would not: the pending outcome is lost and its marker speaks for it; a
        # claim still open is rolled back (nothing of the batch reached DATA yet).
        if claim_open:
            event.remove(db, "after_commit", recorder.claim_committed)
    return results


def _by_destination(messages) -> list[list]:
    """The claimed messages grouped by recipient domain, each group in id order."""
    groups: dict[str, list] = {}
    for message in sorted(messages, key=_destination):
        groups.setdefault(_destination(message)[0], []).append(message)
    return list(groups.values())


def _claim_again(db, statement, worker: str, failed_id: int, queue: list,
                 results: dict) -> list:
    """An unexpected error in the first message rolled back the batch's open claim: claim
    the failed row again (its claim then expires as a single message's would: no tight
    loop) and the rest, committed at once. Returns the rest still ours, in order."""
    again = {row.id: row for row in claim.run(
        db, statement, claims.claim_many_params([failed_id] + [m.id for m in queue], worker))}
    for message in queue:
        if message.id not in again:
            results[message.id] = "claimed-elsewhere"
    return [again[m.id] for m in queue if m.id in again]


def _runs(group: list) -> list[list]:
    """A destination's messages as the runs that carry them: one, or several side by side
    when its round trips are long (``concurrency.far``)."""
    if len(group) == 1:
        return [group]
    domain = _destination(group[0])[0]
    if not concurrency.far(domain):
        return [group]
    return concurrency.split(group, pacing.share(domain))


def _destination(message) -> tuple:
    return message.rcpt_to.rpartition("@")[2].lower(), message.id
