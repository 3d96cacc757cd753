"""A small client for the email service's messaging API, and webhook signature verification.

One file, standard library only (``cryptography`` is needed for verify_webhook_signature
alone). Copy it into your project, or ``pip install ./client``.

    from email_service_client import EmailServiceClient, ApiError

    client = EmailServiceClient("https://api.mail.example.com", api_key="...")
    result = client.send(from_="App <app@example.com>", to=["ann@example.net"],
                         subject="Hi", text_body="Hello")
    result["message_id"]

Every call returns the envelope's ``data``; an error answer raises ``ApiError`` carrying the
stable ``code`` (branch on it), ``message``, ``field`` and HTTP ``status``.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import urllib.error
import urllib.request
from typing import Any, Iterable

__all__ = ["ApiError", "EmailServiceClient", "verify_webhook_signature"]
__version__ = "0.1.0"


class ApiError(Exception):
    """An error answer of the API (``status: error``) or a transport failure (code
    ``ConnectionError``, status 0). ``retry_after``: seconds to wait before trying again,
    when the API said (429 ``RateLimited``)."""

    def __init__(self, code: str, message: str, status: int, field: str | None = None,
                 retry_after: int | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.field = field
        self.retry_after = retry_after


def _fields(from_: Any, to: Any, extra: dict[str, Any]) -> dict[str, Any]:
    """A SendRequest body: ``to`` as a list, the ``extra`` fields that are not None, and any
    other iterable (a tuple, a generator of addresses) as a list."""
    body = {"from": from_, "to": [to] if isinstance(to, (str, dict)) else list(to or [])}
    for name, value in extra.items():
        if value is not None:
            iterable = isinstance(value, Iterable) and not isinstance(value, (str, bytes, dict))
            body[name] = list(value) if iterable else value
    return body


class EmailServiceClient:
    """The messaging surface (``X-Server-API-Key``) of one server."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, *,
                idempotency_key: str | None = None) -> dict:
        """One call; ``idempotency_key`` (send endpoints): a retry with the same key and
        body gets the first answer back instead of sending again."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"X-Server-API-Key": self.api_key, "Accept": "application/json",
                   "Content-Type": "application/json",
                   "User-Agent": f"email-service-client/{__version__}"}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        request = urllib.request.Request(self.base_url + path, data=data, method=method,
                                         headers=headers)
        retry_after = None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
            header = exc.headers.get("Retry-After") if exc.headers else None
            retry_after = int(header) if header and header.isdigit() else None
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError("ConnectionError", str(exc), 0) from exc
        try:
            envelope = json.loads(raw)
        except ValueError:
            raise ApiError("InvalidResponse", f"not JSON (HTTP {status})", status) from None
        if not isinstance(envelope, dict) or envelope.get("status") != "success":
            error = (envelope or {}).get("error") if isinstance(envelope, dict) else None
            error = error if isinstance(error, dict) else {}
            raise ApiError(error.get("code", "InvalidResponse"),
                           error.get("message", f"HTTP {status}"), status, error.get("field"),
                           retry_after)
        return envelope["data"]

    # -- sending --------------------------------------------------------------
    def send(self, *, from_: Any, to: Any, idempotency_key: str | None = None,
             **fields: Any) -> dict:
        """POST /messages: returns ``{message_id, recipients: [{rcpt_to, id, token}]}``.
        ``fields``: the SendRequest's other fields by their JSON names (docs/api.md,
        openapi.json), e.g. ``subject``, ``text_body``, ``html_body``, ``cc``, ``tag``,
        ``attachments`` (from :func:`attachment`), ``send_at`` (an RFC 3339 date-time, at
        most 30 days ahead), ``track_opens``; a None value is left out. Taken as they come,
        so a field the service adds needs no new client; the service ignores a name it does
        not know, so check a name's spelling against the document. Addresses are
        ``"a@b.example"``, ``"Name <a@b.example>"`` or ``{"email", "name"}``."""
        return self.request("POST", "/api/v2/server/messages", _fields(from_, to, fields),
                            idempotency_key=idempotency_key)

    def send_with_template(self, template: str, *, from_: Any, to: Any,
                           template_model: dict | None = None, **fields: Any) -> dict:
        """POST /messages/with_template; ``fields`` set directly (subject, ...) override the
        rendered ones. An unknown template raises ApiError code NotFound."""
        body = _fields(from_, to, {"template": template, "template_model": template_model,
                                   **fields})
        return self.request("POST", "/api/v2/server/messages/with_template", body)

    def send_batch(self, messages: list[dict], *, idempotency_key: str | None = None) -> dict:
        """POST /messages/batch: each entry is a SendRequest dict (``"from"`` spelled as in
        JSON). Returns ``{messages: [...], accepted, failed}``; one result per entry, in order,
        each with ``status`` ``success`` (and the SendResult) or ``error`` (and the error)."""
        return self.request("POST", "/api/v2/server/messages/batch", {"messages": messages},
                            idempotency_key=idempotency_key)

    def cancel(self, message_id: int) -> dict:
        """POST /messages/{id}/cancel: a Scheduled or Pending message not yet attempted."""
        return self.request("POST", f"/api/v2/server/messages/{int(message_id)}/cancel", {})

    def bulk(self, action: str, filter: dict | None = None, *, dry_run: bool = False) -> dict:
        """POST /messages/bulk (release, retry or cancel): ``{job}``, or the count when
        ``dry_run``; follow a job with :meth:`bulk_job`."""
        return self.request("POST", "/api/v2/server/messages/bulk",
                            {"action": action, "filter": filter or {}, "dry_run": dry_run})

    def bulk_job(self, job_id: int) -> dict:
        return self.request("GET", f"/api/v2/server/messages/bulk/{int(job_id)}")

    def send_batch_with_template(self, template: str, messages: list[dict],
                                 **shared: Any) -> dict:
        """POST /messages/with_template/batch: one template, entries with their own ``to``
        and ``template_model``; ``shared`` fields (``from_``, ``tag``...) apply to all."""
        if "from_" in shared:
            shared["from"] = shared.pop("from_")
        return self.request("POST", "/api/v2/server/messages/with_template/batch",
                            {"template": template, "messages": messages, **shared})

    # -- reading --------------------------------------------------------------
    def message(self, message_id: int) -> dict:
        return self.request("GET", f"/api/v2/server/messages/{int(message_id)}")

    def messages(self, **query: Any) -> dict:
        from urllib.parse import urlencode

        suffix = f"?{urlencode({k: v for k, v in query.items() if v is not None})}" if query else ""
        return self.request("GET", "/api/v2/server/messages" + suffix)


def attachment(name: str, content_type: str, data: bytes) -> dict:
    """An Attachment object of a SendRequest."""
    return {"name": name, "content_type": content_type,
            "data_base64": base64.b64encode(data).decode("ascii")}


_DKIM_P = re.compile(r"(?:^|;)\s*p=([A-Za-z0-9+/=\s]+)")


def _load_public_key(public_key: str | bytes):
    from cryptography.hazmat.primitives import serialization

    text = public_key.decode("ascii") if isinstance(public_key, bytes) else public_key
    if "-----BEGIN" in text:
        return serialization.load_pem_public_key(text.encode("ascii"))
    # The DKIM record value of the installation ("v=DKIM1; k=rsa; p=MIIB...") or bare p=.
    match = _DKIM_P.search(text)
    der = base64.b64decode(re.sub(r"\s+", "", match.group(1) if match else text))
    return serialization.load_der_public_key(der)


def verify_webhook_signature(body_bytes: bytes, signature_b64: str | None,
                             public_key_pem) -> bool:
    """True when ``X-Service-Signature`` is the installation's signature of the exact raw
    request body (RSA PKCS#1 v1.5 over SHA-256, base64). ``public_key_pem`` is a PEM public key
    or the installation's DKIM record value (``v=DKIM1; k=rsa; p=...``), or a list of them:
    while the installation key is being rotated both are published, and either may sign
    (``X-Service-Signature-Key`` names which). Verify the raw bytes you received, before
    parsing JSON."""
    if isinstance(public_key_pem, (list, tuple)):
        return any(verify_webhook_signature(body_bytes, signature_b64, key)
                   for key in public_key_pem)
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    if not signature_b64 or not isinstance(body_bytes, (bytes, bytearray)):
        return False
    try:
        signature = base64.b64decode(signature_b64.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    try:
        _load_public_key(public_key_pem).verify(signature, bytes(body_bytes),
                                                padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True
