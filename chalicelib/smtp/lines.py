"""How the gateway reads the lines of DATA: bare line feeds and long lines.

aiosmtpd 1.4.6 reads DATA with ``reader.readuntil(b"\\r\\n")`` and does everything else
itself (dot-unstuffing, the end-of-data line, the size limit). Its reader is asyncio's
StreamReader, whose limit (``SMTP.line_length_limit``, 1001) bounds every line; a line
without CRLF within it was refused with a misleading ``500 Line too long``, a ``..`` line
after a bare LF was not unstuffed, and a message ending ``\\n.\\n`` was never answered.

:class:`DataLineReader` is that same StreamReader (``adopt`` gives the object aiosmtpd made
this class) with a different answer to one call, ``readuntil(b"\\r\\n")``, the DATA line:

* **Bare LF and bare CR are line breaks**, normalised to CRLF, so each line is unstuffed,
  counted and stored like any other (the policy of Postfix's ``smtpd_forbid_bare_newline =
  normalize``). Commands were already read up to a bare LF by aiosmtpd.
* **Only CRLF . CRLF ends DATA.** A line holding a single dot next to a bare LF or CR
  (``\\n.\\n``, ``\\n.\\r\\n``, ``\\r\\n.\\n``, ``\\r.\\r`` ...) is how SMTP smuggling hides a
  second message, and how a broken client ends one: it raises :class:`NonStandardEnd`, which
  the gateway answers at once with a 5.5.2 refusal and closes the connection (nothing after
  it is read as commands; the client is not left waiting).
* **Long lines.** Between ``begin_data`` and ``end_data`` a line may be as long as the
  message may be (the size limit), so mail from servers that do not wrap lines is kept as it
  came; commands keep aiosmtpd's limit. Memory stays bounded by the message size limit, as
  it is for the message itself.

The reader sets its own ``_limit`` (asyncio's StreamReader field for the line limit): this
class is that reader, and the limit is the one thing it changes.
"""
from __future__ import annotations

import asyncio
import re
from collections import deque

CRLF = b"\r\n"
_DOT_LINE = b".\r\n"
_SUBLINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n)")


class NonStandardEnd(Exception):
    """A line holding a single dot that is not CRLF . CRLF (module doc)."""


class DataLineReader(asyncio.StreamReader):
    """asyncio's StreamReader whose ``readuntil(b"\\r\\n")`` reads DATA lines as the module
    doc says; every other read is the StreamReader's own."""

    _pending: deque
    _after_crlf: bool
    _command_limit: int
    _overrun: bool

    @classmethod
    def adopt(cls, reader: asyncio.StreamReader) -> "DataLineReader":
        """The reader aiosmtpd made for a connection, as this class (same buffer, transport,
        limit and waiters: only the methods change)."""
        reader.__class__ = cls
        reader._pending = deque()
        reader._after_crlf = True
        reader._overrun = False
        reader._command_limit = reader._limit
        return reader

    def begin_data(self, line_limit: int) -> None:
        self._pending.clear()
        self._overrun = False
        self._after_crlf = True  # the DATA command's own line ended the previous line
        self._limit = max(line_limit, self._command_limit)

    def end_data(self) -> None:
        self._pending.clear()
        self._limit = self._command_limit

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        if separator != CRLF:
            return await super().readuntil(separator)
        if self._pending:
            return self._pending.popleft()
        try:
            line = await super().readuntil(b"\n")
        except asyncio.LimitOverrunError:
            # Too long: aiosmtpd reads what was consumed and refuses the message at its end.
            # The consumed part may end with the CR of a CRLF whose LF comes next.
            self._after_crlf, self._overrun = False, True
            raise
        if self._overrun:
            self._overrun = False
            if line == b"\n":
                line = CRLF
        if line.find(b"\r") == len(line) - 2 >= 0:
            # The usual line: its first CR is the one of the CRLF that ends it.
            if line == _DOT_LINE and not self._after_crlf:
                raise NonStandardEnd
            self._after_crlf = True
            return line
        first = None
        for text, ending in _SUBLINE.findall(line):
            standard = ending == CRLF
            if text == b"." and not (standard and self._after_crlf):
                raise NonStandardEnd
            self._after_crlf = standard
            if first is None:
                first = text + CRLF
            else:
                self._pending.append(text + CRLF)
        return first
