"""A real DNS server on loopback for tests (MX lookups, domain verification)."""
from __future__ import annotations

import socket
import threading

import dns.message
import dns.rcode
import dns.rdatatype
import dns.resolver
import dns.rrset


class LoopbackDNS:
    """A tiny DNS server over UDP answering from ``zone`` ({(name, type): [values]}, names
    fully qualified; NXDOMAIN for names it does not hold). The zone may be changed while it
    serves (a test publishing a record). A question about another type at a name holding a
    CNAME is answered as a recursive resolver answers it: the CNAME, then the answer at its
    target (an SPF lookup of a tenant's return-path host reaches the installation's TXT)."""

    def __init__(self, zone: dict):
        self.zone = zone
        self.asked: dict[tuple[str, str], int] = {}  # (name, type) -> questions received
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            query = dns.message.from_wire(data)
            response = dns.message.make_response(query)
            question = query.question[0]
            name, rdtype = question.name.to_text(), dns.rdatatype.to_text(question.rdtype)
            self.asked[(name, rdtype)] = self.asked.get((name, rdtype), 0) + 1
            for _ in range(8):  # CNAME chain, at most 8 links
                known = {n for n, _ in self.zone}
                if name not in known:
                    response.set_rcode(dns.rcode.NXDOMAIN)
                elif (name, rdtype) in self.zone:
                    response.answer.append(self._rrset(name, rdtype))
                elif (name, "CNAME") in self.zone:
                    response.answer.append(self._rrset(name, "CNAME"))
                    name = self.zone[(name, "CNAME")][0].lower()
                    continue
                break
            try:
                self.sock.sendto(response.to_wire(), peer)
            except OSError:  # closed at teardown while answering a resolver's retry
                return

    def _rrset(self, name: str, rdtype: str) -> dns.rrset.RRset:
        values = [" ".join(map(str, v)) if isinstance(v, tuple) else v
                  for v in self.zone[(name, rdtype)]]
        return dns.rrset.from_text(name, 60, "IN", rdtype, *values)

    def close(self):
        self.sock.close()

    def resolver(self) -> dns.resolver.Resolver:
        """A resolver that asks only this server."""
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = ["127.0.0.1"]
        resolver.port = self.port
        return resolver

    def __enter__(self) -> "LoopbackDNS":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
