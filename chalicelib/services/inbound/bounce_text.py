"""The human-readable part of a bounce: what a non-standard bounce says (Exchange, Domino,
qmail, Courier, old Sendmail, Postfix's and Exim's notification text, providers' own wording)
and what a DSN says beside its fields. Read with the standard library's ``email`` parser;
here only the text is chosen and cut:

- the text parts of the bounce, decoded with their charset, never those of the returned
  original (``message/rfc822`` and ``*/rfc822-headers`` parts are skipped, and text is cut
  where a bounce starts to quote the original: "----- Original message -----", "Below this
  line is a copy of the message", ...);
- a multipart bounce whose boundary is broken is read as the text it is;
- ``kind``: ``delay`` (a warning that delivery goes on), ``auto_reply`` (an out-of-office
  answer: not a bounce), or ``failure``.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from chalicelib.services.failures import codes

if TYPE_CHECKING:
    from email.message import Message as EmailMessage

_ORIGINAL_PARTS = ("message/rfc822", "message/global", "message/rfc822-headers",
                   "message/global-headers", "text/rfc822-headers", "text/rfc822-header",
                   "message/delivery-status", "message/global-delivery-status",
                   "message/feedback-report")
# Where a bounce's own text ends and the returned original begins.
_ORIGINAL_STARTS = re.compile(
    r"^\s*(?:-{2,}\s*)?(?:original message(?: follows)?|returned message|"
    r"(?:below this line is a|this is a) copy of (?:the|your) message|"
    r"unsent message below|(?:the )?(?:original|returned) (?:message|mail) (?:follows|headers?)|"
    r"returned mail follows|message header follows|original message header|"
    r"the header of the original message|text of the (?:original|returned) message|"
    r"content-type: message/rfc822)\b.*$", re.I | re.M)
_DELAY = re.compile(
    r"warning(?: message)? only|has not (?:yet )?been delivered|not yet been delivered|"
    r"will (?:continue to |keep )?(?:retry|try)|(?:delivery|message) (?:has been |is )?delayed|"
    r"still trying|status notification \(delay\)|delivery delayed|"
    r"could not send message for past|is being retried|will be retried", re.I)
# Words that say delivery goes on, whatever the subject says ("Delivery failure
# notification" over "Delivery attempts will continue to be made for 5 days").
_STILL_TRYING = re.compile(
    r"(?:do not|don't|no need to) resend|attempts will continue|"
    r"will continue (?:to )?(?:try|attempt|retry)", re.I)
_FAILED = re.compile(
    r"permanent(?:ly)?|fatal|giving up|given up|gave up|(?:has|have) failed|delivery failed|"
    r"\bfailed\b|(?:has been|was|is being) returned|\baborted\b|delivery problems?|"
    r"not (?:a )?member|"
    r"failure|could not be delivered|was not delivered|undeliver|did not reach|"
    r"unable to deliver|not be delivered|rejected|returned mail|mail delivery failed|"
    r"couldn't be delivered|wasn't delivered|non-?delivery", re.I)
_AUTO_REPLY_SUBJECT = re.compile(
    r"^\s*(?:auto(?:matic)?[ -]?(?:reply|response|answer)|out of (?:the )?office|"
    r"away from|on vacation|vacation|abwesenheit|absence|auto:)", re.I)


def _decode(part) -> str:
    payload = part.get_payload(decode=True) or b""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, "replace")
    except LookupError:  # an unknown charset name
        return payload.decode("utf-8", "replace")


def _texts(part, out: list[str]) -> None:
    """The text parts of ``part``, depth first, never inside a returned original."""
    kind = part.get_content_type()
    if kind in _ORIGINAL_PARTS:
        return
    if part.is_multipart():
        for child in part.get_payload():
            _texts(child, out)
        return
    if part.get_content_maintype() == "multipart":  # a broken boundary: the body as text
        out.append(part.get_payload() if isinstance(part.get_payload(), str) else "")
    elif part.get_content_maintype() == "text" or kind == "application/octet-stream" and \
            not part.get_filename():
        text = _decode(part)
        if part.get_content_subtype() == "html":
            text = re.sub(r"<[^>]+>", " ", text)
        out.append(text)


def text(msg: EmailMessage, limit: int = 20_000) -> str:
    """The bounce's own words: its text parts up to where the original is quoted."""
    chunks: list[str] = []
    _texts(msg, chunks)
    found = "\n".join(chunks)
    cut = _ORIGINAL_STARTS.search(found)
    if cut is not None:
        found = found[:cut.start()]
    return found[:limit]


def kind(msg: EmailMessage, words: str) -> str:
    """``delay``, ``auto_reply`` or ``failure`` (see the module's docstring)."""
    subject = str(msg.get("Subject") or "")
    if _DELAY.search(subject) or _STILL_TRYING.search(words) or (
            _DELAY.search(words) and not _FAILED.search(subject)):
        return "delay"
    # Auto-Submitted says nothing of which kind: bounces carry it too.
    if _AUTO_REPLY_SUBJECT.search(subject) or msg.get("X-Autoreply") or \
            msg.get("X-Autorespond") or (msg.get("Precedence") or "").lower() == "auto_reply":
        return "auto_reply" if not _FAILED.search(subject + "\n" + words) else "failure"
    return "failure"


def failed(msg: EmailMessage, words: str) -> bool:
    """The subject or the text says delivery failed."""
    return bool(_FAILED.search(str(msg.get("Subject") or "") + "\n" + words))


_REPLY_LINE = re.compile(r"^.*?(?<![\d.])[45]\d\d[ -].*$|^.*" + codes.FAILURE_STATUS + ".*$",
                         re.M)


def diagnostic(words: str, rule_hit: re.Match | None = None) -> str | None:
    """The line that says what went wrong (a reply with its code, else the line a rule
    matched), for the record; None when there is none."""
    for match in _REPLY_LINE.finditer(words):
        line = " ".join(match.group(0).split())
        if line:
            return line[:1000]
    if rule_hit is not None:
        start = words.rfind("\n", 0, rule_hit.start()) + 1
        end = words.find("\n", rule_hit.end())
        line = " ".join(words[start:end if end != -1 else None].split())
        return line[:1000] or None
    return None
