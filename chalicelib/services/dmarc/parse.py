"""Reading an aggregate report out of the mail that carries it. Everything in it is
untrusted, so every step has a limit and a refusal (``Refused``, whose message says why):

- MIME: the standard library's parser; the first part that is a gzip stream, a zip archive
  or XML (told by its first bytes, not by its declared type: reporters label them
  application/gzip, application/zip, application/octet-stream or text/xml) is the report.
- Decompression: gzip is inflated through zlib in one bounded call and a zip member through
  ``zipfile``'s bounded reads; either stops one byte past DMARC_REPORT_MAX_BYTES and refuses
  (a zip bomb never inflates further). An encrypted member, an archive of more than
  ``MAX_MEMBERS`` files or none that looks like the report is refused.
- XML: defusedxml (pinned) with ``forbid_dtd``: a document type declaration of any kind, so
  every entity (billion laughs, external entities), is refused before anything is expanded.
  The document is read incrementally (each ``<record>`` is taken and cleared), so memory
  stays near the size of the XML itself; past ``MAX_RECORDS`` it is refused.
- Values: report_id, org_name, the date range and the policy's domain are required; each row
  needs an IP address and a count; text is cut to the columns' sizes.

Element names are matched without their namespace: reports come with none (RFC 7489), with
XML Schema instance declarations (Microsoft) or DMARCbis's namespace.
"""
from __future__ import annotations

import io
import ipaddress
import zlib
from datetime import datetime, timezone

from chalicelib.config import get_settings

MAX_MEMBERS = 16
MAX_RECORDS = 100_000
MAX_COUNT = 2**40


class Refused(ValueError):
    """The mail holds no report that can be read within the limits; says why."""


# --- finding and unpacking the attachment ----------------------------------------------------

def _kind(payload: bytes) -> str | None:
    if payload[:2] == b"\x1f\x8b":
        return "gzip"
    if payload[:4] == b"PK\x03\x04":
        return "zip"
    head = payload[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"<?xml") or head.startswith(b"<feedback") or \
            (head.startswith(b"<") and b"feedback" in head):
        return "xml"
    return None


def _attachment(raw: bytes) -> tuple[str, bytes]:
    from email import policy
    from email.parser import BytesParser

    message = BytesParser(policy=policy.compat32).parsebytes(raw)
    for part in message.walk():
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True) or b""
        kind = _kind(payload)
        if kind is not None:
            return kind, payload
    raise Refused("the message has no DMARC aggregate report (XML, gzip or zip) attached")


def _gunzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise Refused(f"the gzip attachment is damaged ({exc})") from None
    if len(out) > limit:
        raise Refused(f"the gzip attachment inflates past {limit} bytes")
    if not inflater.eof:
        raise Refused("the gzip attachment is truncated")
    return out


def _unzip(data: bytes, limit: int) -> bytes:
    import zipfile

    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = [m for m in archive.infolist() if not m.is_dir()]
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise Refused(f"the zip attachment is damaged ({exc})") from None
    if not members or len(members) > MAX_MEMBERS:
        raise Refused(f"the zip attachment holds {len(members)} files; a report is one XML file")
    xml = [m for m in members if m.filename.lower().endswith(".xml")]
    member = xml[0] if xml else members[0] if len(members) == 1 else None
    if member is None:
        raise Refused("the zip attachment holds no .xml file")
    if member.flag_bits & 0x1:
        raise Refused("the zip attachment is encrypted")
    try:
        with archive.open(member) as fh:
            out = fh.read(limit + 1)
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, ValueError, EOFError,
            zlib.error) as exc:
        raise Refused(f"the zip attachment cannot be read ({exc})") from None
    if len(out) > limit:
        raise Refused(f"the zip attachment inflates past {limit} bytes")
    return out


def unpack(raw: bytes) -> tuple[str, bytes]:
    """(attachment kind: xml, gzip or zip; the report's XML bytes) of a report mail."""
    limit = get_settings().dmarc_report_max_bytes
    kind, payload = _attachment(raw)
    if kind == "gzip":
        xml = _gunzip(payload, limit)
    elif kind == "zip":
        xml = _unzip(payload, limit)
    else:
        xml = payload
    if len(xml) > limit:
        raise Refused(f"the report is larger than {limit} bytes")
    if _kind(xml) != "xml":
        raise Refused(f"the {kind} attachment does not hold XML")
    return kind, xml


# --- the XML ----------------------------------------------------------------------------------

def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _child(elem, name: str):
    for child in elem:
        if _local(child.tag) == name:
            return child
    return None


def _children(elem, name: str) -> list:
    return [child for child in elem if _local(child.tag) == name] if elem is not None else []


def _text(elem, *path: str, size: int = 255) -> str | None:
    for name in path:
        if elem is None:
            return None
        elem = _child(elem, name)
    if elem is None or elem.text is None:
        return None
    value = " ".join(elem.text.split())
    return value[:size] or None


def _int(value: str | None, what: str, maximum: int) -> int:
    try:
        number = int(value or "")
    except ValueError:
        raise Refused(f"{what} is not a number: {value!r}") from None
    if not 0 <= number <= maximum:
        raise Refused(f"{what} is out of range: {number}")
    return number


def _time(value: str | None, what: str) -> datetime:
    seconds = _int(value, what, 253402300799)  # up to 9999-12-31
    return datetime.fromtimestamp(seconds, timezone.utc).replace(tzinfo=None)


def _metadata(elem) -> dict:
    report_id = _text(elem, "report_id")
    reporter = _text(elem, "org_name") or _text(elem, "email")
    if not report_id or not reporter:
        raise Refused("the report has no report_id or org_name")
    begin = _time(_text(elem, "date_range", "begin"), "date_range/begin")
    end = _time(_text(elem, "date_range", "end"), "date_range/end")
    if end < begin:
        raise Refused("the report's date_range ends before it begins")
    errors = [" ".join((e.text or "").split())[:500] for e in _children(elem, "error")]
    return {"reporter": reporter, "reporter_email": _text(elem, "email"),
            "extra_contact": _text(elem, "extra_contact_info"), "report_id": report_id,
            "begin_at": begin, "end_at": end, "errors": [e for e in errors if e] or None}


POLICY_TAGS = ("domain", "adkim", "aspf", "p", "sp", "pct", "np", "fo")


def _policy(elem) -> dict:
    policy = {tag: _text(elem, tag) for tag in POLICY_TAGS}
    if not policy["domain"]:
        raise Refused("the report's policy_published has no domain")
    policy["domain"] = policy["domain"].lower().rstrip(".")
    return policy


def _lower(value: str | None) -> str | None:
    return value.lower() if value else None


def _record(elem, index: int) -> dict:
    row = _child(elem, "row")
    where = f"record {index}"
    source = _text(row, "source_ip", size=64)
    try:
        source_ip = str(ipaddress.ip_address(source or ""))
    except ValueError:
        raise Refused(f"{where}: source_ip {source!r} is not an IP address") from None
    count = _int(_text(row, "count"), f"{where}: count", MAX_COUNT)
    evaluated = _child(row, "policy_evaluated") if row is not None else None
    spf_aligned = _lower(_text(evaluated, "spf")) == "pass"
    dkim_aligned = _lower(_text(evaluated, "dkim")) == "pass"
    reasons = [{"type": _text(r, "type", size=64), "comment": _text(r, "comment", size=500)}
               for r in _children(evaluated, "reason")]
    identifiers = _child(elem, "identifiers")
    auth = _child(elem, "auth_results")
    dkim = [{"domain": _lower(_text(d, "domain")), "selector": _text(d, "selector", size=63),
             "result": _lower(_text(d, "result", size=16)),
             "human_result": _text(d, "human_result", size=500)}
            for d in _children(auth, "dkim")]
    spf = [{"domain": _lower(_text(s, "domain")), "scope": _lower(_text(s, "scope", size=16)),
            "result": _lower(_text(s, "result", size=16))} for s in _children(auth, "spf")]
    # The DKIM result shown: a passing signature if there is one (the From domain's first).
    best_dkim = sorted(dkim, key=lambda d: (d["result"] != "pass",))[:1]
    return {
        "source_ip": source_ip, "count": count,
        "disposition": (_lower(_text(evaluated, "disposition", size=16)) or "none"),
        "spf_aligned": spf_aligned, "dkim_aligned": dkim_aligned,
        "passed": spf_aligned or dkim_aligned,
        "spf_result": spf[0]["result"] if spf else None,
        "spf_domain": spf[0]["domain"] if spf else None,
        "dkim_result": best_dkim[0]["result"] if best_dkim else None,
        "dkim_domain": best_dkim[0]["domain"] if best_dkim else None,
        "dkim_selector": best_dkim[0]["selector"] if best_dkim else None,
        "header_from": _lower(_text(identifiers, "header_from")),
        "envelope_from": _lower(_text(identifiers, "envelope_from")),
        "envelope_to": _lower(_text(identifiers, "envelope_to")),
        "reasons": reasons or None,
        "auth_results": {"dkim": dkim, "spf": spf},
    }


def parse_xml(xml: bytes) -> dict:
    """The report's metadata, published policy and records."""
    from xml.etree.ElementTree import ParseError

    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import iterparse

    metadata = policy = None
    records: list[dict] = []
    root_seen = False
    try:
        for event, elem in iterparse(io.BytesIO(xml), events=("start", "end"),
                                     forbid_dtd=True, forbid_entities=True,
                                     forbid_external=True):
            name = _local(elem.tag)
            if event == "start":
                if not root_seen:
                    root_seen = True
                    if name != "feedback":
                        raise Refused(f"the XML is not a DMARC report (root <{name}>)")
                continue
            if name == "record":
                if len(records) >= MAX_RECORDS:
                    raise Refused(f"the report has more than {MAX_RECORDS} records")
                records.append(_record(elem, len(records) + 1))
                elem.clear()
            elif name == "report_metadata" and metadata is None:
                metadata = _metadata(elem)
                elem.clear()
            elif name == "policy_published" and policy is None:
                policy = _policy(elem)
                elem.clear()
    except DefusedXmlException as exc:
        raise Refused(f"the XML declares a DTD or entities, which reports never need "
                      f"({type(exc).__name__})") from None
    except ParseError as exc:
        raise Refused(f"the XML is not well-formed ({exc})") from None
    if metadata is None or policy is None:
        raise Refused("the XML has no report_metadata or policy_published")
    return {**metadata, "policy": policy, "records": records}


def read(raw: bytes) -> dict:
    """The report carried by the mail ``raw``; raises Refused."""
    kind, xml = unpack(raw)
    return {**parse_xml(xml), "attachment": kind}
