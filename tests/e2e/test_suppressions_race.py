"""Two outcomes suppressing the same address at the same moment both commit (the delivery
worker records a hard failure and its suppression in one transaction: a unique-key clash
there would throw the attempt's outcome away)."""
from __future__ import annotations

import threading

from sqlalchemy import select

from chalicelib.db import session_scope
from chalicelib.db.models import Server, Suppression
from chalicelib.services import suppressions
from tests.support import unique


def _server_id(tenant) -> int:
    with session_scope() as db:
        return db.scalar(select(Server.id).where(Server.permalink == tenant.server,
                                                 Server.organization.has(permalink=tenant.org)))


def test_concurrent_suppressions_of_one_address_both_commit(api, tenant):
    server_id = _server_id(tenant)
    address = f"{unique('race')}@example.net"
    barrier = threading.Barrier(4)
    failures: list[BaseException] = []

    def suppress(n: int) -> None:
        try:
            with session_scope() as db:
                barrier.wait(timeout=10)
                suppressions.suppress(db, server_id, address, f"hard fail {n}", "hard_fail")
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=suppress, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures, failures
    with session_scope() as db:
        rows = db.scalars(select(Suppression).where(Suppression.server_id == server_id,
                                                    Suppression.address == address)).all()
    assert len(rows) == 1 and rows[0].source == "hard_fail" and rows[0].expires_at


def test_suppressing_again_refreshes_the_entry(api, tenant):
    server_id = _server_id(tenant)
    address = f"{unique('again')}@example.net"
    with session_scope() as db:
        first = suppressions.suppress(db, server_id, address, "manual block", "manual")
        assert first.expires_at is None and first.reason == "manual block"
    with session_scope() as db:
        second = suppressions.suppress(db, server_id, address.upper(), "bounced", "bounce")
        assert second.id == first.id and second.reason == "bounced" and second.expires_at
