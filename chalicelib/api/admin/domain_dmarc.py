"""Management: a sending domain's DMARC aggregate reports (ours; issue 27). The spec has no
such endpoints; they follow its conventions: under the domain's admin path, the envelope,
``page``/``per_page`` pagination, ``from``/``to`` as on GET /stats, 422 ValidationError
naming the parameter, 404 NotFound. Reads need ``domains.read`` (any role)."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.response_builders import dmarc as records
from chalicelib.services.dmarc import reports
from chalicelib.services.domains import manage
from chalicelib.services.organizations import lookup
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)
DOMAIN = "/organizations/{org}/servers/{server}/domains/{name}"
RANGE = (q.date_time("from", "Reports whose period begins at or after this (default: 30 days "
                             "before to)"),
         q.date_time("to", "... and before this (default: now)"))
RESULT = q.string("result", "Only rows that passed DMARC (SPF or DKIM aligned) or failed it.",
                  enum=reports.RESULTS)


def _domain(call: Call, org: str, server: str, name: str):
    srv = lookup.server(call.db, call.principal, org, server, "domains.read")
    return manage.find_domain(call.db, srv, name)


def _range(call: Call):
    return reports.resolve_range(call.query_datetime("from"), call.query_datetime("to"))


@endpoint(bp, DOMAIN + "/dmarc_summary", "GET", auth=ADMIN, query=RANGE,
          response=response_shapes.one("dmarc_summary", shape.DmarcSummary))
def dmarc_summary(call: Call, org: str, server: str, name: str):
    domain = _domain(call, org, server, name)
    return {"dmarc_summary": reports.summary(call.db, domain, *_range(call))}


@endpoint(bp, DOMAIN + "/dmarc_reports", "GET", auth=ADMIN, query=(*RANGE, *q.PAGINATION),
          response=response_shapes.page("dmarc_reports", shape.DmarcReport))
def list_dmarc_reports(call: Call, org: str, server: str, name: str):
    domain = _domain(call, org, server, name)
    rows, pagination = paginate(call.db, reports.reports_stmt(domain.id, *_range(call)),
                                *call.page_args())
    return {"dmarc_reports": [records.report(r) for r in rows], "pagination": pagination}


@endpoint(bp, DOMAIN + "/dmarc_reports/{id}", "GET", auth=ADMIN,
          response=response_shapes.one("dmarc_report", shape.DmarcReport))
def show_dmarc_report(call: Call, org: str, server: str, name: str, id: int):
    domain = _domain(call, org, server, name)
    return {"dmarc_report": records.report(reports.find_report(call.db, domain.id, id))}


@endpoint(bp, DOMAIN + "/dmarc_records", "GET", auth=ADMIN, query=(
    *RANGE, RESULT, q.string("source_ip", "Only rows from this source address."),
    q.integer("report", "Only the rows of this report (its id).", minimum=1,
              maximum=2**63 - 1), *q.PAGINATION),
          response=response_shapes.page("dmarc_records", shape.DmarcRecord))
def list_dmarc_records(call: Call, org: str, server: str, name: str):
    domain = _domain(call, org, server, name)
    stmt = reports.records_stmt(domain.id, *_range(call), result=call.query_str("result"),
                                source_ip=call.query_str("source_ip"),
                                report_id=call.query_int("report"))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    networks = reports.own_networks(call.db) if rows else []
    return {"dmarc_records": [records.record(r, networks) for r in rows],
            "pagination": pagination}


@endpoint(bp, DOMAIN + "/dmarc_sources", "GET", auth=ADMIN, query=(*RANGE, RESULT,
                                                                   *q.PAGINATION),
          response=response_shapes.page("dmarc_sources", shape.DmarcSource))
def list_dmarc_sources(call: Call, org: str, server: str, name: str):
    domain = _domain(call, org, server, name)
    page, per_page = call.page_args()
    found, pagination = reports.sources(call.db, domain.id, *_range(call),
                                        result=call.query_str("result"), page=page,
                                        per_page=per_page)
    return {"dmarc_sources": found, "pagination": pagination}
