"""Handing one inbound message to its route's endpoint (no database in here).

* HTTP URL: a signed POST (``X-Service-Signature`` like webhooks) of either JSON with the
  parsed parts and the raw message in base64 (format ``json``), or the MIME source as is with
  ``Content-Type: message/rfc822`` (format ``raw``). 2xx delivers; 4xx other than 408/429 is a
  permanent failure; anything else (5xx, timeouts, refused connections) is retried.
* SMTP server: the message relayed to host:port for the original recipient (STARTTLS when
  offered).
* Email address: the message forwarded to the address's MX hosts (or DELIVERY_RELAY).
The URL and SMTP host pass the SSRF guard unless WEBHOOKS_ALLOW_PRIVATE_TARGETS is set.
"""
from __future__ import annotations

import base64
import json
import socket
import time
from dataclasses import dataclass
from chalicelib import statuses
from chalicelib.config import get_settings
from chalicelib.services.security import installation_keys, url_safety

DELIVERED, RETRY, FAILED = statuses.DELIVERED, statuses.RETRYING, statuses.FAILED
USER_AGENT = "email-service-inbound/1"
MAX_OUTPUT = 2048


@dataclass
class Attempt:
    status: str                 # Delivered, Retrying, Failed
    details: str
    host: str | None = None
    code: int | None = None
    output: str | None = None
    duration_ms: int = 0


def _addresses(msg, name: str) -> list[dict]:
    header = msg.get(name)
    if header is None:
        return []
    try:
        return [{"email": a.addr_spec, "name": a.display_name or None} for a in header.addresses]
    except Exception:  # noqa: BLE001  (a malformed header is passed as text below)
        return [{"email": None, "name": None, "raw": str(header)}]


def parse_parts(raw: bytes) -> dict:
    """The parts of a MIME message an endpoint usually wants, without the raw source."""
    from email import policy  # imported lazily: cold start
    from email.parser import BytesParser

    msg = BytesParser(policy=policy.default).parsebytes(raw)
    plain = html = None
    attachments = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        disposition = part.get_content_disposition()
        ctype = part.get_content_type()
        try:
            payload = part.get_payload(decode=True) or b""
        except Exception:  # noqa: BLE001
            payload = b""
        if disposition != "attachment" and ctype == "text/plain" and plain is None:
            plain = payload.decode(part.get_content_charset() or "utf-8", "replace")
        elif disposition != "attachment" and ctype == "text/html" and html is None:
            html = payload.decode(part.get_content_charset() or "utf-8", "replace")
        else:
            attachments.append({"filename": part.get_filename(), "content_type": ctype,
                                "size": len(payload),
                                "data_base64": base64.b64encode(payload).decode()})
    return {"subject": str(msg["Subject"]) if msg["Subject"] is not None else None,
            "message_id": str(msg["Message-ID"]) if msg["Message-ID"] is not None else None,
            "date": str(msg["Date"]) if msg["Date"] is not None else None,
            "from": _addresses(msg, "From"), "to": _addresses(msg, "To"),
            "cc": _addresses(msg, "Cc"), "reply_to": _addresses(msg, "Reply-To"),
            "headers": [[k, str(v)] for k, v in msg.items()],
            "plain_body": plain, "html_body": html, "attachments": attachments}


def json_payload(message: dict, raw: bytes) -> bytes:
    """``message``: id, token, rcpt_to, mail_from, route... of the stored Message."""
    body = {"message": message, **parse_parts(raw),
            "raw_message": base64.b64encode(raw).decode()}
    return json.dumps(body, separators=(",", ":")).encode()


def _http(endpoint: dict, message: dict, raw: bytes) -> Attempt:
    import requests  # imported lazily: cold start

    settings = get_settings()
    url = endpoint["url"]
    try:
        ips = url_safety.check_url(url, allow_private=settings.webhooks_allow_private_targets,
                                   label="endpoint URL")
    except url_safety.UnsafeURL as exc:
        return Attempt(FAILED, f"endpoint URL refused: {exc}")
    if endpoint.get("format") == "raw":
        body, ctype = raw, "message/rfc822"
    else:
        body, ctype = json_payload(message, raw), "application/json"
    key_id, signature = installation_keys.sign(body)
    headers = {"Content-Type": ctype, "User-Agent": USER_AGENT,
               "X-Service-Message-ID": str(message["id"]),
               "X-Service-Message-Token": message["token"],
               "X-Service-Signature": signature, "X-Service-Signature-Key": key_id}
    started = time.perf_counter()
    try:
        response = url_safety.post_pinned(url, ips, data=body, headers=headers,
                                          timeout=settings.inbound_timeout_seconds)
    except requests.RequestException as exc:
        return Attempt(RETRY, f"could not reach {url}: {type(exc).__name__}: {exc}"[:1000],
                       host=url, duration_ms=int((time.perf_counter() - started) * 1000))
    elapsed = int((time.perf_counter() - started) * 1000)
    code = response.status_code
    output = response.text[:MAX_OUTPUT] if response.content else None
    if 200 <= code < 300:
        return Attempt(DELIVERED, f"{url} answered {code}", url, code, output, elapsed)
    if 400 <= code < 500 and code not in (408, 429):
        return Attempt(FAILED, f"{url} refused the message: HTTP {code}", url, code, output,
                       elapsed)
    return Attempt(RETRY, f"{url} answered HTTP {code}; will retry", url, code, output, elapsed)


def _check_smtp_host(host: str, port: int) -> str | None:
    if get_settings().webhooks_allow_private_targets:
        return None
    try:
        infos = url_safety.default_resolver()(host.strip("[]"), port, 0, socket.SOCK_STREAM)
    except OSError as exc:
        return f"cannot resolve {host}: {exc}"
    for info in infos:
        if not url_safety.is_public_ip(info[4][0]):
            return f"{host} resolves to a non-public address ({info[4][0]})"
    return None


def _smtp(hosts: list[tuple[str, int]], mail_from: str, rcpt_to: str, raw: bytes) -> Attempt:
    from chalicelib.services.delivery import client as delivery  # the outgoing SMTP client, shared
    from chalicelib.services.mime import lines

    # Stored as it came (lines over 998 octets included); sent on, those lines are made
    # short by re-encoding their parts, which a receiving server may otherwise refuse.
    try:
        raw = lines.shorten_lines(raw)
    except lines.LineTooLong:
        pass  # a header line: sent as it came (the receiving server decides)
    outcome = delivery.send(hosts, mail_from=mail_from, rcpt_to=rcpt_to, data=raw)
    status = {delivery.SENT: DELIVERED, delivery.HARD: FAILED}.get(outcome.status, RETRY)
    return Attempt(status, outcome.details, outcome.host, outcome.code, outcome.output,
                   outcome.duration_ms)


def deliver(endpoint: dict, message: dict, raw: bytes, *, return_path: str) -> Attempt:
    """One attempt to hand ``raw`` to ``endpoint``."""
    kind = endpoint.get("type")
    if kind == "http":
        return _http(endpoint, message, raw)
    if kind == "smtp":
        host, port = endpoint["host"], int(endpoint.get("port", 25))
        problem = _check_smtp_host(host, port)
        if problem:
            return Attempt(FAILED, f"SMTP endpoint refused: {problem}")
        return _smtp([(host.strip("[]"), port)], message["mail_from"], message["rcpt_to"], raw)
    if kind == "address":
        from chalicelib.services.delivery import client as delivery

        address = endpoint["address"]
        try:
            hosts = delivery.targets(address.rsplit("@", 1)[1])
        except delivery.TargetError as exc:
            status = FAILED if exc.status == delivery.HARD else RETRY
            return Attempt(status, f"cannot route to {address}: {exc.details}")
        return _smtp(hosts, return_path, address, raw)
    return Attempt(FAILED, f"unknown endpoint type {kind!r}")
