"""A batch's claim on PostgreSQL commits with the first message's first write (its in-flight
marker, or its outcome when it never reaches DATA): one commit fewer per batch. Nothing of the
batch reaches DATA before that commit, so a worker killed earlier leaves every row unclaimed
and due at once; an unexpected error there claims the rows again instead of dropping them."""
from __future__ import annotations

import pytest

from tests.support import all_tenants
from chalicelib.db.models import Message
from chalicelib.services.delivery import attempt, process as worker, recorder as recording, steps
from tests.conftest import TEST_DATABASE_URL
from tests.support.delivery import WorkerDied, park_many
from tests.support.sending import message
from tests.support.delivery import deliveries_of

pytestmark = pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                                reason="SQLite commits the claim at once (no lock held "
                                       "across network I/O)")


def _claims(ids: list[int]) -> list[str | None]:
    """Each row's claim as another connection sees it (committed state only)."""
    with all_tenants() as session:
        return [session.get(Message, i).locked_by for i in ids]


def test_the_claim_commits_with_the_first_marker(api, tenant, mx, db, monkeypatch):
    ids, addresses = park_many(db, api, tenant, 3)
    real_mark = recording.Recorder.mark_in_flight
    seen: list[list] = []

    def look_then_mark(recorder, db_, message_id, host, raw, worker_id, *rest):
        seen.append(_claims(ids))
        return real_mark(recorder, db_, message_id, host, raw, worker_id, *rest)

    monkeypatch.setattr(recording.Recorder, "mark_in_flight", look_then_mark)
    assert worker.process_batch(ids) == {i: "Sent" for i in ids}
    # Before the first marker nobody else sees the claim; with it, every row is claimed.
    assert seen[0] == [None, None, None]
    assert len(set(seen[1])) == 1 and seen[1][0] is not None
    assert [len(mx.received_for(to)) for to in addresses] == [1, 1, 1]
    assert _claims(ids) == [None, None, None]  # released with the outcomes


def test_killed_before_the_first_marker_every_row_is_due_again_at_once(api, tenant, mx, db,
                                                                      monkeypatch):
    ids, addresses = park_many(db, api, tenant, 3)
    real_mark = recording.Recorder.mark_in_flight

    def die(*args):
        raise WorkerDied()

    monkeypatch.setattr(recording.Recorder, "mark_in_flight", die)
    with pytest.raises(WorkerDied):
        worker.process_batch(ids)
    monkeypatch.setattr(recording.Recorder, "mark_in_flight", real_mark)
    # The claim died with the worker: no claim to wait out, no marker, nothing sent.
    assert _claims(ids) == [None, None, None]
    assert [deliveries_of(i) for i in ids] == [[], [], []]
    assert mx.messages == []
    assert worker.process_batch(ids) == {i: "Sent" for i in ids}
    assert [len(mx.received_for(to)) for to in addresses] == [1, 1, 1]


def test_a_first_message_refused_before_data_commits_the_claim_with_its_outcome(
        api, tenant, mx, db):
    ids, addresses = park_many(db, api, tenant, 3)
    mx.script = ["rcpt:550 5.1.1 no such user"]
    results = worker.process_batch(ids)
    assert [results[i] for i in ids] == ["HardFail", "Sent", "Sent"]
    assert [len(mx.received_for(to)) for to in addresses] == [0, 1, 1]
    assert [message(api, tenant, i)["status"] for i in ids] == ["HardFail", "Sent", "Sent"]
    assert _claims(ids) == [None, None, None]


def test_an_unexpected_error_before_the_first_marker_keeps_the_claims(api, tenant, mx, db,
                                                                     monkeypatch):
    """The rollback takes the open claim back: the failed row is claimed again (it waits for
    its claim to expire, as a single message would: no tight retry loop) and so is the rest,
    which is delivered."""
    ids, addresses = park_many(db, api, tenant, 3)
    real_prepare = steps.prepare

    def fail_first(db_, message_):
        if message_.id == ids[0]:
            raise RuntimeError("a bug in preparing this message")
        return real_prepare(db_, message_)

    monkeypatch.setattr(steps, "prepare", fail_first)
    results = worker.process_batch(ids)
    assert [results[i] for i in ids] == ["failed", "Sent", "Sent"]
    assert [len(mx.received_for(to)) for to in addresses] == [0, 1, 1]
    failed_claim = _claims(ids)[0]
    assert failed_claim is not None
    assert worker.process(ids[0]) == "claimed-elsewhere"
    assert message(api, tenant, ids[0])["status"] == "Pending"


def test_an_unexpected_error_after_the_first_marker_leaves_the_claims_alone(
        api, tenant, mx, db, monkeypatch):
    """The claim was committed with the first marker: the rollback after the error takes
    nothing back, and the rest of the batch goes on under the claim it holds."""
    ids, addresses = park_many(db, api, tenant, 3)
    real_record = attempt.record

    def fail_first(db_, message_, *args, **kwargs):
        if message_.id == ids[0]:
            raise RuntimeError("a bug in recording this outcome")
        return real_record(db_, message_, *args, **kwargs)

    monkeypatch.setattr(attempt, "record", fail_first)
    results = worker.process_batch(ids)
    assert [results[i] for i in ids] == ["failed", "Sent", "Sent"]
    assert [len(mx.received_for(to)) for to in addresses] == [1, 1, 1]
    assert [[d.status for d in deliveries_of(i)] for i in ids] == \
        [["InFlight"], ["Sent"], ["Sent"]]  # the 1st is held as Unknown once its claim expires
    assert _claims(ids)[0] is not None and _claims(ids)[1:] == [None, None]
