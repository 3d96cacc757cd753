"""Management: a sending domain's tracking switches (the spec lists GET/DELETE/verify on
domains; this PATCH adds only ``track_opens``/``track_clicks``)."""
from __future__ import annotations

from chalice import Blueprint
from pydantic import ConfigDict

from chalicelib.api import records
from chalicelib.api.framework import ADMIN, Call, endpoint
from chalicelib.api.schemas import Schema
from chalicelib.services import domains, lookup

bp = Blueprint(__name__)


class DomainTrackingUpdate(Schema):
    model_config = ConfigDict(strict=True)  # "yes" or 1 is not a boolean here

    track_opens: bool | None = None
    track_clicks: bool | None = None


@endpoint(bp, "/organizations/{org}/servers/{server}/domains/{name}", "PATCH", auth=ADMIN,
          body=DomainTrackingUpdate)
def update_domain_tracking(call: Call, org: str, server: str, name: str):
    srv = lookup.server(call.db, call.principal, org, server, "domains.manage")
    domain = domains.find_domain(call.db, srv, name)
    for key in ("track_opens", "track_clicks"):
        value = getattr(call.body, key)
        if value is not None:
            setattr(domain, key, value)
    return {"domain": records.domain(domain)}
