"""Management: a sending domain's settings (the spec lists GET/DELETE/verify on domains; this
PATCH adds ``track_opens``/``track_clicks``, the return-path host and the tracking host)."""
from __future__ import annotations

from chalice import Blueprint
from pydantic import ConfigDict, Field

from chalicelib import response_shapes
from chalicelib.api.response_builders import management
from chalicelib.api.framework import ADMIN, Call, endpoint
from chalicelib.api.request_bodies import Schema
from chalicelib.services.domains import manage
from chalicelib.services.organizations import lookup
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)


class DomainTrackingUpdate(Schema):
    model_config = ConfigDict(strict=True)  # "yes" or 1 is not a boolean here

    track_opens: bool | None = None
    track_clicks: bool | None = None
    # One DNS label each: <host>.<domain>. A changed host must be verified again.
    return_path_host: str | None = Field(default=None, max_length=63)
    # null removes the tracking domain (links go back to PUBLIC_URL).
    tracking_host: str | None = Field(default=None, max_length=63)


@endpoint(bp, "/organizations/{org}/servers/{server}/domains/{name}", "PATCH", auth=ADMIN,
          body=DomainTrackingUpdate,
          response=response_shapes.one("domain", shape.Domain))
def update_domain_tracking(call: Call, org: str, server: str, name: str):
    srv = lookup.server(call.db, call.principal, org, server, "domains.manage")
    domain = manage.find_domain(call.db, srv, name)
    for key in ("track_opens", "track_clicks"):
        value = getattr(call.body, key)
        if value is not None:
            setattr(domain, key, value)
    given = call.body.model_fields_set
    manage.update_hosts(domain, return_path_host=call.body.return_path_host,
                         tracking_host=call.body.tracking_host,
                         clear_tracking="tracking_host" in given and call.body.tracking_host is None)
    call.db.flush()
    return {"domain": management.domain(domain)}
