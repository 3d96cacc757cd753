"""Management: the authentication audit trail, newest first."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint
from chalicelib.api.response_builders import accounts as records
from chalicelib.services.accounts import audit
from chalicelib.services.accounts.permissions import authorize
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


@endpoint(bp, "/auth_events", "GET", auth=ADMIN, query=(
    q.integer("limit", f"Most recent events to return (default {DEFAULT_LIMIT}).", minimum=1,
              maximum=MAX_LIMIT),
    q.integer("user_id", "Only events of this user.", minimum=1, maximum=q.MAX_INT32),
    q.string("event", "Only events of this kind (e.g. login_failed).")),
          response=shape.AuthEvents)
def list_auth_events(call: Call):
    authorize(call.principal, "auth_events.read")
    limit = call.query_int("limit", DEFAULT_LIMIT)
    user_id = call.query_int("user_id")
    rows = call.db.scalars(audit.events_query(limit, user_id=user_id,
                                              event=call.query_str("event")))
    return {"auth_events": [records.auth_event(r) for r in rows], "limit": limit}
