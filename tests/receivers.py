"""A scriptable webhook receiver: a real HTTP server on loopback (http.server in a thread).

Each test scripts the answers in order, e.g. ``Receiver([500, 200])`` answers 500 to the
first request and 200 to every later one (the last entry repeats), ``Receiver([Reply(200,
delay=2)])`` answers slowly, ``Receiver([Reply(302, headers={"Location": ...})])`` redirects.
Every request is recorded with its method, path, headers and the exact body bytes.

    with Receiver([500, 200]) as rx:
        ... point a webhook at rx.url ...
        rx.wait_for(2)
        rx.requests[0].body  # bytes as sent
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support import wait_for


@dataclass
class Reply:
    status: int = 200
    body: bytes | str = b"ok"
    delay: float = 0.0  # seconds before answering (timeouts)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    received_at: float  # time.monotonic()

    def json(self):
        return json.loads(self.body)


class Receiver:
    def __init__(self, script=(200,), host: str = "127.0.0.1"):
        self._script = [s if isinstance(s, Reply) else Reply(int(s)) for s in script] or [Reply()]
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like real receivers
            # One write per answer and no Nagle: otherwise delayed ACKs add ~40 ms per request.
            wbufsize = 64 * 1024
            disable_nagle_algorithm = True

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                reply = receiver._record(Recorded(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                    body, time.monotonic()))
                if reply.delay:
                    time.sleep(reply.delay)
                data = reply.body.encode() if isinstance(reply.body, str) else reply.body
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): that is what the test scripted

            do_POST = do_GET = do_PUT = _handle

            def log_message(self, *args):  # quiet
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"receiver-{self.port}")

    def _record(self, request: Recorded) -> Reply:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
            return self._script[min(index, len(self._script) - 1)]

    def start(self) -> "Receiver":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Recorded]:
        wait_for(lambda: len(self.requests) >= count, timeout,
                 message=f"{count} webhook request(s) at {self.url} (got {len(self.requests)})")
        return list(self.requests)

    def events(self) -> list[str]:
        return [r.json()["event"] for r in list(self.requests)]
