"""The process's SMTP sessions, each tied to the destination's connection slot it occupies
(no database in here: pacing.py takes and gives back the slots).

A **slot** is one of a destination's ``connections`` (pacing.py: a ``delivery_leases`` row
with its own holder). At most one session goes with a slot: so the sessions this process
keeps open to a destination, busy or idle, never outnumber the slots it holds there, and
every worker together never opens more than the destination's limit.

* **In use.** A worker run (``pacing.Pacer``) holds a slot while it delivers to the
  destination; its messages go over the slot's session one after another (``client.py`` opens
  it, or replaces it when it breaks or the next message goes to another MX host).
* **Parked.** When the run is done with the destination and the session is still good, the
  slot is parked here with its session, idle, instead of being given back: the next run of
  any thread of this process that delivers there adopts both (no slot statement, no
  connect, greeting, EHLO or STARTTLS), as Postfix's connection cache does. STARTTLS and the
  MTA-STS decision stay the session's: a session is reused only for the same host, port,
  egress and TLS requirement (``Slot.take``).
* **Closed.** A parked slot is closed (QUIT) and given back after
  DELIVERY_SESSION_IDLE_SECONDS idle, at once when this process needs the slot for another
  run and the destination has no free one (``evict``), when it has been held for half its
  lease (a lease lapses after CLAIM_TIMEOUT_SECONDS; a slot must be given back before
  another worker may take it as lapsed), and at the end of a Lambda invocation (a frozen
  function cannot keep its idle sessions' time).
"""
from __future__ import annotations

import itertools
import threading
import time

from chalicelib.config import get_settings

_count = itertools.count(1)


class Slot:
    """A connection slot of (pool, destination) this process holds, and its session."""

    def __init__(self, pool: int, destination: str, worker: str):
        self.key = (pool, destination)
        # Unique per slot: giving a slot back deletes its holder's lease only.
        self.holder = f"{worker[:54]}#{next(_count)}"
        self.taken = time.monotonic()
        self.session_key: tuple | None = None
        self.session = None          # a connect.Session
        self.clean = False           # its last transaction ended with the reply to its data
        self.idle_since = 0.0
        # Parked after a message sent or refused for good: the destination's throttles as
        # that run last saw them (pacing.py admits the adopting run's first message at its
        # marker); None: the adopting run asks before it sends.
        self.throttles: int | None = None

    def take(self, key: tuple):
        """The slot's session when it is open to ``key`` (host, port, egress, TLS
        requirement), as (session, clean); else None (a session to another host is
        closed: one connection per slot)."""
        session, self.session = self.session, None
        if session is None:
            return None
        if self.session_key != key:
            close(session.smtp)
            return None
        return session, self.clean

    def keep(self, key: tuple, session, clean: bool) -> None:
        if self.session is not None and self.session is not session:
            close(self.session.smtp)
        self.session_key, self.session, self.clean = key, session, clean

    def drop(self) -> None:
        if self.session is not None:
            close(self.session.smtp)
            self.session = None

    def young(self, now: float) -> bool:
        """Still far enough from its lease's expiry to be used again."""
        return now - self.taken < get_settings().claim_timeout_seconds / 2


def close(smtp) -> None:
    try:
        smtp.quit()
    except Exception:  # noqa: BLE001  (closing a session we are done with)
        smtp.close()


_parked: dict[tuple, list[Slot]] = {}
_lock = threading.Lock()


def park(slot: Slot) -> bool:
    """Keep ``slot`` with its idle session for the next run; False when there is no session
    worth keeping (the caller gives the slot back)."""
    now = time.monotonic()
    if slot.session is None or not slot.young(now) or idle_seconds() <= 0:
        slot.drop()
        return False
    slot.idle_since = now
    with _lock:
        _parked.setdefault(slot.key, []).append(slot)
    return True


def adopt(pool: int, destination: str) -> tuple[Slot | None, list[Slot]]:
    """A parked slot of the destination for a new run (the most recently parked), and the
    ones too old to use (closed; the caller gives them back)."""
    now, stale = time.monotonic(), []
    found = None
    with _lock:
        slots = _parked.get((pool, destination))
        while slots and found is None:
            slot = slots.pop()
            if slot.young(now) and now - slot.idle_since < idle_seconds():
                found = slot
            else:
                stale.append(slot)
        if slots is not None and not slots:
            del _parked[(pool, destination)]
    for slot in stale:
        slot.drop()
    return found, stale


def evict(pool: int, destination: str) -> list[Slot]:
    """The destination's parked slots, their sessions closed (the limit needs them): the
    caller gives them back."""
    with _lock:
        slots = _parked.pop((pool, destination), [])
    for slot in slots:
        slot.drop()
    return slots


def expired(everything: bool = False) -> list[Slot]:
    """Parked slots idle for DELIVERY_SESSION_IDLE_SECONDS (or all of them), closed: the
    caller gives them back."""
    now, limit, gone = time.monotonic(), idle_seconds(), []
    with _lock:
        for key in list(_parked):
            keep = []
            for slot in _parked[key]:
                if everything or now - slot.idle_since >= limit or not slot.young(now):
                    gone.append(slot)
                else:
                    keep.append(slot)
            if keep:
                _parked[key] = keep
            else:
                del _parked[key]
    for slot in gone:
        slot.drop()
    return gone


def parked(pool: int, destination: str) -> int:
    """How many of the destination's slots this process keeps parked."""
    with _lock:
        return len(_parked.get((pool, destination), ()))


def parked_count() -> int:
    with _lock:
        return sum(len(slots) for slots in _parked.values())


def idle_seconds() -> float:
    return get_settings().delivery_session_idle_seconds

