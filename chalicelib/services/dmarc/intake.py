"""Taking in a report mailed to a domain's report address (``addresses.py``): read it
(``parse.py``), check it is about that domain, store it with one row per record.

A report is about the domain when its policy_published domain is the domain, a subdomain
of it (a subdomain's own DMARC record may send its reports here too) or its parent (the
tenant put our address into the organizational domain's record). Anything else is refused:
the address is public (it is in DNS), so a report about somebody else's domain is noise.

Refusals raise ``errors.ValidationError``: the gateway answers 554 with the reason, so the
reporter learns it (nothing was accepted, nothing is lost), and each is logged as
``dmarc.refused`` with the domain, the sender and the reason. A report already stored (the
same reporter and report_id for the domain: a resend) is accepted and not stored twice.
"""
from __future__ import annotations

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from chalicelib import errors, observability
from chalicelib.db.models import DmarcRecord, DmarcReport, Domain, Server
from chalicelib.services.dmarc import parse


def _refuse(reason: str, **fields) -> errors.ValidationError:
    observability.count("dmarc_refused")
    observability.log("dmarc.refused", "warning", reason=reason, **fields)
    return errors.ValidationError(f"DMARC report refused: {reason}")


def read(raw: bytes, *, mail_from: str | None = None) -> dict:
    """The report in the mail ``raw``, or ValidationError (logged) saying why not."""
    try:
        return parse.read(raw)
    except parse.Refused as exc:
        raise _refuse(str(exc), mail_from=mail_from, size=len(raw)) from None


def about(domain_name: str, policy_domain: str) -> bool:
    return policy_domain == domain_name or policy_domain.endswith("." + domain_name) or \
        domain_name.endswith("." + policy_domain)


def accepting_domain(db: Session, domain_id: int, report: dict, *,
                     mail_from: str | None = None) -> Domain:
    """The domain ``report`` is stored for; ValidationError (logged) when it is gone or the
    report is about another domain. Writes nothing."""
    domain = db.get(Domain, domain_id)
    if domain is None:
        raise _refuse("the domain of this report address was deleted", domain_id=domain_id,
                      mail_from=mail_from)
    policy_domain = report["policy"]["domain"]
    if not about(domain.name, policy_domain):
        raise _refuse(f"the report is about {policy_domain}, not {domain.name}",
                      domain_id=domain_id, mail_from=mail_from, reporter=report["reporter"])
    return domain


def store(db: Session, domain_id: int, report: dict, *,
          mail_from: str | None = None) -> DmarcReport:
    """Store ``report`` (``read``'s answer) for the domain; ValidationError when it is not
    about it or the domain is gone (``accepting_domain``: decided before anything is
    written)."""
    domain = accepting_domain(db, domain_id, report, mail_from=mail_from)
    existing = db.scalar(select(DmarcReport).where(
        DmarcReport.domain_id == domain.id, DmarcReport.reporter == report["reporter"],
        DmarcReport.report_id == report["report_id"]))
    if existing is not None:
        observability.log("dmarc.duplicate", domain_id=domain.id, report=existing.id,
                          reporter=report["reporter"], report_id=report["report_id"])
        return existing
    organization_id = db.scalar(select(Server.organization_id)
                                .where(Server.id == domain.server_id))
    records = report["records"]
    stored = DmarcReport(
        organization_id=organization_id, server_id=domain.server_id, domain_id=domain.id,
        reporter=report["reporter"], reporter_email=report["reporter_email"],
        extra_contact=report["extra_contact"], report_id=report["report_id"],
        begin_at=report["begin_at"], end_at=report["end_at"], policy=report["policy"],
        errors=report["errors"], attachment=report["attachment"],
        mail_from=(mail_from or "")[:255] or None,
        messages=sum(r["count"] for r in records),
        passed=sum(r["count"] for r in records if r["passed"]))
    db.add(stored)
    db.flush()
    if records:
        common = {"organization_id": organization_id, "server_id": domain.server_id,
                  "domain_id": domain.id, "report_id": stored.id,
                  "begin_at": stored.begin_at, "reporter": stored.reporter}
        db.execute(insert(DmarcRecord), [{**common, **r} for r in records])
    observability.count("dmarc_reports")
    observability.log("dmarc.received", domain_id=domain.id, server_id=domain.server_id,
                      report=stored.id, reporter=stored.reporter, report_id=stored.report_id,
                      records=len(records), messages=stored.messages, passed=stored.passed)
    return stored


def receive(db: Session, *, domain_id: int, mail_from: str | None, raw: bytes) -> DmarcReport:
    """Read and store the report mailed to a domain's report address."""
    return store(db, domain_id, read(raw, mail_from=mail_from), mail_from=mail_from)
