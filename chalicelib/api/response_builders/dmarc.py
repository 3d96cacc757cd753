"""Records of a domain's DMARC reports and their rows (services/dmarc/). Shapes in
chalicelib/response_shapes/management.py."""
from __future__ import annotations

from chalicelib.db.models import DmarcRecord, DmarcReport
from chalicelib.services.dmarc import reports
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import management as shape


@builds(shape.DmarcReport)
def report(row: DmarcReport) -> dict:
    policy = {tag: (row.policy or {}).get(tag) for tag in
              ("domain", "adkim", "aspf", "p", "sp", "pct", "np", "fo")}
    return {"id": row.id, "reporter": row.reporter, "reporter_email": row.reporter_email,
            "extra_contact": row.extra_contact, "report_id": row.report_id,
            "begin_at": row.begin_at, "end_at": row.end_at, "policy": policy,
            "errors": list(row.errors or []), "attachment": row.attachment,
            "mail_from": row.mail_from, "messages": row.messages, "passed": row.passed,
            "failed": row.messages - row.passed, "received_at": row.created_at}


@builds(shape.DmarcRecord)
def record(row: DmarcRecord, networks) -> dict:
    """``networks``: reports.own_networks, read once per answer."""
    known = reports.known_as(networks, row.source_ip)
    return {"id": row.id, "report": row.report_id, "reporter": row.reporter,
            "begin_at": row.begin_at, "source_ip": row.source_ip, "ours": known is not None,
            "known_as": known, "count": row.count, "disposition": row.disposition,
            "dmarc": "pass" if row.passed else "fail", "spf_aligned": row.spf_aligned,
            "dkim_aligned": row.dkim_aligned, "spf_result": row.spf_result,
            "spf_domain": row.spf_domain, "dkim_result": row.dkim_result,
            "dkim_domain": row.dkim_domain, "dkim_selector": row.dkim_selector,
            "header_from": row.header_from, "envelope_from": row.envelope_from,
            "envelope_to": row.envelope_to, "reasons": list(row.reasons or []),
            "auth_results": row.auth_results or {"dkim": [], "spf": []}}
