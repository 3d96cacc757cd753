"""Management: a server's suppression list (reasons, per-stream entries, import, CSV export)."""
from __future__ import annotations

from chalice import Blueprint, Response
from sqlalchemy.orm import selectinload

from chalicelib import response_shapes
from chalicelib.api.response_builders import management
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.request_bodies.messages import SuppressionImport, SuppressionIn
from chalicelib.db.models import Suppression
from chalicelib.services.organizations import lookup
from chalicelib.services.suppressions import entries as suppressions
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)
BASE = "/organizations/{org}/servers/{server}/suppressions"

_STREAM = q.string("stream", "A stream permalink: only that stream's entries; 'all': only the "
                             "entries for every stream.")
_FILTERS = (
    q.string("query", "Text found in the address."),
    q.string("reason", "Only this reason.", enum=suppressions.REASONS),
    q.string("origin", "Only entries added this way.", enum=suppressions.ORIGINS),
    _STREAM,
    q.date_time("created_from", "Added at or after."),
    q.date_time("created_to", "Added before."),
    q.boolean("permanent", "Only entries that never expire."),
    q.date_time("expires_before", "Only entries that expire before this time (permanent ones "
                                  "are left out)."),
    q.boolean("include_expired", "Also list entries whose expiry has passed."),
)


def _list_stmt(call: Call, server_id: int):
    permalink = call.query_str("stream")
    stream = False if permalink is None else None if permalink == "all" else \
        suppressions.stream_by_permalink(call.db, server_id, permalink)
    return suppressions.list_stmt(
        server_id, call.query_str("query"), call.query_bool("include_expired"),
        reason=call.query_str("reason"), origin=call.query_str("origin"), stream=stream,
        created_from=call.query_datetime("created_from"),
        created_to=call.query_datetime("created_to"), permanent=call.query_bool("permanent"),
        expires_before=call.query_datetime("expires_before"))


@endpoint(bp, BASE, "GET", auth=ADMIN, query=(*q.PAGINATION, *_FILTERS),
          response=response_shapes.page("suppressions", shape.Suppression))
def list_suppressions(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.read")
    # the page's streams in one query, not one per row
    stmt = _list_stmt(call, srv.id).options(selectinload(Suppression.stream))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"suppressions": [management.suppression(s) for s in rows], "pagination": pagination}


@endpoint(bp, BASE, "POST", auth=ADMIN, body=SuppressionIn, status=201,
          response=response_shapes.one("suppression", shape.Suppression))
def create_suppression(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.manage")
    address = suppressions.validate_address(call.body.address)
    reason, details = call.body.reason, call.body.details
    if reason not in suppressions.REASONS:
        reason, details = "Manual", details or reason or "added by hand"
    stream = suppressions.stream_by_permalink(call.db, srv.id, call.body.stream)
    row = suppressions.suppress(call.db, srv.id, address, reason=reason, origin="manual",
                                details=details, stream_id=stream.id if stream else None,
                                days=call.body.days)
    return {"suppression": management.suppression(row)}


@endpoint(bp, BASE + "/import", "POST", auth=ADMIN, body=SuppressionImport,
          response=shape.SuppressionImportResult)
def import_suppressions(call: Call, org: str, server: str):
    """Import up to 10,000 suppressions: {imported, skipped, errors}."""
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.manage")
    return suppressions.import_entries(call.db, srv.id, call.body.suppressions)


@endpoint(bp, BASE + "/export", "GET", auth=ADMIN, raw=True, query=_FILTERS)
def export_suppressions(call: Call, org: str, server: str):
    """The suppression list as CSV (same filters as the list)."""
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.read")
    body = "".join(suppressions.export_rows(call.db, _list_stmt(call, srv.id)))
    return Response(body=body, status_code=200, headers={
        "Content-Type": "text/csv; charset=utf-8", "Cache-Control": "no-store",
        "Content-Disposition": f'attachment; filename="suppressions-{srv.permalink}.csv"'})


@endpoint(bp, BASE + "/{address}", "GET", auth=ADMIN, query=(_STREAM,),
          response=response_shapes.one("suppression", shape.Suppression))
def show_suppression(call: Call, org: str, server: str, address: str):
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.read")
    row = suppressions.find(call.db, srv.id, address, call.query_str("stream"))
    return {"suppression": management.suppression(row)}


@endpoint(bp, BASE + "/{address}", "DELETE", auth=ADMIN, query=(_STREAM,),
          response=shape.SuppressionDeleted)
def delete_suppression(call: Call, org: str, server: str, address: str):
    """Remove an address's entries (every stream's, or only ``stream``'s)."""
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.manage")
    rows = suppressions.remove(call.db, srv.id, address, call.query_str("stream"))
    return {"suppression": management.suppression(rows[0]), "removed": len(rows), "deleted": True}
