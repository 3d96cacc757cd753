"""A scriptable webhook receiver: a real HTTP server on loopback (http.server in a thread).

Each test scripts the answers in order, e.g. ``Receiver([500, 200])`` answers 500 to the
first request and 200 to every later one (the last entry repeats), ``Receiver([Reply(200,
delay=2)])`` answers slowly, ``Receiver([Reply(302, headers={"Location": ...})])`` redirects.
Every request is recorded with its method, path, headers and the exact body bytes.

    with Receiver([500, 200]) as rx:
        ... point a webhook at rx.url ...
        rx.wait_for(2)
        rx.requests[0].body  # bytes as sent

``Receiver(answer=fn)`` answers each request with ``fn(recorded)`` instead (a Reply or a
status), e.g. by the event it carries. ``Reply(hold=event)`` answers only once ``event`` is
set (a receiver that hangs until the test lets it go). The receiver also counts the TCP
connections it accepted (``connections``) and the most requests it was answering at once
(``max_in_flight``): what the client's keep-alive and concurrency look like from outside.
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
    hold: threading.Event | None = None  # answer only once set (waits at most HOLD_LIMIT)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    received_at: float  # time.monotonic()

    def json(self):
        return json.loads(self.body)


HOLD_LIMIT = 60.0


class _Server(ThreadingHTTPServer):
    # A real receiver's listen backlog, not socketserver's 5: many clients connecting at once
    # would otherwise overflow the accept queue and see connections reset.
    request_queue_size = 128


class Receiver:
    def __init__(self, script=(200,), host: str = "127.0.0.1", answer=None):
        self._script = [s if isinstance(s, Reply) else Reply(int(s)) for s in script] or [Reply()]
        self._answer = answer
        self.requests: list[Recorded] = []
        self.connections = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like real receivers
            # One write per answer and no Nagle: otherwise delayed ACKs add ~40 ms per request.
            wbufsize = 64 * 1024
            disable_nagle_algorithm = True

            def setup(self):
                with receiver._lock:
                    receiver.connections += 1
                super().setup()

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                reply = receiver._record(Recorded(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                    body, time.monotonic()))
                try:
                    if reply.hold is not None:
                        reply.hold.wait(HOLD_LIMIT)
                    if reply.delay:
                        time.sleep(reply.delay)
                finally:
                    with receiver._lock:
                        receiver.in_flight -= 1
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

        self._server = _Server((host, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"receiver-{self.port}")

    def _record(self, request: Recorded) -> Reply:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self._answer is not None:
                reply = self._answer(request)
                return reply if isinstance(reply, Reply) else Reply(int(reply))
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
