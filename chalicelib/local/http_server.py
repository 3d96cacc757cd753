"""Chalice's local dev server with the gaps that matter to clients closed: unknown routes
answer the envelope's 404 (API Gateway's would be a 403 with its own body), bodies over the
limit answer 413 before they are read, and a bad Content-Length is a 400."""
from __future__ import annotations

import json
import threading

from chalice.config import Config
from chalice.local import (ChaliceRequestHandler, CustomLocalChalice, ForbiddenError, LocalChalice,
                          LocalDevServer, ThreadedHTTPServer)

from chalicelib.console import files as console
from chalicelib.config import get_settings


def _envelope(code: str, message: str) -> bytes:
    return json.dumps({"status": "error", "time": 0.0,
                       "error": {"code": code, "message": message}}).encode()


class RequestHandler(ChaliceRequestHandler):
    server_version = "email-service"
    sys_version = ""
    # Headers and body go out in separate writes; with Nagle on, a keep-alive client waits
    # for the delayed ACK (~40 ms) on every request.
    disable_nagle_algorithm = True

    def log_message(self, format, *args):  # noqa: A002  (quiet by default; the stack logs)
        pass

    def _reply(self, status: int, body: bytes, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _generic_handle(self) -> None:
        raw_length = self.headers.get("content-length", "0")
        try:
            length = int(raw_length)
            if length < 0:
                raise ValueError
        except ValueError:
            self._reply(400, _envelope("ValidationError", "invalid Content-Length"), close=True)
            return
        limit = get_settings().max_request_bytes
        if length > limit:
            self._reply(413, _envelope("PayloadTooLarge", f"request body exceeds {limit} bytes"),
                        close=True)
            return
        super()._generic_handle()

    def _send_console(self) -> bool:
        """History routing: a browser asking for any other page gets the console, which
        routes it (or says it does not know it). /api/... always keeps the JSON envelope."""
        path = self.path.split("?")[0]
        if self.command != "GET" or path.startswith("/api/") or \
                not console.wants_html(self.headers.get("accept")):
            return False
        found = console.index()
        if found is None:
            return False
        body, content_type = found
        self.send_response(200)
        for name, value in console.headers(content_type).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    def _send_error_response(self, error) -> None:
        if isinstance(error, ForbiddenError):  # Chalice's "no such route"
            if self._send_console():
                return
            self._reply(404, _envelope("NotFound", f"no route for {self.command} {self.path.split('?')[0]}"))
            return
        super()._send_error_response(error)

    def send_error(self, code, message=None, explain=None) -> None:
        if code == 501:  # a method http.server has no do_X for (TRACE, PROPFIND...)
            self._reply(405, _envelope("MethodNotAllowed", f"method {self.command} not allowed"),
                        close=True)
            return
        super().send_error(code, message, explain)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = _generic_handle


# Connections the kernel holds while every handler is busy. http.server's default is 5: a burst
# of parallel clients (the console, a test, an attack) got connection resets, not a wait.
# Linux caps it at net.core.somaxconn (4096 on current kernels).
LISTEN_BACKLOG = 1024


class BurstTolerantServer(ThreadedHTTPServer):
    """One thread per connection (as `chalice local`), behind a real accept backlog."""

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True
    # The threads of open connections are joined at shutdown otherwise (keep-alive clients).
    block_on_close = False


class SharedPortServer(BurstTolerantServer):
    """Binds with SO_REUSEPORT: several HTTP processes of `make run` share the port (the
    kernel spreads new connections over them)."""

    allow_reuse_port = True


class HttpServer:
    def __init__(self, app, host: str, port: int, *, reuse_port: bool = False):
        config = Config(chalice_stage="dev", user_provided_params={}, config_from_disk={})
        if not isinstance(app, LocalChalice):
            # As `chalice local` does: make current_request thread-local for a threaded server.
            CustomLocalChalice.__bases__ = (LocalChalice, app.__class__)
            app.__class__ = CustomLocalChalice
        self._server = LocalDevServer(app, config, host, port, handler_cls=RequestHandler,
                                      server_cls=SharedPortServer if reuse_port
                                      else BurstTolerantServer)
        self.port = self._server.server.server_address[1]
        self._thread = threading.Thread(target=self._server.server.serve_forever,
                                        name="http-server", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.server.shutdown()
        self._server.server.server_close()
        self._thread.join(timeout=5)
