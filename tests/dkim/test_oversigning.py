"""Over-signing, judged by two independent verifiers: dkimpy, and Perl's Mail::DKIM (Debian's
libmail-dkim-perl, which .ci/run installs; the tests that need it skip without it) asking the
test DNS server for the key. A message we sign passes both; the same message with a
Reply-To, Cc or Sender added after signing (by a relay, or by someone replaying it) fails
both, because every one of the usual fields is signed once more than it appears, absent ones
included (signer.OVERSIGNED_HEADERS, as OpenDKIM's OversignHeaders)."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest

from chalicelib.services.dkim import signer as ds
from tests.dns_server import LoopbackDNS
from tests.support import Api, unique, wait_for

VERIFIER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mail_dkim_verify.pl")
ADDED = {"reply-to": b"Reply-To: Mallory <mallory@attacker.example>\r\n",
         "cc": b"Cc: mallory@attacker.example\r\n",
         "sender": b"Sender: mallory@attacker.example\r\n"}
MESSAGE = (b"From: Shop <no-reply@example.com>\r\n"
           b"To: Carol <carol@example.net>\r\n"
           b"Subject: Your receipt\r\n"
           b"Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n"
           b"Message-ID: <receipt-7@example.com>\r\n"
           b"MIME-Version: 1.0\r\n"
           b"Content-Type: text/plain; charset=utf-8\r\n"
           b"\r\n"
           b"Thanks for your order.\r\n")


@functools.lru_cache(maxsize=1)
def mail_dkim_missing() -> str | None:
    if not shutil.which("perl"):
        return "no perl"
    probe = subprocess.run(["perl", "-MMail::DKIM::Verifier", "-MNet::DNS::Resolver", "-e1"],
                           capture_output=True)
    return None if probe.returncode == 0 else \
        "no Mail::DKIM (apt-get install libmail-dkim-perl)"


def needs_mail_dkim():
    reason = mail_dkim_missing()
    if reason:
        pytest.skip(reason)


def with_header_added(message: bytes, field: bytes) -> bytes:
    """``field`` added at the end of the header block, as a relay appends one."""
    head, sep, body = message.partition(b"\r\n\r\n")
    return head + b"\r\n" + field.rstrip(b"\r\n") + sep + body


def variants(signed: bytes) -> dict[str, bytes]:
    return {"as-signed": signed,
            **{f"with-{name}": with_header_added(signed, field) for name, field in ADDED.items()}}


def txt_zone(record_name: str, record_value: str) -> dict:
    quoted = " ".join(f'"{part}"' for part in ds.dns_txt_strings(record_value))
    return {(record_name.rstrip(".") + ".", "TXT"): [quoted]}


def mail_dkim_results(messages: dict[str, bytes], zone: dict, tmp_path) -> dict[str, str]:
    """Mail::DKIM's result per message, the key looked up in ``zone`` over real DNS."""
    files = {}
    for name, data in messages.items():
        path = tmp_path / f"{name}.eml"
        path.write_bytes(data)
        files[str(path)] = name
    with LoopbackDNS(zone) as dns:
        out = subprocess.run(["perl", VERIFIER, str(dns.port), *files], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    results = {}
    for line in out.splitlines():
        path, result, *_ = line.split(" ", 2)
        results[files[path]] = result
    return results


EXPECTED = {"as-signed": "pass", "with-reply-to": "fail", "with-cc": "fail",
            "with-sender": "fail"}


@pytest.fixture(scope="module")
def signed():
    pem, public = ds.generate_key()
    message = ds.sign_message(MESSAGE, domain="example.com", selector="s1", private_pem=pem)
    return message, "s1._domainkey.example.com", ds.dns_record_value(public)


def test_absent_usual_fields_are_signed_once(signed):
    message, _, _ = signed
    header = message.split(b"\r\n\r\n", 1)[0].split(b"\r\nFrom:", 1)[0]
    h = [n.strip() for n in ds.dkim.util.parse_tag_value(
        header.split(b":", 1)[1])[b"h"].split(b":")]
    for name in (b"reply-to", b"cc", b"sender", b"in-reply-to", b"references",
                 b"list-unsubscribe", b"list-unsubscribe-post", b"content-transfer-encoding"):
        assert h.count(name) == 1, name       # absent: listed once (its absence signed)
    for name in (b"from", b"to", b"subject", b"date", b"message-id", b"mime-version",
                 b"content-type"):
        assert h.count(name) == 2, name       # present once: listed twice
    assert b"bcc" not in h and b"received" not in h


def test_dkimpy_refuses_a_field_added_after_signing(signed):
    message, name, value = signed
    results = {label: ds.verify(data, {name: value}) for label, data in variants(message).items()}
    assert results == {label: expected == "pass" for label, expected in EXPECTED.items()}


def test_mail_dkim_refuses_a_field_added_after_signing(signed, tmp_path):
    needs_mail_dkim()
    message, name, value = signed
    assert mail_dkim_results(variants(message), txt_zone(name, value), tmp_path) == EXPECTED


def test_the_delivered_message_is_oversigned(api, tenant, mx, tmp_path):
    """What the delivery worker sends (HTTP send -> MX on loopback), judged by both."""
    to = f"{unique('os')}@recipient.example"
    Api.data(api.post("/api/v2/server/messages", {
        "from": f"App <app@{tenant.domain}>", "to": [to], "subject": "Receipt",
        "text_body": "Thanks"}, server_key=tenant.api_key), 201)
    [received] = wait_for(lambda: mx.received_for(to), 20, message="the message at the MX")
    domain = Api.data(api.get(f"{tenant.server_path}/domains/{tenant.domain}"))["domain"]
    record = domain["dns_records"]["dkim"]
    messages = variants(received.data)
    assert {label: ds.verify(data, {record["name"]: record["value"]})
            for label, data in messages.items()} == \
        {label: expected == "pass" for label, expected in EXPECTED.items()}
    if mail_dkim_missing():
        pytest.skip(f"Mail::DKIM's half: {mail_dkim_missing()}")
    assert mail_dkim_results(messages, txt_zone(record["name"], record["value"]),
                             tmp_path) == EXPECTED
