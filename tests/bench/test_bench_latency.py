"""The pieces of bench/bench_latency.py (bench/latency_rig.py), so its figures can be
trusted: the delay proxy carries bytes intact both ways, the sink offers PIPELINING and
counts sessions per destination (through the proxy, by the proxy's source address) and
their peak, and the DNS zone sends each destination to its own loopback address. Nothing is
timed."""
from __future__ import annotations

import os
import smtplib
import socket
import threading

from bench import latency_rig as rig
from tests.dns_server import LoopbackDNS
from tests.support import wait_for


def _echo_server():
    """A TCP server on loopback echoing each connection's bytes back until its end."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return

            def echo(conn=conn):
                with conn:
                    while data := conn.recv(65536):
                        conn.sendall(data)
            threading.Thread(target=echo, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener


def test_the_delay_proxy_carries_bytes_intact_both_ways_on_many_connections_at_once():
    listener = _echo_server()
    address = rig.destination_address(0)
    port = rig.free_port_on([address])
    proxy = rig.DelayProxy([(address, port, "127.0.0.1", listener.getsockname()[1], None)],
                           lambda: 0.005).start()
    payloads = [os.urandom(300_000 + i) for i in range(4)]
    echoed: dict[int, bytes] = {}

    def client(i: int) -> None:
        with socket.create_connection((address, port)) as conn:
            sender = threading.Thread(target=conn.sendall, args=(payloads[i],))
            sender.start()
            got = bytearray()
            while len(got) < len(payloads[i]):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got += chunk
            sender.join()
            echoed[i] = bytes(got)

    try:
        clients = [threading.Thread(target=client, args=(i,)) for i in range(len(payloads))]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
    finally:
        proxy.stop()
        listener.close()
    assert [echoed[i] for i in range(len(payloads))] == payloads
    total = sum(map(len, payloads))
    assert proxy.forwarded == {"up": total, "down": total}
    assert proxy.connections == len(payloads)


def test_the_sink_offers_pipelining_and_counts_sessions_per_destination_through_the_proxy():
    counters = rig.Counters()
    sink = rig.counting_mx(counters)
    addresses = [rig.destination_address(k) for k in range(2)]
    port = rig.free_port_on(addresses)
    proxy = rig.DelayProxy([(a, port, "127.0.0.1", sink.port, a) for a in addresses],
                           lambda: 0.001).start()
    sessions = []
    opened_before = counters.sessions[0]  # aiosmtpd's own check that it started counts too
    try:
        # Three sessions open at once to destination 0, one to destination 1.
        for k in (0, 0, 0, 1):
            smtp = smtplib.SMTP(addresses[k], port, local_hostname="test.example", timeout=30)
            smtp.ehlo()
            assert smtp.has_extn("pipelining")
            sessions.append((k, smtp))
        for n, (k, smtp) in enumerate(sessions):
            smtp.sendmail("a@example.com", [f"u{n}@{rig.destination_domain(k)}"],
                          b"Subject: hi\r\n\r\nbody\r\n")
        assert counters.peaks(2) == [3, 1]
        assert counters.messages[0] == 4
        for _, smtp in sessions:
            smtp.quit()
        wait_for(lambda: counters.open[rig.FIRST_OCTET] == 0
                 and counters.open[rig.FIRST_OCTET + 1] == 0, timeout=10)
        counters.reset_peaks()
        assert counters.peaks(2) == [0, 0]
        with smtplib.SMTP(addresses[1], port, local_hostname="test.example", timeout=30):
            pass
        assert counters.peaks(2) == [0, 1]
        assert counters.sessions[0] - opened_before == 5
    finally:
        proxy.stop()
        sink.stop()


def test_the_zone_sends_each_destination_to_its_own_loopback_address():
    with LoopbackDNS(rig.zone(3)) as dns:
        resolver = dns.resolver()
        for k in range(3):
            mx = resolver.resolve(rig.destination_domain(k), "MX")[0].exchange.to_text()
            assert mx == f"mx.{rig.destination_domain(k)}."
            assert resolver.resolve(mx, "A")[0].to_text() == rig.destination_address(k)
