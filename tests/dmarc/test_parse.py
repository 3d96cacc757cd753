"""Reading reports out of their mail: the formats Google, Microsoft, Yahoo and smaller
receivers send, and the refusals that keep untrusted XML and archives within limits (a zip
or gzip bomb stops one byte past DMARC_REPORT_MAX_BYTES; any DTD, so billion laughs and
external entities, is refused before expansion)."""
from __future__ import annotations

import gzip
from datetime import datetime

import pytest

from chalicelib.services.dmarc import parse
from tests.dmarc import samples
from tests.support.dmarc import BILLION_LAUGHS, attached, zipped
from tests.support.dmarc import TO



def read(raw: bytes) -> dict:
    return parse.read(raw)


def refused(raw: bytes) -> str:
    with pytest.raises(parse.Refused) as caught:
        parse.read(raw)
    return str(caught.value)


def with_xml(data: bytes, kind: str = "xml") -> bytes:
    return samples.envelope("plain", TO, "example.com", data,
                            report=samples.attachment(kind, "r", data))


def test_google_zip_report():
    report = read(samples.mail("google", TO, "example.com"))
    assert (report["attachment"], report["reporter"], report["report_id"]) == \
        ("zip", "google.com", "5717107811868587391")
    assert report["reporter_email"] == "noreply-dmarc-support@google.com"
    assert report["extra_contact"] == "https://support.google.com/a/answer/2466580"
    assert (report["begin_at"], report["end_at"]) == \
        (datetime(2025, 11, 24), datetime(2025, 11, 24, 23, 59, 59))
    assert report["policy"] == {"domain": "example.com", "adkim": "r", "aspf": "r", "p": "none",
                                "sp": "none", "pct": "100", "np": "none", "fo": None}
    ours, dkim_only, vendor = report["records"]
    assert (ours["source_ip"], ours["count"], ours["passed"]) == ("203.0.113.5", 12, True)
    assert (ours["dkim_domain"], ours["dkim_selector"], ours["spf_domain"]) == \
        ("example.com", "mail", "rp.example.com")
    # DKIM aligned, SPF passed for another domain: DMARC passes on DKIM alone
    assert (dkim_only["dkim_aligned"], dkim_only["spf_aligned"], dkim_only["passed"]) == \
        (True, False, True)
    assert dkim_only["spf_result"] == "pass"
    # a vendor signing with its own domain: both pass, neither aligned -> DMARC fails
    assert (vendor["passed"], vendor["dkim_result"], vendor["dkim_domain"]) == \
        (False, "pass", "crm-vendor.example.net")


def test_outlook_gzip_report_with_schema_namespaces():
    report = read(samples.mail("outlook", TO, "example.com"))
    assert (report["attachment"], report["reporter"]) == ("gzip", "Outlook.com")
    assert report["report_id"] == "e1a2c3d4f5a64b7c8d9e0f1a2b3c4d5e"
    assert report["policy"]["fo"] == "0"
    ours, spoof = report["records"]
    assert (ours["envelope_to"], ours["envelope_from"]) == ("outlook.com", "rp.example.com")
    assert (spoof["source_ip"], spoof["count"], spoof["passed"]) == ("192.0.2.77", 4, False)
    assert (spoof["spf_result"], spoof["dkim_result"]) == ("softfail", None)
    assert spoof["auth_results"] == {"dkim": [], "spf": [
        {"domain": "example.com", "scope": "mfrom", "result": "softfail"}]}


def test_yahoo_gzip_report_without_selectors_or_scopes():
    report = read(samples.mail("yahoo", TO, "example.com"))
    assert (report["attachment"], report["reporter"], report["report_id"]) == \
        ("gzip", "Yahoo", "1764031234.345675")
    assert report["policy"]["sp"] is None
    assert [(r["source_ip"], r["count"], r["passed"]) for r in report["records"]] == \
        [("203.0.113.5", 5, True), ("198.51.100.23", 1, False)]
    assert report["records"][0]["dkim_selector"] is None


def test_plain_xml_in_the_dmarcbis_namespace_with_reasons_and_errors():
    report = read(samples.mail("plain", TO, "example.com"))
    assert report["attachment"] == "xml"
    assert report["errors"] == ["one message had no From header and was not evaluated"]
    [row] = report["records"]
    assert (row["source_ip"], row["header_from"], row["passed"]) == \
        ("2001:db8::25", "news.example.com", True)
    assert row["reasons"] == [{"type": "forwarded", "comment": "arrived through a mailing list"}]
    assert row["auth_results"]["dkim"][0]["human_result"] == "body hash did not verify"



EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE feedback [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<feedback><report_metadata><org_name>&x;</org_name></report_metadata></feedback>"""


@pytest.mark.parametrize("kind", ["xml", "gzip", "zip"])
def test_billion_laughs_is_refused_in_any_wrapping(kind):
    assert "DTD" in refused(with_xml(BILLION_LAUGHS, kind))


def test_external_entities_and_plain_dtds_are_refused():
    assert "DTD" in refused(with_xml(EXTERNAL_ENTITY))
    plain_dtd = samples.xml("plain").replace(b"<feedback", b"<!DOCTYPE feedback>\n<feedback", 1)
    assert "DTD" in refused(with_xml(plain_dtd))






def test_zip_and_gzip_bombs_stop_at_the_limit(monkeypatch):
    monkeypatch.setenv("DMARC_REPORT_MAX_BYTES", "1MB")
    # 64 MB of zeros behind a valid report start: ~64 KB compressed
    bomb = samples.xml("google")[:200] + b"\0" * (64 * 1024 * 1024)
    archive = zipped({"report.xml": bomb})
    assert len(archive) < 200_000
    assert "inflates past 1048576 bytes" in refused(attached("zip", archive))
    gzipped = gzip.compress(bomb)
    assert "inflates past 1048576 bytes" in refused(attached("gzip", gzipped))
    # a plain XML attachment past the limit is refused as well
    big = samples.xml("plain").replace(b"</feedback>", b"<!--" + b"x" * 1_100_000 + b"--></feedback>")
    assert "larger than 1048576 bytes" in refused(with_xml(big))
    # below the limit the same reports are read
    monkeypatch.setenv("DMARC_REPORT_MAX_BYTES", "20MB")
    assert read(samples.mail("google", TO, "example.com"))["records"]


def test_damaged_or_odd_archives_are_refused():
    good = samples.xml("google")
    assert "truncated" in refused(attached("gzip", gzip.compress(good)[:-40]))
    assert "damaged" in refused(attached("gzip", b"\x1f\x8b" + b"not gzip at all"))
    assert "damaged" in refused(attached("zip", b"PK\x03\x04" + b"\0" * 40))
    many = zipped({f"r{i}.xml": good for i in range(parse.MAX_MEMBERS + 1)})
    assert f"holds {parse.MAX_MEMBERS + 1} files" in refused(attached("zip", many))
    assert "no .xml file" in refused(attached("zip", zipped({"a.txt": good, "b.txt": good})))
    assert "does not hold XML" in refused(attached("zip", zipped({"report.xml": b"\0\1\2"})))
    encrypted = bytearray(zipped({"report.xml": good}))
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = encrypted.find(signature) + flag_at
        encrypted[at] |= 0x1
    assert "encrypted" in refused(attached("zip", bytes(encrypted)))


def test_mail_without_a_report_and_xml_that_is_not_one_are_refused():
    no_report = b"From: a@example.org\r\nTo: " + TO.encode() + b"\r\nSubject: hi\r\n\r\nhello\r\n"
    assert "no DMARC aggregate report" in refused(no_report)
    assert "root <html>" in refused(with_xml(b"<?xml version='1.0'?><html><feedback/></html>"))
    assert "not well-formed" in refused(with_xml(b"<?xml version='1.0'?><feedback><oops></feedback>"))
    assert "no report_metadata" in refused(with_xml(b"<?xml version='1.0'?><feedback></feedback>"))


@pytest.mark.parametrize("change, reason", [
    ((b"<report_id>mail.example.org-20251124-0001</report_id>", b""), "no report_id"),
    ((b"<begin>1763942400</begin>", b"<begin>soon</begin>"), "date_range/begin is not a number"),
    ((b"<begin>1763942400</begin>", b"<begin>1763942400000000</begin>"), "out of range"),
    ((b"<end>1764028799</end>", b"<end>1</end>"), "ends before it begins"),
    ((b"<domain>example.com</domain>\n    <adkim>", b"<adkim>"), "policy_published has no domain"),
    ((b"2001:db8::25", b"not-an-address"), "record 1: source_ip 'not-an-address'"),
    ((b"<count>2</count>", b"<count>-2</count>"), "record 1: count is out of range"),
])
def test_missing_or_wrong_values_are_refused_naming_them(change, reason):
    data = samples.xml("plain")
    assert change[0] in data
    assert reason in refused(with_xml(data.replace(*change)))


def test_too_many_records_are_refused(monkeypatch):
    monkeypatch.setattr(parse, "MAX_RECORDS", 2)
    assert "more than 2 records" in refused(samples.mail("google", TO, "example.com"))
    assert read(samples.mail("outlook", TO, "example.com"))["records"]
