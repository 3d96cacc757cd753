"""Enhanced status codes on every reply (ENHANCEDSTATUSCODES, RFC 2034; codes of RFC 3463).

The gateway's own replies carry their code where they are written (handler.py, auth.py);
aiosmtpd's built-in ones (``250 OK``, ``221 Bye``, ``503 Error: need MAIL command``, ``552
Error: Too much mail data`` ...) do not. :func:`enhanced` gives those theirs as the gateway
pushes them: a fixed text gets the wording and code Postfix uses for it, any other reply the
code of its class (RFC 3463 3.x, Postfix's choices: 500 5.5.2, 501 5.5.4, 503 5.5.1 ...).
As RFC 2034 says, the greeting, the replies to EHLO and HELO and the 3xx intermediate
replies have none.
"""
from __future__ import annotations

#: aiosmtpd's fixed replies, and what the gateway says instead. ``{limit}``: the message
#: size limit in octets. aiosmtpd refuses a line longer than its reader's limit with "500
#: Line too long"; the gateway's DATA limit is the message size limit (lines.py), so such a
#: line is a message over the size limit.
_REWORDED = {
    "250 OK": "250 2.0.0 OK",
    "221 Bye": "221 2.0.0 Bye",
    "220 Ready to start TLS": "220 2.0.0 Ready to start TLS",
    "552 Error: Too much mail data":
        "552 5.3.4 Message too big: the limit is {limit} octets",
    "500 Line too long (see RFC5321 4.5.3.1.6)":
        "552 5.3.4 Message too big: the limit is {limit} octets",
    "552 Error: message size exceeds fixed maximum message size":
        "552 5.3.4 Message size exceeds the fixed maximum message size ({limit} octets)",
    "500 Command line too long": "500 5.5.2 Command line too long",
    "503 Error: need MAIL command": "503 5.5.1 Error: need MAIL command",
    "503 Error: need RCPT command": "503 5.5.1 Error: need RCPT command",
    "503 Error: nested MAIL command": "503 5.5.1 Error: nested MAIL command",
    "503 Already authenticated": "503 5.5.1 Error: already authenticated",
    "554 Command refused due to lack of security":
        "554 5.7.0 Command refused due to lack of security",
    "530 Must issue a STARTTLS command first": "530 5.7.0 Must issue a STARTTLS command first",
    "454 TLS not available": "454 4.7.0 TLS not available",
    "502 EXPN not implemented": "502 5.5.1 EXPN not implemented",
}

#: The code of a reply class (first three digits) when its text is not in _REWORDED.
_BY_CODE = {
    "211": "2.0.0", "214": "2.0.0", "221": "2.0.0", "235": "2.7.0",
    "250": "2.0.0", "251": "2.1.5", "252": "2.0.0",
    "421": "4.3.0", "450": "4.2.0", "451": "4.3.0", "452": "4.3.1", "454": "4.7.0",
    "500": "5.5.2", "501": "5.5.4", "502": "5.5.1", "503": "5.5.1", "504": "5.5.4",
    "521": "5.3.2", "530": "5.7.0", "534": "5.7.9", "535": "5.7.8", "538": "5.7.11",
    "550": "5.0.0", "551": "5.1.6", "552": "5.3.4", "553": "5.1.3", "554": "5.0.0",
    "555": "5.5.4",
}


def enhanced(reply: str, size_limit: int) -> str:
    """``reply`` with an enhanced status code (module doc). Only single-line 2xx, 4xx and 5xx
    replies are given one; anything else is returned as it is."""
    if reply[:1] not in "245" or reply[3:4] != " ":
        return reply
    if reply[5:6] == "." and reply[4:5] == reply[:1]:  # "250 2.1.0 …": the gateway's own
        return reply
    fixed = _REWORDED.get(reply)
    if fixed is not None:
        return fixed.format(limit=size_limit)
    if reply[:3] == "220":  # the greeting
        return reply
    code = _BY_CODE.get(reply[:3], f"{reply[:1]}.0.0")
    return f"{reply[:3]} {code} {reply[4:]}"
