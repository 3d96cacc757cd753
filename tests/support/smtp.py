"""Helpers of the SMTP gateway tests: a scriptable loopback HTTP receiver, SMTP client
shortcuts, routes set up through the management API, and what the gateway stored (inbound,
stored_raw)."""
from __future__ import annotations

import base64
import json
import smtplib
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support import Api, all_tenants
from tests.support.sending import SERVER


class Receiver:
    """http.server on loopback recording every request; answers ``statuses`` in turn
    (the last one repeats)."""

    def __init__(self, statuses=(200,)):
        self.statuses = list(statuses)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                outer.requests.append({"path": self.path, "headers": dict(self.headers),
                                       "body": body})
                index = min(len(outer.requests), len(outer.statuses)) - 1
                self.send_response(outer.statuses[index])
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def json(self, index: int = -1) -> dict:
        return json.loads(self.requests[index]["body"])

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def starttls_client(port: int) -> smtplib.SMTP:
    client = smtplib.SMTP("127.0.0.1", port, timeout=30)
    client.ehlo("client.test")
    client.starttls(context=client_context())
    client.ehlo("client.test")
    return client


def tls_client(port: int) -> smtplib.SMTP_SSL:
    client = smtplib.SMTP_SSL("127.0.0.1", port, timeout=30, context=client_context())
    client.ehlo("client.test")
    return client


def plain_client(port: int) -> smtplib.SMTP:
    client = smtplib.SMTP("127.0.0.1", port, timeout=30)
    client.ehlo("client.test")
    return client


def refused_submission(port: int, tenant, data: bytes,
                       rcpts=("r@recipient.example",)) -> smtplib.SMTPDataError:
    """The refusal at the end of DATA of ``data`` submitted as ``tenant`` (authenticated)."""
    with starttls_client(port) as client:
        client.login("x", tenant.smtp_key)
        try:
            client.sendmail(f"app@{tenant.domain}", list(rcpts), data)
        except smtplib.SMTPDataError as exc:
            return exc
    raise AssertionError("the submission was accepted")


def open_data(port: int, mail_from: str, rcpt: str, helo: str = "raw.test") -> "RawSession":
    """A raw session that has been answered 354 to DATA for ``rcpt``."""
    session = RawSession(port)
    session.command(f"EHLO {helo}")
    session.command(f"MAIL FROM:<{mail_from}>")
    session.command(f"RCPT TO:<{rcpt}>")
    assert session.command("DATA")[0] == 354
    return session


def make_route(api: Api, tenant, name: str, mode: str = "endpoint", endpoint=None) -> dict:
    body = {"name": name, "domain": tenant.domain, "mode": mode}
    if endpoint is not None:
        body["endpoint"] = endpoint
    return Api.data(api.post(tenant.server_path + "/routes", body), 201)["route"]


def simple_mail(sender: str, to: str, subject: str = "Hello", body: str = "Hi there") -> bytes:
    return (f"From: {sender}\r\nTo: {to}\r\nSubject: {subject}\r\n"
            f"Message-ID: <{abs(hash(subject))}@client.test>\r\n\r\n{body}\r\n").encode()


class RawSession:
    """A raw socket SMTP conversation for the malformed cases smtplib will not send."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buffer = b""
        self.reply()  # greeting

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> tuple[int, str]:
        """One complete (possibly multi-line) reply."""
        lines = []
        while True:
            while b"\r\n" not in self.buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed: " + repr(self.buffer))
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\r\n", 1)
            lines.append(line.decode())
            if len(line) < 4 or line[3:4] != b"-":
                return int(line[:3]), "\n".join(lines)

    def command(self, line: str) -> tuple[int, str]:
        self.send(line.encode() + b"\r\n")
        return self.reply()

    def close(self) -> None:
        self.sock.close()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def inbound(api, tenant, **params) -> list[dict]:
    return Api.data(api.get(f"{SERVER}/inbound", server_key=tenant.api_key,
                            params=params))["messages"]


def stored_raw(message_id: int) -> bytes:
    from chalicelib.db.models import Message
    from chalicelib.services import content

    with all_tenants() as db:
        message = db.get(Message, message_id)
        return content.source_bytes(db, message.submission_id)
