"""The per-server suppression list: recipients the service will not send to.

Each entry has a ``reason`` (REASONS), an ``origin`` (who or what added it), free-text
``details``, and applies to every stream of the server (``stream_id`` NULL) or to one stream.
A message is held when its recipient has an active entry for all streams or for the
message's stream. An entry is active while ``expires_at`` is empty or in the future.

Lifetimes: hard bounces expire after SUPPRESSION_EXPIRY_DAYS; unsubscribes, spam complaints
and manual entries never expire unless ``days`` is given. A timed entry never replaces an
active permanent one for the same address and stream (a hard bounce after an unsubscribe
must not end the unsubscribe 30 days later). Addresses are compared lower-cased, an
internationalized one with its domain as A-label (``normalize``). An entry may hold the
address's hash instead (``hashed``: kept by a data removal so the address stays suppressed
without being stored); every lookup matches both forms. The delivery claim's own last-moment
check (services/delivery/claim.py) compares the plain address only: a hashed entry holds a
message when it is submitted.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Iterable

from sqlalchemy import and_, case, delete, or_, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db.engine import upsert
from chalicelib.db.models import Stream, Suppression
from chalicelib.services import mime

REASONS = ("HardBounce", "SpamComplaint", "Unsubscribe", "Manual")
# manual: POST .../suppressions; import: .../suppressions/import; hard_fail: a 5xx from the
# recipient's server; bounce: a DSN; complaint: an ARF report; unsubscribe: the one-click URL
# or the mailto address of List-Unsubscribe. ("api" appears on rows older than this list.)
ORIGINS = ("manual", "import", "hard_fail", "bounce", "complaint", "unsubscribe", "api")
IMPORT_MAX = 10_000
# Reasons whose entries expire after SUPPRESSION_EXPIRY_DAYS unless told otherwise.
_TIMED = ("HardBounce",)


def normalize(address: str) -> str:
    """The address as entries are kept and looked up: lower-cased; an internationalized one
    (RFC 6531) first written as messages write it (mime.parse_address: the local part in
    Unicode NFC, the domain as its A-label), so ``Ü@bücher.example`` and
    ``ü@xn--bcher-kva.example`` are one entry."""
    text = (address or "").strip()
    if not text.isascii():
        try:
            text = mime.parse_address(text, "address").email
        except mime.InvalidField:
            pass  # not an address (a search for part of one): compared as given
    return text.lower()


HASH_PREFIX = "sha256:"


def hashed(address: str) -> str:
    """The form an entry keeps an address in once a data removal asked for it to be kept
    without the address (services/privacy/removal.py): ``sha256:`` and the hex SHA-256 of the
    normalized address. Every lookup below matches it as well as the address itself."""
    return HASH_PREFIX + hashlib.sha256(normalize(address).encode("utf-8")).hexdigest()


def lookup_forms(address: str) -> list[str]:
    """What an entry for ``address`` may hold: the normalized address or its hash."""
    return [normalize(address), hashed(address)]


def _active(now: datetime | None = None):
    return or_(Suppression.expires_at.is_(None), Suppression.expires_at > (now or clock.now()))


def _for_stream(stream_id: int | None):
    """Entries that apply to a message on ``stream_id``: all-stream ones and that stream's."""
    return Suppression.stream_key.in_({0, stream_id or 0})


def active_entry(db: Session, server_id: int, address: str,
                 stream_id: int | None = None) -> Suppression | None:
    return db.scalar(select(Suppression).where(Suppression.server_id == server_id,
                                               Suppression.address.in_(lookup_forms(address)),
                                               _for_stream(stream_id), _active())
                     .order_by(Suppression.stream_key).limit(1))


def is_suppressed(db: Session, server_id: int, address: str,
                  stream_id: int | None = None) -> bool:
    return active_entry(db, server_id, address, stream_id) is not None


def suppressed_among(db: Session, server_id: int,
                     addresses: Iterable[str]) -> set[tuple[str, int]]:
    """(lower-cased address, stream_key) of the active entries for ``addresses`` (one query);
    stream_key 0 means every stream. See ``held``."""
    wanted = {normalize(a) for a in addresses}
    if not wanted:
        return set()
    by_hash = {hashed(a): a for a in wanted}  # entries kept as a hash (data removal)
    rows = db.execute(select(Suppression.address, Suppression.stream_key)
                      .where(Suppression.server_id == server_id,
                             Suppression.address.in_(wanted | set(by_hash)), _active()))
    return {(by_hash.get(a, a), k) for a, k in rows}


def held(entries: set[tuple[str, int]], address: str, stream_id: int | None) -> bool:
    address = normalize(address)
    return (address, 0) in entries or (stream_id is not None and (address, stream_id) in entries)


def default_days(reason: str) -> int | None:
    return get_settings().suppression_expiry_days if reason in _TIMED else None


def suppress(db: Session, server_id: int, address: str, *, reason: str, origin: str,
             details: str | None = None, stream_id: int | None = None,
             days: int | None = None, bounce_reason: str | None = None,
             message_id: int | None = None) -> Suppression:
    """Add (or refresh) a suppression. ``days``: lifetime; None means the reason's default
    (``default_days``); ``bounce_reason``: the failure's reason (services/failures/) and
    ``message_id`` the message it came from, for an entry a failure or bounce adds (through
    ``policy.after_failure``). Returns the row (flushed)."""
    if reason not in REASONS:
        raise ValueError(f"unknown suppression reason {reason!r}")
    address = normalize(address)
    now = clock.now()
    days = default_days(reason) if days is None else days
    expires_at = now + timedelta(days=days) if days else None
    values = {"reason": reason, "origin": origin, "details": details, "created_at": now,
              "expires_at": expires_at, "stream_id": stream_id,
              "bounce_reason": bounce_reason, "message_id": message_id}
    columns = {Suppression.__mapper__.attrs[k].columns[0].name: v for k, v in values.items()}
    # On the Table, not the class: keys are column names (the class would read "reason" as
    # the attribute mapped to reason_code).
    stmt = upsert(db, Suppression.__table__).values(
        server_id=server_id, address=address, stream_key=stream_id or 0, **columns)
    # One atomic upsert: two messages to the same address failing at the same moment must
    # both record their outcome, not have one abort on the unique key. A timed entry does
    # not replace an active permanent one.
    table = Suppression.__table__
    keep = and_(table.c.expires_at.is_(None), stmt.excluded.expires_at.is_not(None))
    stmt = stmt.on_conflict_do_update(
        index_elements=["server_id", "address", "stream_key"],
        set_={name: case((keep, table.c[name]), else_=stmt.excluded[name]) for name in columns})
    db.execute(stmt)
    return db.scalar(select(Suppression).where(Suppression.server_id == server_id,
                                               Suppression.address == address,
                                               Suppression.stream_key == (stream_id or 0))
                     .execution_options(populate_existing=True))


def validate_address(address: object, field: str = "address") -> str:
    try:
        return normalize(mime.parse_address(address, field).email)
    except mime.InvalidField as exc:
        raise errors.ValidationError(f"{exc.field} {exc.message}", field=exc.field) from None


def validate_reason(reason: object, field: str = "reason") -> str:
    if reason not in REASONS:
        raise errors.ValidationError(f"{field}: must be one of {', '.join(REASONS)}",
                                     field=field)
    return reason


def stream_by_permalink(db: Session, server_id: int, permalink: str | None,
                        field: str = "stream") -> Stream | None:
    """The stream named by ``permalink`` (archived ones too); None for no permalink."""
    if permalink is None:
        return None
    stream = db.scalar(select(Stream).where(Stream.server_id == server_id,
                                            Stream.permalink == permalink))
    if stream is None:
        raise errors.ValidationError(f"{field}: the server has no stream {permalink!r}",
                                     field=field)
    return stream


def _address_entries(db: Session, server_id: int, address: str, stream: str | None,
                     active_only: bool) -> list[Suppression]:
    stmt = select(Suppression).where(Suppression.server_id == server_id,
                                     Suppression.address == normalize(address))
    if active_only:
        stmt = stmt.where(_active())
    if stream == "all":
        stmt = stmt.where(Suppression.stream_key == 0)
    elif stream is not None:
        stmt = stmt.join(Stream, Stream.id == Suppression.stream_id) \
            .where(Stream.permalink == stream)
    return list(db.scalars(stmt.order_by(Suppression.stream_key)))


def find(db: Session, server_id: int, address: str, stream: str | None = None) -> Suppression:
    """The active entry of ``address``: the all-stream one first, else a per-stream one;
    ``stream`` (a permalink, or ``all``) narrows it."""
    rows = _address_entries(db, server_id, address, stream, active_only=True)
    if not rows:
        raise errors.NotFound(f"{address!r} is not on the suppression list")
    return rows[0]


def remove(db: Session, server_id: int, address: str,
           stream: str | None = None) -> list[Suppression]:
    """Remove the address's entries (every stream's, or only ``stream``'s: a permalink or
    ``all``); NotFound when there is none."""
    rows = _address_entries(db, server_id, address, stream, active_only=False)
    if not rows:
        raise errors.NotFound(f"{address!r} is not on the suppression list")
    for row in rows:
        db.delete(row)
    db.flush()
    return rows


def list_stmt(server_id: int, query: str | None = None, include_expired: bool = False, *,
              reason: str | None = None, origin: str | None = None,
              stream: Stream | None | bool = False, created_from: datetime | None = None,
              created_to: datetime | None = None, permanent: bool = False,
              expires_before: datetime | None = None):
    """``stream``: False = any, None = only the all-stream entries, a Stream = its entries."""
    stmt = select(Suppression).where(Suppression.server_id == server_id)
    if not include_expired:
        stmt = stmt.where(_active())
    if query:
        stmt = stmt.where(Suppression.address.contains(normalize(query), autoescape=True))
    if reason is not None:
        stmt = stmt.where(Suppression.reason == reason)
    if origin is not None:
        stmt = stmt.where(Suppression.origin == origin)
    if stream is None:
        stmt = stmt.where(Suppression.stream_key == 0)
    elif stream is not False:
        stmt = stmt.where(Suppression.stream_key == stream.id)
    if created_from is not None:
        stmt = stmt.where(Suppression.created_at >= created_from)
    if created_to is not None:
        stmt = stmt.where(Suppression.created_at < created_to)
    if permanent:
        stmt = stmt.where(Suppression.expires_at.is_(None))
    if expires_before is not None:
        stmt = stmt.where(Suppression.expires_at < expires_before)
    return stmt.order_by(Suppression.id.desc())


# --- import --------------------------------------------------------------------------------

def import_entries(db: Session, server_id: int, entries: list) -> dict:
    """Suppress up to IMPORT_MAX ``{address, reason?, stream?}`` entries (reason default
    Manual, stream default every stream; no expiry unless the reason's default has one).
    An entry is skipped when it is invalid (its index and why are listed, at most 100) or
    already actively suppressed for that stream (repeats in the same call included)."""
    if len(entries) > IMPORT_MAX:
        raise errors.ValidationError(f"suppressions: at most {IMPORT_MAX} a call",
                                     field="suppressions")
    streams: dict[str, Stream] = {}
    problems: list[dict] = []
    wanted: dict[tuple[str, int], dict] = {}
    skipped = 0
    for index, entry in enumerate(entries):
        try:
            if not isinstance(entry, dict):
                raise errors.ValidationError("must be an object", field="")
            address = validate_address(entry.get("address"), "address")
            reason = validate_reason(entry.get("reason") or "Manual")
            permalink = entry.get("stream")
            stream_id = None
            if permalink is not None:
                if not isinstance(permalink, str):
                    raise errors.ValidationError("stream: must be a stream permalink",
                                                 field="stream")
                if permalink not in streams:
                    streams[permalink] = stream_by_permalink(db, server_id, permalink)
                stream_id = streams[permalink].id
        except errors.ValidationError as exc:
            skipped += 1
            if len(problems) < 100:
                problems.append({"index": index, "field": f"suppressions[{index}]"
                                 + (f".{exc.field}" if exc.field else ""),
                                 "message": exc.message})
            continue
        key = (address, stream_id or 0)
        if key in wanted:
            skipped += 1
            continue
        wanted[key] = {"address": address, "reason": reason, "stream_id": stream_id}
    todo, lapsed = _new_entries(db, server_id, wanted)
    for start in range(0, len(lapsed), 1000):
        db.execute(delete(Suppression).where(Suppression.id.in_(lapsed[start:start + 1000])))
    imported = _insert_imported(db, server_id, todo) if todo else 0
    # An entry another request added meanwhile is a skip too (the insert ignores it).
    skipped += len(wanted) - imported
    return {"imported": imported, "skipped": skipped, "errors": problems}


def _new_entries(db: Session, server_id: int, wanted: dict) -> tuple[list[dict], list[int]]:
    """The entries of ``wanted`` the server has no active entry for, and the ids of lapsed
    entries (waiting for the retention sweep) of the same keys, which make way for them."""
    now = clock.now()
    addresses = sorted({a for a, _ in wanted})
    columns = (Suppression.id, Suppression.address, Suppression.stream_key,
               Suppression.expires_at)
    if db.get_bind().dialect.name == "postgresql":
        # One array parameter: 10,000 placeholders would cost more to build and rewrite
        # (pg8000 scans the SQL text in Python) than the query itself.
        from sqlalchemy import String, any_, bindparam
        from sqlalchemy.dialects.postgresql import ARRAY

        found = db.execute(select(*columns).where(
            Suppression.server_id == server_id,
            Suppression.address == any_(bindparam("addresses", addresses,
                                                  type_=ARRAY(String)))))
    else:
        found = (row for start in range(0, len(addresses), 500) for row in db.execute(
            select(*columns).where(Suppression.server_id == server_id,
                                   Suppression.address.in_(addresses[start:start + 500]))))
    present, lapsed = set(), []
    for row_id, address, key, expires_at in found:
        if expires_at is None or expires_at > now:
            present.add((address, key))
        elif (address, key) in wanted:
            lapsed.append(row_id)
    return [v for k, v in wanted.items() if k not in present], lapsed


_UNNEST_INSERT = """
INSERT INTO suppressions (server_id, address, reason_code, source, reason, stream_id,
                          stream_key, created_at, expires_at)
SELECT :server_id, u.address, u.reason_code, 'import', 'imported', NULLIF(u.stream_key, 0),
       u.stream_key, :now,
       CASE WHEN u.days > 0 THEN CAST(:now AS timestamp) + make_interval(days => u.days) END
FROM unnest(CAST(:addresses AS varchar[]), CAST(:reasons AS varchar[]),
            CAST(:stream_keys AS integer[]), CAST(:days AS integer[]))
     AS u(address, reason_code, stream_key, days)
ON CONFLICT (server_id, address, stream_key) DO NOTHING
RETURNING id
"""


def _insert_imported(db: Session, server_id: int, todo: list[dict]) -> int:
    """Insert the new entries; returns how many were written (one added by a concurrent
    request since ``_new_entries`` looked is left alone, not a unique-key error)."""
    now = clock.now()
    if db.get_bind().dialect.name == "postgresql":
        # One statement with four array parameters, whatever the number of rows.
        from sqlalchemy import text

        return len(db.execute(text(_UNNEST_INSERT), {
            "server_id": server_id, "now": now,
            "addresses": [v["address"] for v in todo],
            "reasons": [v["reason"] for v in todo],
            "stream_keys": [v["stream_id"] or 0 for v in todo],
            "days": [default_days(v["reason"]) or 0 for v in todo]}).all())
    rows = []
    for v in todo:
        days = default_days(v["reason"])
        # column names: the statement is on the table (see ``suppress``)
        rows.append({"server_id": server_id, "address": v["address"], "reason_code": v["reason"],
                     "source": "import", "reason": "imported", "stream_id": v["stream_id"],
                     "stream_key": v["stream_id"] or 0, "created_at": now,
                     "expires_at": now + timedelta(days=days) if days else None})
    # sqlite3's executemany: one C loop; rowcount sums the rows written
    stmt = upsert(db, Suppression.__table__).on_conflict_do_nothing(
        index_elements=["server_id", "address", "stream_key"])
    return db.execute(stmt, rows).rowcount


# --- export --------------------------------------------------------------------------------

CSV_COLUMNS = ("address", "reason", "stream", "origin", "details", "created_at", "expires_at")


def export_rows(db: Session, stmt, batch: int = 1000):
    """The CSV lines (header first) of ``stmt``'s suppressions, read ``batch`` rows at a time
    so a long list never sits in memory as ORM objects."""
    import csv
    import io

    permalinks = dict(db.execute(select(Stream.id, Stream.permalink)).all())
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")

    def line(values) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(values)
        return buffer.getvalue()

    yield line(CSV_COLUMNS)
    for s in db.execute(stmt.execution_options(yield_per=batch)).scalars():
        yield line((s.address, s.reason, permalinks.get(s.stream_id, "") if s.stream_id else "",
                    s.origin, _csv_safe(s.details or ""), _iso(s.created_at),
                    _iso(s.expires_at)))


def _iso(value: datetime | None) -> str:
    return value.replace(microsecond=0).isoformat() + "Z" if value else ""


def _csv_safe(text: str) -> str:
    # A cell starting with = + - @ is a formula in spreadsheets (CSV injection).
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text
