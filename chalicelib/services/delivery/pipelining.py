"""SMTP PIPELINING (RFC 2920) on smtplib's own primitives: the client every delivery session
uses (``connect.py`` opens it).

When the server offers PIPELINING, a message's MAIL FROM, RCPT TO and DATA leave in ONE write
(one TCP segment: separate writes would wait on Nagle's algorithm for the first one's
acknowledgement) and their three replies are read in order, one reply per command as
RFC 2920 3.1 asks; the content and the end of data follow once the DATA command was answered
354. On a reused session that is two round trips a message instead of four.

Where the in-flight marker goes: the caller writes it between the 354 and the content
(``content``). Nothing can be delivered before the end of data, so a worker that dies after
the pipelined DATA but before the marker leaves a session the server drops without a
message. A caller that must not send after all (its claim was lost, its destination backs
off) cannot step back from the DATA state over the session (a lone "." would deliver an
empty message): it closes the connection, which abandons the transaction (RFC 5321 4.1.1.4).

The envelope is formatted and the content dot-stuffed by smtplib itself (``quoteaddr``, and
``SMTP.data`` with its DATA command and 354 replayed from the pipelined flight), so nothing
of the protocol is re-implemented here.
"""
from __future__ import annotations

import smtplib


class Client(smtplib.SMTP):
    """smtplib.SMTP with a pipelined envelope."""

    _replay: tuple[int, bytes] | None = None

    def pipelining(self) -> bool:
        return self.does_esmtp and self.has_extn("pipelining")

    def envelope(self, mail_from: str, rcpt_to: str, mail_options=(), rcpt_options=()
                 ) -> list[tuple[int, bytes]]:
        """MAIL, RCPT and DATA in one flight (with their ESMTP parameters, formatted as
        SMTP.mail and SMTP.rcpt do); their replies, in order (None: the server closed the
        connection before that one; the first one missing raises as getreply does)."""
        mail_params = rcpt_params = ""
        if self.does_esmtp:
            if any(o.lower() == "smtputf8" for o in mail_options):
                self.command_encoding = "utf-8"  # as SMTP.mail does
            mail_params = "".join(" " + o for o in mail_options)
            rcpt_params = "".join(" " + o for o in rcpt_options)
        self.send(f"MAIL FROM:{smtplib.quoteaddr(mail_from)}{mail_params}\r\n"
                  f"RCPT TO:{smtplib.quoteaddr(rcpt_to)}{rcpt_params}\r\n"
                  "DATA\r\n")
        replies = [self.getreply()]
        while len(replies) < 3:
            try:
                replies.append(self.getreply() if self.sock is not None else None)
            except smtplib.SMTPServerDisconnected:
                # Closed after an earlier reply (a 421 to MAIL or RCPT): that reply counts.
                replies.append(None)
        return replies

    def content(self, data: bytes, go_ahead: tuple[int, bytes]) -> tuple[int, bytes]:
        """The message after the pipelined DATA was answered ``go_ahead`` (354): smtplib's
        ``data`` with its DATA command and that reply replayed."""
        self._replay = go_ahead
        try:
            return self.data(data)
        finally:
            self._replay = None

    def putcmd(self, cmd, args=""):
        if self._replay is not None and cmd == "data":
            return  # already sent in the pipelined flight
        super().putcmd(cmd, args)

    def getreply(self):
        if self._replay is not None:
            reply, self._replay = self._replay, None
            return reply
        return super().getreply()
