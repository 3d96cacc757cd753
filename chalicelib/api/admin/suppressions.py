"""Management: a server's suppression list."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api import message_records as records
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.schemas.messages import SuppressionIn
from chalicelib.services import lookup, suppressions

bp = Blueprint(__name__)
BASE = "/organizations/{org}/servers/{server}/suppressions"


@endpoint(bp, BASE, "GET", auth=ADMIN, query=(
    *q.PAGINATION, q.string("query", "Text found in the address.")))
def list_suppressions(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.read")
    stmt = suppressions.list_stmt(srv.id, call.query_str("query"))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"suppressions": [records.suppression(s) for s in rows], "pagination": pagination}


@endpoint(bp, BASE, "POST", auth=ADMIN, body=SuppressionIn, status=201)
def create_suppression(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.manage")
    address = suppressions.validate_address(call.body.address)
    row = suppressions.suppress(call.db, srv.id, address, call.body.reason or "added by hand",
                                "manual", days=call.body.days)
    return {"suppression": records.suppression(row)}


@endpoint(bp, BASE + "/{address}", "GET", auth=ADMIN)
def show_suppression(call: Call, org: str, server: str, address: str):
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.read")
    return {"suppression": records.suppression(suppressions.find(call.db, srv.id, address))}


@endpoint(bp, BASE + "/{address}", "DELETE", auth=ADMIN)
def delete_suppression(call: Call, org: str, server: str, address: str):
    srv = lookup.server(call.db, call.principal, org, server, "suppressions.manage")
    record = records.suppression(suppressions.remove(call.db, srv.id, address))
    return {"suppression": record, "deleted": True}
