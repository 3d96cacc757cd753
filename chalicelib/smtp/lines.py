"""How the gateway reads what a client sends: bare line feeds and long lines.

aiosmtpd 1.4.6 reads commands with ``reader.readuntil()`` (up to LF) and DATA with
``reader.readuntil(b"\\r\\n")``, and does everything else itself (dot-unstuffing, the
end-of-data line, the size limit). Its reader is asyncio's StreamReader, whose limit
(``SMTP.line_length_limit``, 1001) bounds every line: a DATA line without CRLF within it was
refused with a misleading ``500 Line too long``, a ``..`` line after a bare LF was not
unstuffed, and a message ending ``\\n.\\n`` was never answered.

:class:`DataLineReader` is that same StreamReader (``adopt`` gives the object aiosmtpd made
this class) with a filter where the bytes come in (``feed_data``, which the protocol calls
with each read), so aiosmtpd's own line reading sees standard lines:

* **Bare LF and bare CR are line breaks**, written as CRLF before aiosmtpd reads them: each
  line is then unstuffed, counted and stored like any other (the policy of Postfix's
  ``smtpd_forbid_bare_newline = normalize``). A read holding only CRLF line ends (nearly
  all) is passed on as it is, after two C-speed passes over it: no work per line.
* **Only CRLF . CRLF ends DATA.** A line holding a single dot next to a bare LF or CR
  (``\\n.\\n``, ``\\n.\\r\\n``, ``\\r\\n.\\n``, ``\\r.\\r`` ...) is how SMTP smuggling hides a
  second message, and how a broken client ends one: it is not passed on; the ``refuse``
  callback (the gateway's: a 5.5.2 reply, then the connection closed) is called at once, so
  nothing after it is read as commands and the client is not left waiting.
* What a read cannot decide yet waits for the next one: a CR at its end (the start of a
  CRLF?) and a line start holding only ``.`` or ``.\\r``. Both are at most two octets, and a
  client always sends a line end after them.
* **Long lines.** Between ``begin_data`` and ``end_data`` a line may be as long as the
  message may be (the size limit), so mail from servers that do not wrap lines is kept as it
  came; commands keep aiosmtpd's limit. Memory stays bounded by the message size limit, as
  it is for the message itself.

The reader sets its own ``_limit`` (asyncio's StreamReader field for the line limit): this
class is that reader, and the limit is the one field of it that it changes.
"""
from __future__ import annotations

import asyncio
import re
from typing import Callable

CRLF = b"\r\n"
# Every octet but CR and LF: what bytes.translate deletes to leave a read's CRs and LFs (with
# the count of CRLFs, two C passes: a fifth less than counting CR, LF and CRLF).
_NOT_LINE_ENDS = bytes(octet for octet in range(256) if octet not in (10, 13))
# A line's text and its ending; the last match may have no ending (the read stops mid-line).
_LINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n|\Z)")


class DataLineReader(asyncio.StreamReader):
    """asyncio's StreamReader that normalises what comes in (module doc)."""

    _refuse: Callable[[], None]
    _command_limit: int
    _held: bytes  # the end of the last read, undecided
    _at_line_start: bool  # the next octet starts a line
    _bare_before: bool  # ... and the line end before it was a bare CR or LF
    _refused: bool

    @classmethod
    def adopt(cls, reader: asyncio.StreamReader,
              refuse: Callable[[], None]) -> "DataLineReader":
        """The reader aiosmtpd made for a connection, as this class (same buffer, transport,
        limit and waiters: only the methods change). ``refuse``: called once, on a lone dot
        next to a bare line end."""
        reader.__class__ = cls
        reader._refuse = refuse
        reader._command_limit = reader._limit
        reader._refused = False
        reader.restart()
        return reader

    def restart(self) -> None:
        """A new stream starts (the connection's, or the one after STARTTLS: nothing read
        before the handshake carries over)."""
        self._held = b""
        self._at_line_start, self._bare_before = True, False

    def begin_data(self, line_limit: int) -> None:
        self._limit = max(line_limit, self._command_limit)

    def end_data(self) -> None:
        self._limit = self._command_limit

    def feed_data(self, data: bytes) -> None:
        if self._refused:
            return
        if self._held:
            data, self._held = self._held + data, b""
        # Keep back what the next read decides (module doc): a CR at the end, and a dot
        # alone at the start of the last line (after a CR or LF, or where the read starts).
        if data[-1:] == b"\r":
            data, self._held = data[:-1], b"\r"
        start = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if data[start:] == b"." and (start or self._at_line_start):
            data, self._held = data[:start], b"." + self._held
        if not data:
            return
        crlf = data.count(CRLF)
        if len(data.translate(None, _NOT_LINE_ENDS)) == 2 * crlf and not (
                self._bare_before and self._at_line_start and data[:1] == b"."):
            # Every CR and LF is in a CRLF, and no dot right after a bare line end: as it is.
            if crlf:
                self._bare_before = False
            self._at_line_start = data[-1:] == b"\n"
            super().feed_data(data)
            return
        out = []
        at_start, bare = self._at_line_start, self._bare_before
        for text, ending in _LINE.findall(data):
            if not ending:  # the rest of the read, mid-line (or nothing)
                if text:
                    out.append(text)
                    at_start = False
                break
            if at_start and text == b"." and (bare or ending != CRLF):
                self._refused = True
                self._refuse()
                return
            out.append(text + CRLF)
            at_start, bare = True, ending != CRLF
        self._at_line_start, self._bare_before = at_start, bare
        super().feed_data(b"".join(out))
