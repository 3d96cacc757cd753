"""DMARC aggregate report mails as the big receivers send them, built from the report files
in tests/data/dmarc/ (each as its sender writes it, for example.com on 2025-11-24): Google
zips the XML (application/zip), Microsoft (Outlook.com) and Yahoo gzip it
(application/gzip), smaller receivers often attach plain XML. ``mail`` puts a report into
its sender's envelope for another domain and day, as the tests need."""
from __future__ import annotations

import gzip
import io
import os
import re
import zipfile
from datetime import datetime, timezone
from email import policy
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.utils import formatdate

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                    "dmarc")
DAY = datetime(2025, 11, 24)  # the day the files report on

SENDERS = {
    # sender: (file prefix, From, Subject's submitter, attachment kind, body text)
    "google": ("google.com", "noreply-dmarc-support@google.com", "google.com", "zip", ""),
    "outlook": ("protection.outlook.com", "DMARC Aggregate Report <dmarcreport@microsoft.com>",
                "protection.outlook.com", "gzip",
                "This is a DMARC aggregate report from Microsoft Corporation. For Emails "
                "received between 2025-11-24 00:00:00 UTC to 2025-11-25 00:00:00 UTC."),
    "yahoo": ("yahoo.com", "Yahoo DMARC Report <noreply@dmarc.yahoo.com>", "Yahoo", "gzip",
              "This is an aggregate report from Yahoo."),
    "plain": ("mail.example.org", "DMARC reporter <dmarc-reports@mail.example.org>",
              "mail.example.org", "xml", "DMARC aggregate report attached."),
}


def xml(sender: str, domain: str = "example.com", day: datetime | None = None) -> bytes:
    """The sender's report file, about ``domain`` and for ``day`` (UTC) instead."""
    prefix = SENDERS[sender][0]
    [name] = [n for n in os.listdir(DATA) if n.startswith(prefix + "!")]
    with open(os.path.join(DATA, name), "rb") as fh:
        data = fh.read()
    data = re.sub(rb"\bexample\.com\b", domain.encode(), data)
    if day is not None:
        shift = int((day - DAY).total_seconds())
        data = re.sub(rb"<(begin|end)>(\d+)</",
                      lambda m: b"<%s>%d</" % (m.group(1), int(m.group(2)) + shift), data)
    return data


def _report_id(data: bytes) -> str:
    return re.search(rb"<report_id>([^<]+)</report_id>", data).group(1).decode()


def _range(data: bytes) -> tuple[int, int]:
    begin = int(re.search(rb"<begin>(\d+)</begin>", data).group(1))
    end = int(re.search(rb"<end>(\d+)</end>", data).group(1))
    return begin, end


def attachment(kind: str, filename: str, data: bytes) -> MIMEApplication:
    if kind == "zip":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(filename + ".xml", data)
        part = MIMEApplication(buffer.getvalue(), "zip")
        name = filename + ".zip"
    elif kind == "gzip":
        part = MIMEApplication(gzip.compress(data), "gzip")
        name = filename + ".xml.gz"
    else:
        part = MIMEApplication(data, "xml")
        name = filename + ".xml"
    part.set_param("name", name)
    part.add_header("Content-Disposition", "attachment", filename=name)
    return part


def envelope(sender: str, to: str, domain: str, data: bytes, *, kind: str | None = None,
             report: MIMEApplication | None = None) -> bytes:
    """The mail ``sender`` sends to ``to`` carrying ``data`` (or an attachment made by the
    test: ``report``)."""
    prefix, from_, submitter, default_kind, text = SENDERS[sender]
    begin, end = _range(data) if report is None else (0, 0)
    report_id = _report_id(data) if report is None else "test"
    msg = MIMEMultipart()
    msg["From"] = from_
    msg["To"] = to
    msg["Subject"] = f"Report Domain: {domain} Submitter: {submitter} Report-ID: <{report_id}>"
    msg["Date"] = formatdate(datetime.now(timezone.utc).timestamp(), usegmt=True)
    msg["Message-ID"] = f"<{report_id}@{prefix}>"
    msg.attach(MIMEText(text, "plain"))
    msg.attach(report if report is not None else
               attachment(kind or default_kind, f"{prefix}!{domain}!{begin}!{end}", data))
    return msg.as_bytes(policy=policy.SMTP)  # CRLF line ends, as on the wire


def mail(sender: str, to: str, domain: str, day: datetime | None = None) -> bytes:
    return envelope(sender, to, domain, xml(sender, domain, day))


POOL = "DMARC samples"
OURS = "203.0.113.5"  # the samples' own sending address


def ensure_pool(api) -> str:
    """An IP pool holding the samples' sending address (made once; pools are instance-wide),
    so reports show it as ours. Returns its name."""
    from tests.support import Api

    pools = Api.data(api.get("/api/v2/admin/ip_pools", params={"per_page": 100}))["ip_pools"]
    if not any(p["name"] == POOL for p in pools):
        pool = Api.data(api.post("/api/v2/admin/ip_pools", {"name": POOL}), 201)["ip_pool"]
        Api.data(api.post(f"/api/v2/admin/ip_pools/{pool['id']}/ip_addresses",
                          {"ipv4": OURS, "hostname": "o1.mx.service.test"}), 201)
    return POOL
