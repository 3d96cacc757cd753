"""Message content: owns the bytes of every message's content (a submission's raw source,
the signed copy a message went out as), the store port and its adapters (``store.py``: a
directory, or S3 and S3-compatible stores), the keys they are kept under, and the columns that
name them (``rows.py``: write order, reads with the legacy fallback, erasure, the orphan
sweep, the backfill of rows written before the store).

Rows name their bytes by ``content_key`` (with ``size`` and ``content_sha256``):

* ``""`` (LEGACY): the bytes are still in the row's old ``raw`` column (written before
  migration 0021; the backfill moves them);
* ``"expired"`` (EXPIRED): the content was erased (content retention, data removal); the
  row stays and reads say "content expired" (``is_expired``);
* anything else: the key of the object in the store.
"""
from chalicelib.services.content.rows import (EXPIRED, LEGACY, Ref, backfill, erase,
                                              is_expired, legacy_left, put, put_many, read,
                                              sent_bytes, source_bytes, submission_columns,
                                              sweep)
from chalicelib.services.content.store import Missing, get_store, set_store

__all__ = ["EXPIRED", "LEGACY", "Missing", "Ref", "backfill", "erase", "get_store",
           "is_expired", "legacy_left", "put", "put_many", "read", "sent_bytes", "set_store",
           "source_bytes", "submission_columns", "sweep"]
