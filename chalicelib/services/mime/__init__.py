"""Build RFC 5322 messages safely (pure: no HTTP, no database); ``view`` reads stored ones back
for people (headers, text, HTML, attachments).

Everything that reaches a header or the wire passes through this module:

* addresses are validated with ``email_validator`` (IDN domains become A-labels, domains are
  lower-cased; a non-ASCII local part is internationalized mail, RFC 6531: such an address is
  written in UTF-8 in the address fields, RFC 6532, and the message needs SMTPUTF8, which
  ``needs_smtputf8`` tells from the stored bytes and addresses);
* custom headers are checked against RFC 5322 field-name syntax and against the headers the
  service owns (:data:`OWNED_HEADERS`, :data:`OWNED_HEADER_PREFIXES`);
* attachments are strictly Base64-decoded;
* the MIME tree, body transfer encodings (7bit / quoted-printable / base64), attachment
  parameters (RFC 2231) and generation with CRLF line endings are done by the standard
  library's :mod:`email` package.

Header *values* that carry user text (From/To/Cc/Reply-To, Subject and custom headers) are
encoded and folded here rather than by ``email.headerregistry``: the Python 3.11 header
refolder drops the quoting of long display names that contain specials (``"Smith, John"``
becomes two mailboxes, ``"a: b;"`` becomes a group) and turns long ASCII custom headers such as
``List-Unsubscribe`` into RFC 2047 encoded-words, which breaks them.  The encoding itself still
comes from the standard library (``email.base64mime`` / ``email.quoprimime`` encoded-words,
``email.utils.quote``); only the choice of where to fold is ours, and it is deliberately
simple: a fold only ever replaces an existing single space with CRLF + space.

As defence in depth, :func:`build_message` parses its own output back with the email package
and checks that the header names and every recipient address are exactly what was intended,
and :func:`check_wire_format` checks the bytes: ASCII only, CRLF line endings only, no line
over 998 octets and no SMTP end-of-data line (``CRLF . CRLF``).

``seven_bit`` makes an 8-bit message 7-bit (quoted-printable or base64 parts) for a server
without 8BITMIME. ``lines`` makes the lines of a message someone else wrote short (over 998 octets: the parts
holding them re-encoded, quoted-printable or base64).

The package's modules, by concern: ``base`` (the errors, limits, the header-text check),
``headers`` (owned headers, custom header validation, encoding and folding, reading a
Message-ID), ``addresses``
(Address, parse_address), ``checks`` (line endings, wire format, the self-check,
header_addresses) and ``build`` (attachments, build_message).
"""
from chalicelib.services.mime.addresses import Address, parse_address, parse_address_list
from chalicelib.services.mime.base import (
    MAX_ATTACHMENT_NAME_LENGTH,
    MAX_DISPLAY_NAME_LENGTH,
    MAX_HEADER_NAME_LENGTH,
    MAX_HEADER_VALUE_LENGTH,
    InvalidField,
    MessageBuildError,
)
from chalicelib.services.mime.build import build_message, decode_attachment
from chalicelib.services.mime.checks import (  # noqa: F401  (verify_built*: the tests call them)
    verify_built,
    verify_built_cheap,
    check_wire_format,
    HeaderBlock,
    header_addresses,
    header_block_end,
    message_size,
    needs_smtputf8,
    normalize_line_endings,
    strip_bcc,
)
from chalicelib.services.mime.seven_bit import NotConvertible, to_seven_bit
from chalicelib.services.mime.headers import (
    OWNED_HEADER_PREFIXES,
    OWNED_HEADERS,
    is_owned_header,
    message_id,
    validate_custom_headers,
)

__all__ = [
    "OWNED_HEADERS",
    "OWNED_HEADER_PREFIXES",
    "MAX_DISPLAY_NAME_LENGTH",
    "MAX_HEADER_NAME_LENGTH",
    "MAX_HEADER_VALUE_LENGTH",
    "MAX_ATTACHMENT_NAME_LENGTH",
    "InvalidField",
    "MessageBuildError",
    "Address",
    "parse_address",
    "parse_address_list",
    "validate_custom_headers",
    "is_owned_header",
    "message_id",
    "decode_attachment",
    "build_message",
    "normalize_line_endings",
    "strip_bcc",
    "check_wire_format",
    "message_size",
    "HeaderBlock",
    "header_addresses",
    "header_block_end",
    "needs_smtputf8",
    "to_seven_bit",
    "NotConvertible",
]
