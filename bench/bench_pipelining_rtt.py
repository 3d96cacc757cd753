"""Round trips a message costs on a reused SMTP session, with and without PIPELINING
(issue 33 item 2): the delivery client (``services/delivery/client.py``) sends 10 messages to a
loopback MX (aiosmtpd, tests/mx.py) behind a proxy that delays every chunk by half the round
trip, over one session opened beforehand. Prints the wall time a message and the round trips
it makes. The whole service at latency (workers, batches, many destinations, the 100-session
reference) is ``bench/bench_latency.py``'s.

Run: .venv/bin/python bench/bench_pipelining_rtt.py [--rtt-ms 50] [--messages 10]
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("DELIVERY_SESSION_IDLE_SECONDS", "0")

from chalicelib.services.delivery import client as smtp_client  # noqa: E402
from tests.mx import ScriptedMX  # noqa: E402

DATA = b"From: a@example.com\r\nSubject: x\r\n\r\n" + b"hello\r\n" * 100


class DelayProxy:
    """Forwards each chunk, both ways, ``delay`` seconds after it arrived."""

    def __init__(self, port: int, delay: float):
        self.target, self.delay = port, delay
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source, sink) -> None:
        try:
            while chunk := source.recv(65536):
                threading.Timer(self.delay, lambda c=chunk: sink.sendall(c)).start()
        except OSError:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    parser.add_argument("--messages", type=int, default=10)
    args = parser.parse_args()
    rtt = args.rtt_ms / 1000
    print(f"{args.messages} messages on one reused session, round trip {args.rtt_ms:.0f} ms "
          "(loopback MX behind a delay proxy; a shared machine: a few ms of noise)")
    for pipelining in (False, True):
        mx = ScriptedMX(pipelining=pipelining).start()
        proxy = DelayProxy(mx.port, rtt / 2)
        hosts = [("127.0.0.1", proxy.port)]
        smtp_client.send(hosts, mail_from="rp@rp.test", rcpt_to="warm@example.org", data=DATA)
        started = time.perf_counter()
        for n in range(args.messages):
            outcome = smtp_client.send(hosts, mail_from="rp@rp.test", rcpt_to=f"u{n}@example.org",
                                data=DATA)
            assert outcome.status == smtp_client.SENT, outcome.details
        each = (time.perf_counter() - started) / args.messages
        print(f"PIPELINING {'offered' if pipelining else 'not offered'}: {each * 1000:.0f} ms "
              f"a message, {each / rtt:.1f} round trips")
        smtp_client.close_cached()
        proxy.listener.close()
        mx.stop()


if __name__ == "__main__":
    main()
