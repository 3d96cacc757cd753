"""Open/click tracking rewriting of outgoing messages.

Pure functions: no HTTP, no database.  The caller supplies the tracking
URLs through callbacks (the link table and tokens live elsewhere).

``rewrite_html(html, *, link_url, pixel_url) -> str``
    Rewrites the ``href`` of every ``<a>`` and ``<area>`` start tag whose
    target is an absolute ``http://`` or ``https://`` URL, and inserts an
    open pixel.  Everything else in the document is preserved byte for byte:
    the document is never re-serialized.  A small tokenizer that follows the
    WHATWG tokenizer rules closely enough for this purpose (comments, bogus
    comments, ``<!DOCTYPE>``, ``<![CDATA[``, raw-text elements such as
    ``<script>``/``<style>``/``<title>``/``<textarea>``, quoted and unquoted
    attribute values, upper-case names) only locates the spans to replace;
    the output is spliced from the original text.

    Link rules
      * ``link_url(url)`` is called once per tracked link, in document order,
        with the *effective* URL: HTML character references decoded with the
        attribute-value rules of HTML (``&amp;`` -> ``&``, but ``&copy=1``
        stays as is), leading/trailing whitespace and C0 controls stripped,
        and embedded tab/CR/LF removed (as a browser would).
      * If it returns a non-empty ``str`` the href value is replaced by it,
        HTML-escaped (``&``, ``<``, ``>``, ``"``, ``'``) and written in the
        original quote character (double quotes if the value was unquoted).
        ``None`` or ``""`` leaves the tag untouched.  Anything else raises
        ``TypeError``.  The callback is also the place to refuse links that
        already point to the tracking host.
      * Never tracked (the callback is not called, the tag is untouched):
        anything that is not ``http``/``https`` with a host (``mailto:``,
        ``tel:``, ``sms:``, ``javascript:``, ``data:``, ``#anchor``,
        relative or empty hrefs, ``<a href>`` without value);
        hrefs containing a template placeholder (``{{``, ``}}``, ``{%``,
        ``%}``, ``%7B%7B``, ``%7B%25``, Mailchimp-style ``*|``/``|*``);
        tags inside comments (including Outlook conditional comments
        ``<!--[if mso]>``), inside ``<script>``/``<style>`` and other raw-text
        elements, and tags left unterminated at end of input (browsers drop
        them).
      * Opt-out markers on the tag: ``data-no-track`` (present, any value),
        ``data-track`` with value ``false``/``0``/``no``/``off``
        (case-insensitive), or the class ``no-track``.  The marker attribute
        is kept in the output (harmless).
      * Only the first ``href`` attribute of a tag counts (duplicates are
        ignored by browsers).

    Pixel
      ``<img src="{pixel_url}" width="1" height="1" alt=""
      style="display:none;border:0;width:1px;height:1px" />`` (src
      HTML-escaped) is inserted just before the last real ``</body>`` end tag
      (case-insensitive, not inside a comment or script), or appended at the
      end of the document when there is none.  ``pixel_url`` ``None`` or
      ``""`` means no pixel.

``apply_tracking(raw, *, link_url, pixel_url) -> bytes``
    Parses an RFC 5322 message (``BytesParser(policy=email.policy.default)``)
    and runs :func:`rewrite_html` over every ``text/html`` part that is not
    ``Content-Disposition: attachment``.  Subtrees of attachment parts and
    embedded messages (``message/*``, e.g. a forwarded mail) are not
    entered.  Each rewritten HTML part gets the pixel.

    * The original bytes are returned unchanged when no part changes (no
      HTML part, nothing to track and no pixel, or undecodable HTML parts).
    * A modified part keeps all its headers in place; only its body, its
      ``Content-Transfer-Encoding`` and, when it has to change, the
      ``charset`` parameter are updated.  The body is re-encoded through
      ``MIMEPart.set_content`` in its original charset when that charset is
      ASCII-compatible and can represent the new text, otherwise in UTF-8;
      the transfer encoding is kept when it was already quoted-printable or
      base64, otherwise the shorter of the two is used, so no body line
      exceeds 76 octets.
    * HTML parts whose charset is unknown or whose bytes do not decode
      strictly in it are left untouched (no tracking rather than mojibake).
      A part without charset is decoded as US-ASCII, then UTF-8 (and then
      labelled ``charset=utf-8`` if rewritten).
    * Serialized with ``policy.SMTP`` (CRLF) with ``refold_source='none'``:
      headers read from the input are written back exactly as they were
      (only line endings normalized); other parts, ``text/plain`` included,
      keep their bytes (only line endings normalized to CRLF).
"""

from __future__ import annotations

import codecs
import email.policy
import email.utils
import html as _html
import re
from dataclasses import dataclass
from email.message import MIMEPart
from email.parser import BytesParser
from html.entities import html5 as _HTML5_ENTITIES
from typing import Callable, Optional
from urllib.parse import urlsplit

__all__ = ["rewrite_html", "apply_tracking", "PIXEL_TEMPLATE"]

LinkUrl = Callable[[str], Optional[str]]

PIXEL_TEMPLATE = (
    '<img src="{src}" width="1" height="1" alt="" '
    'style="display:none;border:0;width:1px;height:1px" />'
)

# --------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------

_WS = " \t\n\f\r"
_WS_SLASH = _WS + "/"
_NAME_END = _WS + "/>"
_ATTR_NAME_END = _WS + "/>="
_UNQUOTED_END = _WS + ">"
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# Elements whose content is text, not markup.  ``noscript`` is deliberately
# absent: mail clients do not run scripts, so its content is parsed as markup.
_RAW_TEXT = frozenset(
    {"script", "style", "title", "textarea", "xmp", "iframe", "noembed", "noframes"}
)
_RAW_END = {
    name: re.compile(r"</%s[\t\n\f\r />]" % name, re.IGNORECASE | re.ASCII)
    for name in _RAW_TEXT
}
_LINK_TAGS = frozenset({"a", "area"})


def _lower(s: str) -> str:
    return s.translate(_ASCII_LOWER)


def _is_ascii_alpha(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z")


@dataclass
class _Attr:
    name: str  # ASCII-lowercased
    value: Optional[str]  # raw (undecoded) value text; None: attribute without value
    start: int  # span of the value token in the source, quotes included
    end: int
    quote: str  # '"', "'" or "" (unquoted / no value)


@dataclass
class _StartTag:
    name: str
    attrs: list


def _parse_attrs(s: str, j: int):
    """Parse attributes from ``j`` (just after the tag name).

    Returns ``(attrs, end)`` with ``end`` the index after ``>``, or
    ``(attrs, None)`` when the input ends inside the tag.
    """
    n = len(s)
    attrs = []
    while True:
        while j < n and s[j] in _WS_SLASH:
            j += 1
        if j >= n:
            return attrs, None
        if s[j] == ">":
            return attrs, j + 1
        k = j + 1  # the first character may be '=' (it is then part of the name)
        while k < n and s[k] not in _ATTR_NAME_END:
            k += 1
        name = _lower(s[j:k])
        j = k
        while j < n and s[j] in _WS:
            j += 1
        if j >= n:
            return attrs, None
        if s[j] != "=":
            attrs.append(_Attr(name, None, j, j, ""))
            continue
        j += 1
        while j < n and s[j] in _WS:
            j += 1
        if j >= n:
            return attrs, None
        c = s[j]
        if c == '"' or c == "'":
            close = s.find(c, j + 1)
            if close < 0:
                return attrs, None
            attrs.append(_Attr(name, s[j + 1 : close], j, close + 1, c))
            j = close + 1
        elif c == ">":
            attrs.append(_Attr(name, "", j, j, ""))
            return attrs, j + 1
        else:
            k = j
            while k < n and s[k] not in _UNQUOTED_END:
                k += 1
            attrs.append(_Attr(name, s[j:k], j, k, ""))
            j = k


def _skip_to_gt(s: str, j: int) -> int:
    gt = s.find(">", j)
    return len(s) if gt < 0 else gt + 1


_COMMENT_END = re.compile(r"--!?>")


def _skip_comment(s: str, j: int) -> int:
    """``j`` is just after ``<!--``; return the index after the comment."""
    if s.startswith(">", j):
        return j + 1
    if s.startswith("->", j):
        return j + 2
    m = _COMMENT_END.search(s, j)
    return len(s) if m is None else m.end()


def _scan(s: str):
    """Tokenize ``s``; return (list of (start, _StartTag) for a/area, body_close)."""
    n = len(s)
    links = []
    body_close = None
    i = 0
    while True:
        lt = s.find("<", i)
        if lt < 0 or lt + 1 >= n:
            break
        c = s[lt + 1]
        if c == "!":
            if s.startswith("<!--", lt):
                i = _skip_comment(s, lt + 4)
            elif s.startswith("<![CDATA[", lt):
                e = s.find("]]>", lt + 9)
                i = e + 3 if e >= 0 else _skip_to_gt(s, lt + 2)
            else:  # <!DOCTYPE ...> and bogus comments
                i = _skip_to_gt(s, lt + 2)
        elif c == "?":
            i = _skip_to_gt(s, lt + 2)
        elif c == "/":
            if lt + 2 < n and _is_ascii_alpha(s[lt + 2]):
                k = lt + 3
                while k < n and s[k] not in _NAME_END:
                    k += 1
                name = _lower(s[lt + 2 : k])
                _, end = _parse_attrs(s, k)  # end tags may carry (ignored) attributes
                if end is None:
                    break
                if name == "body":
                    body_close = lt
                i = end
            elif s.startswith("</>", lt):
                i = lt + 3
            elif lt + 2 >= n:
                break
            else:
                i = _skip_to_gt(s, lt + 2)
        elif _is_ascii_alpha(c):
            k = lt + 2
            while k < n and s[k] not in _NAME_END:
                k += 1
            name = _lower(s[lt + 1 : k])
            attrs, end = _parse_attrs(s, k)
            if end is None:  # unterminated tag at EOF: dropped by browsers
                break
            if name in _LINK_TAGS:
                links.append(_StartTag(name, attrs))
            i = end
            if name == "plaintext":
                break
            if name in _RAW_TEXT:
                m = _RAW_END[name].search(s, i)
                if m is None:
                    break
                i = m.start()
        else:
            i = lt + 1
    return links, body_close


# --------------------------------------------------------------------------
# Attribute values and URLs
# --------------------------------------------------------------------------

_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[A-Za-z][A-Za-z0-9]*;?)")
_MAX_ENTITY_NAME = max(len(k) for k in _HTML5_ENTITIES)


def _unescape_attr(value: str) -> str:
    """Decode character references with the HTML attribute-value rules."""
    if "&" not in value:
        return value

    def repl(m: re.Match) -> str:
        ref = m.group(1)
        if ref[0] == "#":
            return _html.unescape(m.group(0))
        for length in range(min(len(ref), _MAX_ENTITY_NAME), 0, -1):
            prefix = ref[:length]
            if prefix in _HTML5_ENTITIES:
                break
        else:
            return m.group(0)
        if not prefix.endswith(";"):
            nxt = ref[length] if length < len(ref) else value[m.end() : m.end() + 1]
            if nxt == "=" or nxt.isascii() and nxt.isalnum():
                return m.group(0)  # e.g. "?a=1&copy=2" is not "©=2" in attributes
        return _HTML5_ENTITIES[prefix] + ref[length:]

    return _CHARREF.sub(repl, value)


_C0_SPACE = "".join(chr(c) for c in range(0x21))
_TAB_NEWLINE = re.compile("[\t\n\r]")
_PLACEHOLDERS = ("{{", "}}", "{%", "%}", "%7b%7b", "%7b%25", "*|", "|*")
_FALSY = frozenset({"false", "0", "no", "off"})


def _effective_url(raw_value: str) -> str:
    return _TAB_NEWLINE.sub("", _unescape_attr(raw_value).strip(_C0_SPACE))


def _is_trackable(url: str) -> bool:
    low = url.lower()
    if not (low.startswith("http://") or low.startswith("https://")):
        return False
    if any(p in low for p in _PLACEHOLDERS):
        return False
    try:
        return bool(urlsplit(url).hostname)
    except ValueError:
        return False


def _opted_out(attrs) -> bool:
    seen = set()
    for a in attrs:
        if a.name in seen:
            continue
        seen.add(a.name)
        if a.name == "data-no-track":
            return True
        if a.value is None:
            continue
        if a.name == "data-track" and _lower(_unescape_attr(a.value).strip(_WS)) in _FALSY:
            return True
        if a.name == "class" and "no-track" in _unescape_attr(a.value).split():
            return True
    return False


def _first(attrs, name: str) -> Optional[_Attr]:
    for a in attrs:
        if a.name == name:
            return a
    return None


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def rewrite_html(html: str, *, link_url: LinkUrl, pixel_url: Optional[str]) -> str:
    """Rewrite tracked links and insert the open pixel; see the module docstring."""
    links, body_close = _scan(html)
    edits = []  # (start, end, replacement), non-overlapping
    for tag in links:
        href = _first(tag.attrs, "href")
        if href is None or not href.value or _opted_out(tag.attrs):
            continue
        url = _effective_url(href.value)
        if not _is_trackable(url):
            continue
        new = link_url(url)
        if new is None:
            continue
        if not isinstance(new, str):
            raise TypeError(f"link_url must return str or None, not {type(new).__name__}")
        if not new:
            continue
        quote = href.quote or '"'
        edits.append((href.start, href.end, quote + _html.escape(new, quote=True) + quote))
    if pixel_url:
        at = len(html) if body_close is None else body_close
        edits.append((at, at, PIXEL_TEMPLATE.format(src=_html.escape(pixel_url, quote=True))))
    if not edits:
        return html
    edits.sort(key=lambda e: e[0])
    out = []
    last = 0
    for start, end, text in edits:
        out.append(html[last:start])
        out.append(text)
        last = end
    out.append(html[last:])
    return "".join(out)


_PARSE_POLICY = email.policy.default
_OUTPUT_POLICY = email.policy.SMTP.clone(refold_source="none")
_ASCII_PROBE = "".join(chr(c) for c in range(0x20, 0x7F)) + "\t\r\n"


def _ascii_compatible(charset: str) -> bool:
    try:
        return _ASCII_PROBE.encode(charset) == _ASCII_PROBE.encode("ascii")
    except (LookupError, UnicodeError):
        return False


def _decode_html_part(part: MIMEPart):
    """Return (text, charset_param_or_None) or None when not decodable strictly."""
    data = part.get_payload(decode=True)
    if data is None:
        return None
    declared = part.get_param("charset")
    if declared is not None and not isinstance(declared, str):  # RFC 2231 tuple
        declared = email.utils.collapse_rfc2231_value(declared)
    if declared:
        declared = declared.strip()
        try:
            codecs.lookup(declared)
            return data.decode(declared), declared
        except (LookupError, UnicodeError):
            return None
    for cs in ("ascii", "utf-8"):
        try:
            return data.decode(cs), None
        except UnicodeError:
            pass
    return None


def _reencode(part: MIMEPart, text: str, declared: Optional[str]) -> None:
    """Replace ``part``'s body with ``text``, keeping its headers in place."""
    charset = "utf-8"
    candidate = declared or "us-ascii"
    if _ascii_compatible(candidate):
        try:
            text.encode(candidate)
            charset = candidate
        except UnicodeError:
            pass

    old_cte = (part.get("Content-Transfer-Encoding") or "").strip().lower()
    candidates = [old_cte] if old_cte in ("quoted-printable", "base64") else ["quoted-printable", "base64"]
    best = None
    for cte in candidates:
        scratch = MIMEPart(policy=part.policy)
        scratch.set_content(text, subtype="html", charset=charset, cte=cte)
        payload = scratch.get_payload()
        if best is None or len(payload) < len(best[1]):
            best = (cte, payload)
    cte, payload = best

    part.set_payload(payload)
    if "Content-Transfer-Encoding" in part:
        part.replace_header("Content-Transfer-Encoding", cte)
    else:
        part["Content-Transfer-Encoding"] = cte
    if declared is None and charset == "us-ascii":
        return  # no charset parameter: US-ASCII is the default, leave the header alone
    if declared is None or declared.lower() != charset.lower():
        part.set_param("charset", charset)


def _rewrite_parts(part: MIMEPart, link_url: LinkUrl, pixel_url: Optional[str]) -> bool:
    if part.get_content_disposition() == "attachment":
        return False
    maintype = part.get_content_maintype()
    if maintype == "multipart":
        payload = part.get_payload()
        if not isinstance(payload, list):
            return False
        changed = False
        for sub in payload:
            changed |= _rewrite_parts(sub, link_url, pixel_url)
        return changed
    if part.get_content_type() != "text/html":
        return False
    decoded = _decode_html_part(part)
    if decoded is None:
        return False
    text, declared = decoded
    new_text = rewrite_html(text, link_url=link_url, pixel_url=pixel_url)
    if new_text == text:
        return False
    _reencode(part, new_text, declared)
    return True


def apply_tracking(raw: bytes, *, link_url: LinkUrl, pixel_url: Optional[str]) -> bytes:
    """Apply :func:`rewrite_html` to the HTML body parts of a message; see the module docstring."""
    msg = BytesParser(policy=_PARSE_POLICY).parsebytes(raw)
    if not _rewrite_parts(msg, link_url, pixel_url):
        return raw
    return msg.as_bytes(policy=_OUTPUT_POLICY)
