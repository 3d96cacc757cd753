"""Helpers for DMARC report tests: reports zipped and attached as reporters send them, a
hostile XML, the domain's record, its report address and a send to it."""
from __future__ import annotations

import io
import zipfile

from tests.dmarc import samples
from tests.support import Api
from tests.support.smtp import plain_client

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE feedback [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol9 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<feedback><report_metadata><org_name>&lol9;</org_name></report_metadata></feedback>"""


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def attached(kind: str, payload: bytes) -> bytes:
    from email.mime.application import MIMEApplication

    part = MIMEApplication(payload, kind)
    part.add_header("Content-Disposition", "attachment", filename=f"report.{kind}")
    return samples.envelope("plain", TO, "example.com", b"", report=part)


def report_address(api, tenant) -> str:
    value = domain_record(api, tenant)["dns_records"]["dmarc"]["value"]
    return value.split("rua=mailto:", 1)[1]


def send(stack, to: str, raw: bytes, mail_from: str = "noreply-dmarc-support@google.com"):
    with plain_client(stack.smtp_port) as client:
        return client.sendmail(mail_from, [to], raw)


TO = "dmarc+0123@rp.mx.service.test"


def domain_record(api, tenant) -> dict:
    return Api.data(api.get(tenant.server_path + f"/domains/{tenant.domain}"))["domain"]
