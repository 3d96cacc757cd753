"""The webhook POST's pinned keep-alive connections (services/webhooks/http.py), against a real HTTPS
server on loopback with certificates from a test CA: the address dialled is the one checked,
while SNI, the certificate's name and the Host header are the URL's host; a certificate for
another name is refused; an address that refuses the connection is skipped for the next;
one connection serves consecutive POSTs, from any thread of the process."""
from __future__ import annotations

import threading
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chalicelib.services.webhooks import http
from tests.tls_ca import TestCA

HOST = "hooks.example.test"


class _HTTPS:
    """HTTPS on 127.0.0.1 answering every POST 200 with a certificate for ``names``;
    records (SNI name, Host header, path, body) per request and counts connections."""

    def __init__(self, ca: TestCA, *names: str):
        self.seen: list[tuple] = []
        self.connections = 0
        self.sni: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                server.connections += 1
                super().setup()

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                server.seen.append((server.sni[-1], self.headers["Host"], self.path, body))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        context = ca.server_context(*names)
        context.sni_callback = lambda sslobj, name, _ctx: self.sni.append(name)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self):
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def ca(tmp_path, monkeypatch):
    authority = TestCA(tmp_path)
    monkeypatch.setattr(http, "ca_bundle", lambda: authority.bundle)
    monkeypatch.setattr(http, "_pools", OrderedDict())  # no pool of another test
    return authority


def test_pinned_https_post_names_the_host_and_keeps_the_connection(ca):
    server = _HTTPS(ca, HOST)
    try:
        url = f"https://{HOST}:{server.port}/in?x=1"
        # The first address refuses the connection (nothing listens there): the next is tried.
        for body in (b'{"n":1}', b'{"n":2}'):
            response = http.post(url, ["127.0.0.2", "127.0.0.1"], body,
                                 {"Content-Type": "application/json", "Host": "evil.test"}, 5)
            assert response.status == 200
            assert http.read_bounded(response, 1, 1024, float("inf")) == b"o"
        assert server.seen == [(HOST, f"{HOST}:{server.port}", "/in?x=1", b'{"n":1}'),
                               (HOST, f"{HOST}:{server.port}", "/in?x=1", b'{"n":2}')]
        assert server.connections == 1  # kept alive: the body was read to its end
    finally:
        server.stop()


def test_a_certificate_for_another_name_is_refused(ca):
    server = _HTTPS(ca, "other.example.test")
    try:
        with pytest.raises(http.Failed) as failed:
            http.post(f"https://{HOST}:{server.port}/in", ["127.0.0.1"], b"{}", {}, 5)
        assert not failed.value.timeout and "certificate" in str(failed.value).lower()
        assert server.seen == []
    finally:
        server.stop()


def test_no_address_answering_is_a_connection_failure(ca):
    with pytest.raises(http.Failed) as failed:
        http.post("http://127.0.0.1:1/in", ["127.0.0.1"], b"{}", {}, 5)
    assert not failed.value.timeout
    assert "failed to establish a new connection to 127.0.0.1 port 1" in str(failed.value)
    assert "Connection refused" in str(failed.value)


def test_one_kept_connection_serves_posts_from_several_threads(ca):  # (ca: fresh pools)
    from tests.receivers import Receiver

    with Receiver([200]) as rx:
        def post_once():
            response = http.post(rx.url, ["127.0.0.1"], b"{}", {}, 5)
            assert http.read_bounded(response, 10, 1024, float("inf")) == b"ok"

        for _ in range(3):  # one thread after another, each a POST
            thread = threading.Thread(target=post_once)
            thread.start()
            thread.join()
        assert len(rx.requests) == 3
        assert rx.connections == 1  # the process's pool for the receiver, not the thread's


class _Plain:
    """HTTP/1.1 on 127.0.0.1 answering every POST 200 "ok" (``close``: then closing the
    connection without saying so, as a receiver whose keep-alive ends does); records the
    request targets, counts connections and sets ``gone`` once it closed one."""

    def __init__(self, close: bool = False, answer_header: tuple | None = None):
        self.targets: list[str] = []
        self.connections = 0
        self.gone = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                server.connections += 1
                super().setup()

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                server.targets.append(self.path)
                self.send_response(200)
                if answer_header:
                    self.send_header(*answer_header)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
                self.wfile.flush()
                if close:
                    self.close_connection = True

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            def shutdown_request(self, request):
                super().shutdown_request(request)  # the socket is closed: the FIN is sent
                server.gone.set()

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def post(self, path: str = "/in") -> bytes:
        response = http.post(f"http://127.0.0.1:{self.port}{path}", ["127.0.0.1"], b"{}", {}, 5)
        assert response.status == 200
        return http.read_bounded(response, 10, 1024, float("inf"))

    def stop(self):
        self._server.shutdown()
        self._server.server_close()


def test_a_kept_connection_the_receiver_closed_is_not_written_to(ca):  # (ca: fresh pools)
    server = _Plain(close=True)
    try:
        assert server.post() == b"ok"
        assert server.gone.wait(10)  # the receiver closed the kept connection meanwhile
        assert server.post() == b"ok"  # on a new connection, not an error
        assert server.connections == 2
    finally:
        server.stop()


def test_a_receiver_saying_connection_close_gets_a_new_connection(ca):
    server = _Plain(answer_header=("Connection", "close"))
    try:
        assert [server.post() for _ in range(3)] == [b"ok"] * 3
        assert server.connections == 3
    finally:
        server.stop()


def test_the_request_target_is_percent_encoded_as_urllib3_encodes_it(ca):
    server = _Plain()
    try:
        server.post("/a{b}|c/%7e/../d?q=x|y%7b&r=?/")
        server.post("/p%zz?50%")  # a "%" starting no escape: every "%" is encoded
        server.post("")
        assert server.targets == ["/a%7Bb%7D%7Cc/%7E/../d?q=x%7Cy%7B&r=?/", "/p%25zz?50%25",
                                  "/"]
    finally:
        server.stop()
