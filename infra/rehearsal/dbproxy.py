"""The rehearsal's stand-in for RDS Proxy (a test tool): a TLS-terminating TCP proxy in front
of the rehearsal's PostgreSQL, so the functions connect as they do in AWS, with
``DATABASE_SSL=verify``: TLS required (a client that does not ask for it is refused, as with
RequireTLS), the certificate checked against the runtime's trust store and the host name.

It listens on 127.0.0.2:5432 (the functions' DATABASE_URL has port 5432 fixed, and the real
PostgreSQL holds 127.0.0.1:5432), answers PostgreSQL's SSLRequest with ``S``, takes the TLS
handshake with the certificate images.py made for 127.0.0.2 (its CA is in the runtime image's
trust store), then relays the plain protocol to PostgreSQL.
"""
from __future__ import annotations

import asyncio
import ssl
import struct
import threading

SSL_REQUEST = struct.pack("!ii", 8, 80877103)
HOST = "127.0.0.2"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class DatabaseProxy:
    def __init__(self, cert: str, key: str, upstream: tuple[str, int], port: int = 5432):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.upstream, self.port = upstream, port
        self.refused = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            first = await reader.readexactly(8)
            if first != SSL_REQUEST:
                self.refused += 1  # RequireTLS: no plain connections
                writer.close()
                return
            writer.write(b"S")
            await writer.drain()
            await writer.start_tls(self.context)
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ssl.SSLError):
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    def start(self) -> "DatabaseProxy":
        async def serve() -> None:
            self._server = await asyncio.start_server(self._client, HOST, self.port)
            self._ready.set()

        threading.Thread(target=self._run, args=(serve,), daemon=True,
                         name="database-proxy").start()
        if not self._ready.wait(10):
            raise SystemExit(f"the database proxy could not listen on {HOST}:{self.port}")
        return self

    def _run(self, serve) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(serve())
        self._loop.run_forever()
