"""Handing a claimed message to the run of this process that already holds its destination's
connection slot, instead of pacing it (no database in here: ``pacing.Pacer`` registers its
slots and carries what it is handed).

With a small connection limit (2 to a destination, or a rule's 1) most of a process's runs
find every slot taken, often by another thread of the same process. Such a run does not
release its message for SLOT_WAIT_SECONDS: it hands it to that destination's **line**, and
a run holding one of the slots carries it over its own session, between and after its own
messages, before it parks or gives the slot back (as Postfix's queue manager feeds a
destination's messages to the deliveries it already has open). Only when no run of this
process holds a slot there (other processes hold them all) is the message paced.

* **Holders.** A run holding a slot of the destination in use (``hold`` / ``let_go``); a
  parked slot needs no line (the next run adopts it, ``sessions.adopt``).
* **A process's share.** `make run`'s worker processes each hand over once they hold their
  share of the destination's slots (its connections over WORKER_PROCESSES, rounded up;
  ``pacing._Limits.share``), without asking for another: with a limit of 2 and two worker
  processes, one process taking both slots would make every run of the other pace. A run
  counts as a holder from the moment it asks the database for a slot (``reserve``), so runs
  starting together do not all take one; it lets go when it got none. A process parks no
  more than its share either (``Pacer.finish``): a slot beyond it is given back.
* **Handing over.** The claimant keeps its claim (``locked_by``): the holder runs the rest of
  the attempt (admission by pacing's other limits, the in-flight marker, DATA, the outcome)
  for the claimant's claim token, so every write stays guarded on that claim. The claimant
  waits for what happened (``Entry.result``) and reports it as its own: a batch's return
  value stays true.
* **Back to the claimant.** When the last holder lets go with messages still in line (it
  moved on, gave its slot back after a throttle reply, or its run ended in error), they go
  back to their claimants unsent (``result`` None): each asks pacing again (the slot just
  parked or freed may be its now) or is paced. A claimant that waited half its claim
  (CLAIM_TIMEOUT_SECONDS) takes its message back the same way if no holder has started it.
  A message the holder failed on (an unexpected error while carrying it) is reported
  ``failed``: its claim stays and expires, so it is retried, as for the holder's own.
* **Claims that expired.** A holder does not start a message whose claim is older than
  CLAIM_TIMEOUT_SECONDS, less a clock skew (``Entry.expired``): nothing is sent or
  written, it is due again as any expired claim. A claim another worker took meanwhile is caught by the in-flight
  marker's guard (``locked_by``), as for any message: nothing is sent.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

from chalicelib.config import get_settings

CLOCK_SKEW_SECONDS = 5.0  # as pacing's: the skew allowed between workers' clocks


class Entry:
    """A message handed over: ``carry(db, recorder, pacer)`` runs the rest of its attempt on
    the holder's run and returns what happened; ``result`` is that (None: given back)."""

    def __init__(self, message_id: int, server_id: int, claimed_at: float,
                 carry: Callable[..., str]):
        self.message_id = message_id
        self.server_id = server_id
        self.claimed_at = claimed_at  # time.monotonic() when its claim was taken
        self.carry = carry
        self.result: str | None = None
        self.started = False
        self._done = threading.Event()

    def expired(self) -> bool:
        """Its claim is (nearly) older than CLAIM_TIMEOUT_SECONDS: another worker, whose
        clock may be ahead of ours, may take it any moment."""
        return time.monotonic() - self.claimed_at >= \
            get_settings().claim_timeout_seconds - CLOCK_SKEW_SECONDS

    def finish(self, result: str | None) -> None:
        self.result = result
        self._done.set()


class _Line:
    def __init__(self) -> None:
        self.holders = 0
        self.entries: deque[Entry] = deque()


_lines: dict[tuple, _Line] = {}
_lock = threading.Lock()


def hold(key: tuple) -> None:
    """A run of this process holds one of ``key``'s slots in use and carries its line."""
    with _lock:
        line = _lines.get(key)
        if line is None:
            line = _lines[key] = _Line()
        line.holders += 1


def reserve(key: tuple, share: int) -> bool:
    """A run about to take one of ``key``'s slots counts as a holder at once (so runs of the
    process starting together do not all take one), unless the process holds its ``share``
    already: False, hand the message over instead. ``let_go`` when no slot was taken."""
    with _lock:
        line = _lines.get(key)
        if line is None:
            line = _lines[key] = _Line()
        if line.holders >= share:
            return False
        line.holders += 1
        return True


def let_go(key: tuple) -> None:
    """A holder is done with ``key``'s slot; the last one gives the line's messages back."""
    with _lock:
        line = _lines.get(key)
        if line is None:
            return
        line.holders -= 1
        if line.holders > 0:
            return
        del _lines[key]
        left = list(line.entries)
    for entry in left:
        entry.finish(None)


def holders(key: tuple) -> int:
    """How many runs of this process hold a slot of ``key`` in use."""
    with _lock:
        line = _lines.get(key)
        return 0 if line is None else line.holders


def held(key: tuple) -> bool:
    """Some run of this process holds a slot of ``key`` in use."""
    with _lock:
        line = _lines.get(key)
        return line is not None and line.holders > 0


def take(key: tuple) -> Entry | None:
    """The next message in ``key``'s line, for a holder to carry (marked started)."""
    with _lock:
        line = _lines.get(key)
        if line is None or not line.entries:
            return None
        entry = line.entries.popleft()
        entry.started = True
        return entry


def hand_over(key: tuple, entry: Entry) -> str | None:
    """Put ``entry`` in ``key``'s line and wait for its holder: what happened to the message,
    or None when it was not started (no holder, the holders let go, or half its claim went
    by in line): the claimant asks pacing again."""
    with _lock:
        line = _lines.get(key)
        if line is None or line.holders <= 0:
            return None
        line.entries.append(entry)
    patience = get_settings().claim_timeout_seconds / 2 - (time.monotonic() - entry.claimed_at)
    if entry._done.wait(max(0.0, patience)):
        return entry.result
    with _lock:
        line = _lines.get(key)
        if not entry.started and line is not None and entry in line.entries:
            line.entries.remove(entry)
            return None
    entry._done.wait()  # a holder is carrying it: its outcome is the claimant's
    return entry.result


def waiting(destination: str) -> int:
    """How many messages wait in the destination's lines, every IP pool's (for tests)."""
    with _lock:
        return sum(len(line.entries) for key, line in _lines.items() if key[1] == destination)
