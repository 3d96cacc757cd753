"""Two outcomes suppressing the same address at the same moment both commit (the delivery
worker records a hard failure and its suppression in one transaction: a unique-key clash
there would throw the attempt's outcome away)."""
from __future__ import annotations

import threading

from sqlalchemy import select

from chalicelib.db.models import Server, Suppression
from chalicelib.services.suppressions import entries as suppressions
from tests.support import all_tenants, unique


def _server_id(tenant) -> int:
    with all_tenants() as db:
        return db.scalar(select(Server.id).where(Server.permalink == tenant.server,
                                                 Server.organization.has(permalink=tenant.org)))


def test_concurrent_suppressions_of_one_address_both_commit(api, tenant):
    server_id = _server_id(tenant)
    address = f"{unique('race')}@example.net"
    barrier = threading.Barrier(4)
    failures: list[BaseException] = []

    def suppress(n: int) -> None:
        try:
            with all_tenants() as db:
                barrier.wait(timeout=10)
                suppressions.suppress(db, server_id, address, reason="HardBounce",
                                      origin="hard_fail", details=f"hard fail {n}")
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=suppress, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures, failures
    with all_tenants() as db:
        rows = db.scalars(select(Suppression).where(Suppression.server_id == server_id,
                                                    Suppression.address == address)).all()
    assert len(rows) == 1 and rows[0].origin == "hard_fail" and rows[0].expires_at


def test_suppressing_again_refreshes_the_entry_but_never_shortens_a_permanent_one(api, tenant):
    server_id = _server_id(tenant)
    address = f"{unique('again')}@example.net"
    with all_tenants() as db:
        first = suppressions.suppress(db, server_id, address, reason="HardBounce",
                                      origin="bounce", details="bounced once")
        assert first.expires_at is not None and first.reason == "HardBounce"
    with all_tenants() as db:  # a permanent reason replaces a timed entry
        second = suppressions.suppress(db, server_id, address.upper(), reason="Unsubscribe",
                                       origin="unsubscribe", details="clicked")
        assert second.id == first.id and second.reason == "Unsubscribe"
        assert second.expires_at is None and second.origin == "unsubscribe"
    with all_tenants() as db:  # a later hard bounce must not end the unsubscribe in 30 days
        third = suppressions.suppress(db, server_id, address, reason="HardBounce",
                                      origin="hard_fail", details="550 gone")
        assert third.id == first.id and third.reason == "Unsubscribe"
        assert third.expires_at is None and third.details == "clicked"


def test_an_import_meeting_an_entry_added_meanwhile_skips_it(api, tenant):
    """The import looks for existing entries, then inserts: an entry another request adds in
    between is counted as skipped, not a unique-key error (a 500 for the whole import)."""
    server_id = _server_id(tenant)
    address = f"{unique('between')}@example.net"
    with all_tenants() as db:
        suppressions.suppress(db, server_id, address, reason="Manual", origin="manual")
    with all_tenants() as db:
        written = suppressions._insert_imported(db, server_id, [
            {"address": address, "reason": "Unsubscribe", "stream_id": None},
            {"address": "other-" + address, "reason": "Unsubscribe", "stream_id": None}])
        assert written == 1
    with all_tenants() as db:
        row = suppressions.active_entry(db, server_id, address)
        assert row.reason == "Manual" and row.origin == "manual"
