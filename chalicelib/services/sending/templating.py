"""Safe Mustache subset for email templates: subject, HTML body and text body.

Supported: ``{{ var }}`` (HTML-escaped in HTML bodies), ``{{{ raw }}}`` and ``{{& raw }}``,
sections ``{{#items}}...{{/items}}``, inverted sections ``{{^x}}...{{/x}}``, dotted names
``{{ a.b.c }}``, the implicit iterator ``{{.}}`` and comments ``{{! ... }}``.

Refused when a template is saved (``validate_template``) and again by ``render``: partials
``{{> x}}``, set-delimiter tags ``{{=<% %>=}}``, template inheritance (``{{<x}}``, ``{{$x}}``),
unbalanced or mismatched sections, unclosed tags, empty or malformed tag names, templates
larger than ``MAX_SOURCE_BYTES``, with more than ``MAX_TAGS`` tags, or nesting sections deeper
than ``MAX_DEPTH``. Every refusal is a ``TemplateSyntaxError`` carrying the 1-based line and
column of the offending tag.

How chevron is used. Templates are parsed by chevron's tokenizer
(``chevron.tokenizer.tokenize``), which implements the Mustache grammar including the
standalone-line whitespace rules; a scan of our own runs first so that errors carry a precise
line and column, and so that refused constructs never reach chevron. The token stream is then
compiled into a small tree and rendered here, *not* by ``chevron.render``, because
``chevron.render`` cannot be made safe from outside:

* its name lookup falls back to ``getattr`` on any value and calls any callable it finds in a
  section, so a template and model chosen by an API caller reach Python internals -- with
  chevron 0.14.0, ``chevron.render('{{#s.format}}x{{/s.format}}',
  {'s': '{1.__globals__[sys].modules[os].environ[HOME]}'})`` returns the process environment
  (on Lambda, the AWS credentials). Wrapping the model does not close this: chevron pushes a
  bare ``True`` onto its scope stack for inverted sections, and looks attributes up on it.
* it loads partials from the filesystem, escapes no ``'`` and has no escape hook, and it
  exposes no point where output size or elapsed time could be checked.

The renderer below looks names up in dicts and lists only (list items by decimal index), never
reads attributes, never calls model values (a callable renders as missing), escapes ``& < > " '``
in HTML, and enforces an output-size cap and a deadline while it renders (see ``render``).
Compiled templates are cached, keyed by source, so a template validated at save time is not
parsed again to be rendered.
"""
from __future__ import annotations

import html as _html
import threading
import time
from collections import OrderedDict

from chevron.tokenizer import tokenize as _chevron_tokenize

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_TIMEOUT",
    "MAX_DEPTH",
    "MAX_SOURCE_BYTES",
    "MAX_TAGS",
    "TemplateError",
    "TemplateRenderError",
    "TemplateSyntaxError",
    "render",
    "render_template",
    "validate_template",
]

MAX_SOURCE_BYTES = 512 * 1024
# chevron's tokenizer copies the rest of the template at every tag, so its cost grows with
# (tags x template size); 10,000 tags in a 512 KiB template tokenize in about 0.15 s.
MAX_TAGS = 10_000
MAX_DEPTH = 32
DEFAULT_MAX_OUTPUT = 1_048_576
DEFAULT_TIMEOUT = 2.0

_CACHE_MAX_ENTRIES = 256
_CACHE_MAX_CHARS = 16 * 1024 * 1024  # sum of cached source lengths


class TemplateError(ValueError):
    """Base class of the errors raised by this module."""


class TemplateSyntaxError(TemplateError):
    """A template that does not parse, or uses a construct we refuse.

    ``str(exc)`` reads "line 3, column 5: unclosed section 'items'"; ``exc.message`` is the part
    after the position. ``line`` and ``column`` are 1-based; the column counts characters.
    """

    def __init__(self, message: str, line: int, column: int):
        super().__init__(message, line, column)
        self.message = message
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}: {self.message}"


class TemplateRenderError(TemplateError):
    """Rendering stopped: the output grew past its cap or the deadline passed."""


# --------------------------------------------------------------------------- #
# Validation scan
# --------------------------------------------------------------------------- #

_SIGIL_KIND = {"#": "section", "^": "inverted section", "/": "end", "&": "no escape"}
# Characters that may not start a name: sigils (ours and other Mustache dialects') that, written
# after a space ("{{ #x }}"), chevron would silently take for part of a variable name.
_BAD_NAME_START = frozenset("!#^/>=&{}<$")


def _position(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    column = offset - (source.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _syntax_error(source: str, offset: int, message: str) -> TemplateSyntaxError:
    return TemplateSyntaxError(message, *_position(source, offset))


def _excerpt(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _check_name(source: str, offset: int, name: str, tag: str) -> None:
    if not name:
        raise _syntax_error(source, offset, f"empty tag name in '{_excerpt(tag)}'")
    if name == ".":
        return
    if (name[0] in _BAD_NAME_START or any(c.isspace() or c in "{}" for c in name)
            or "" in name.split(".")):
        raise _syntax_error(source, offset, f"invalid tag name '{_excerpt(name)}' in "
                                            f"'{_excerpt(tag)}'")


def _scan(source: str) -> list[tuple[str, str]]:
    """Check ``source`` the way chevron's tokenizer reads it; return its tags in order.

    Raises TemplateSyntaxError at the first problem. The returned ``(kind, name)`` list uses
    chevron's token kinds and leaves out comments, so it can be compared with chevron's output.
    """
    tags: list[tuple[str, str]] = []
    open_sections: list[tuple[str, int]] = []  # (name, offset of its "{{")
    count = 0
    pos = 0
    while True:
        start = source.find("{{", pos)
        if start < 0:
            break
        end = source.find("}}", start + 2)
        if end < 0:
            raise _syntax_error(source, start, "unclosed tag: '{{' without a matching '}}'")
        content = source[start + 2:end]
        after = end + 2
        count += 1
        if count > MAX_TAGS:
            raise _syntax_error(source, start, f"too many tags (more than {MAX_TAGS})")
        if not content:
            raise _syntax_error(source, start, "empty tag '{{}}'")
        sigil = content[0]
        if sigil == "!":  # comment: anything up to the first "}}", newlines included
            pos = after
            continue
        inner = content[1:] if sigil in "{&#^/>=<$" else content
        name = inner.strip()
        if "\n" in name or "{{" in name:  # the "}}" found belongs to a later tag
            first_line = source[start:].split("\n", 1)[0]
            raise _syntax_error(source, start,
                                f"unclosed tag '{_excerpt(first_line)}': expected '}}}}'")
        if sigil == ">":
            raise _syntax_error(source, start, f"partials are not supported: "
                                               f"'{{{{{_excerpt(content)}}}}}'")
        if sigil == "=":
            raise _syntax_error(source, start, "set-delimiter tags are not supported")
        if sigil in "<$":
            raise _syntax_error(source, start, f"template inheritance is not supported: "
                                               f"'{{{{{_excerpt(content)}}}}}'")
        if sigil == "{":
            if not source.startswith("}", after):
                raise _syntax_error(source, start, f"unclosed triple mustache "
                                                   f"'{{{{{_excerpt(content)}}}}}': "
                                                   "expected '}}}'")
            after += 1
            kind = "no escape"
        else:
            kind = _SIGIL_KIND.get(sigil, "variable")
        tag_text = source[start:after]
        _check_name(source, start, name, tag_text)
        if kind in ("section", "inverted section"):
            if len(open_sections) >= MAX_DEPTH:
                raise _syntax_error(source, start,
                                    f"sections nested deeper than {MAX_DEPTH} levels")
            open_sections.append((name, start))
        elif kind == "end":
            if not open_sections:
                raise _syntax_error(source, start,
                                    f"closing tag '{{{{/{name}}}}}' without an open section")
            opened, opened_at = open_sections.pop()
            if opened != name:
                line, column = _position(source, opened_at)
                raise _syntax_error(source, start,
                                    f"mismatched closing tag '{{{{/{name}}}}}': section "
                                    f"'{opened}' opened at line {line}, column {column} must "
                                    f"be closed first with '{{{{/{opened}}}}}'")
        tags.append((kind, name))
        pos = after
    if open_sections:
        name, opened_at = open_sections[-1]
        raise _syntax_error(source, opened_at, f"unclosed section '{name}'")
    return tags


# --------------------------------------------------------------------------- #
# Compilation: chevron tokens -> tree
# --------------------------------------------------------------------------- #

# Nodes are uniform 3-tuples (kind, arg, body):
#   (_TEXT, literal, None)
#   (_VAR, path, None)        HTML-escaped when rendering HTML
#   (_RAW, path, None)        never escaped
#   (_SECTION, path, block)
#   (_INVERTED, path, block)
# A path is a tuple of name parts; () is the implicit iterator ".".
# A block is (nodes, literal_chars): the nodes and the total length of their _TEXT nodes, which
# the renderer charges against the output cap once per block entry.
_TEXT, _VAR, _RAW, _SECTION, _INVERTED = range(5)
_VALUE_KIND = {"variable": _VAR, "no escape": _RAW}
_SECTION_KIND = {"section": _SECTION, "inverted section": _INVERTED}


def _path(name: str) -> tuple[str, ...]:
    return () if name == "." else tuple(name.split("."))


def _block(nodes: list) -> tuple[tuple, int]:
    return tuple(nodes), sum(len(arg) for kind, arg, _ in nodes if kind == _TEXT)


def _compile(source: str) -> tuple[tuple, int]:
    if not isinstance(source, str):
        raise TypeError(f"template source must be str, not {type(source).__name__}")
    if len(source) > MAX_SOURCE_BYTES or len(source.encode("utf-8")) > MAX_SOURCE_BYTES:
        raise TemplateSyntaxError(f"template is larger than {MAX_SOURCE_BYTES} bytes", 1, 1)
    tags = _scan(source)
    try:
        tokens = list(_chevron_tokenize(source))
    except Exception as exc:  # our scan accepts a subset of chevron's grammar: not expected
        raise TemplateSyntaxError(f"template could not be parsed ({exc})", 1, 1) from None
    if [(kind, key) for kind, key in tokens if kind != "literal"] != tags:
        raise TemplateSyntaxError("template could not be parsed", 1, 1)

    stack: list[tuple[int, tuple[str, ...], list]] = []
    nodes: list = []
    for kind, key in tokens:
        if kind == "literal":
            if nodes and nodes[-1][0] == _TEXT:  # adjacent literals (around a comment)
                nodes[-1] = (_TEXT, nodes[-1][1] + key, None)
            elif key:
                nodes.append((_TEXT, key, None))
        elif kind in _VALUE_KIND:
            nodes.append((_VALUE_KIND[kind], _path(key), None))
        elif kind in _SECTION_KIND:
            stack.append((_SECTION_KIND[kind], _path(key), nodes))
            nodes = []
        else:  # "end"; the scan guarantees nothing else gets here
            section_kind, path, parent = stack.pop()
            parent.append((section_kind, path, _block(nodes)))
            nodes = parent
    return _block(nodes)


class _Cache:
    """LRU of compiled templates keyed by source, bounded in entries and in source size."""

    def __init__(self, max_entries: int, max_chars: int):
        self._entries: OrderedDict[str, tuple] = OrderedDict()
        self._chars = 0
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._lock = threading.Lock()

    def get(self, source: str) -> tuple | None:
        with self._lock:
            block = self._entries.get(source)
            if block is not None:
                self._entries.move_to_end(source)
            return block

    def put(self, source: str, block: tuple) -> None:
        if len(source) > self._max_chars:
            return
        with self._lock:
            if source in self._entries:
                return
            self._entries[source] = block
            self._chars += len(source)
            while len(self._entries) > self._max_entries or self._chars > self._max_chars:
                evicted, _ = self._entries.popitem(last=False)
                self._chars -= len(evicted)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0


_cache = _Cache(_CACHE_MAX_ENTRIES, _CACHE_MAX_CHARS)


def _compiled(source: str) -> tuple:
    block = _cache.get(source)
    if block is None:
        block = _compile(source)
        _cache.put(source, block)
    return block


# --------------------------------------------------------------------------- #
# Rendering
# --------------------------------------------------------------------------- #

_MISSING = object()


def _escape(text: str) -> str:
    # html.escape with quote=True: & < > " and ' (as &#x27;), so values are safe inside
    # single- and double-quoted attributes as well as in element content.
    return _html.escape(text, True)


def _to_text(value) -> str:
    """The text a non-str value interpolates as."""
    if value is None or value is _MISSING:
        return ""
    if value is True:
        return "true"  # JSON spelling: models come from JSON
    if value is False:
        return "false"
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dict, list, tuple)) or callable(value):
        return ""  # containers have no text form; model values are never called
    return str(value)


def _child(value, name: str):
    """``value[name]`` for a dict, ``value[int(name)]`` for a list or tuple, else _MISSING."""
    if isinstance(value, dict):
        return value.get(name, _MISSING)
    if isinstance(value, (list, tuple)) and name.isdecimal() and len(name) < 10:
        index = int(name)
        if index < len(value):
            return value[index]
    return _MISSING


def _lookup(path: tuple[str, ...], stack: list):
    """Resolve ``path`` per the Mustache spec: the first part against the context stack from
    the top, later parts only inside the value found. Dicts by key, lists and tuples by decimal
    index; nothing else is looked into, and attributes are never read."""
    if not path:
        return stack[-1]
    first = path[0]
    for context in reversed(stack):
        if isinstance(context, dict):  # the common case, inlined
            value = context.get(first, _MISSING)
        else:
            value = _child(context, first)
        if value is not _MISSING:
            break
    else:
        return _MISSING
    for part in path[1:]:
        value = _child(value, part)
        if value is _MISSING:
            break
    return value


def _execute(block: tuple, model, html: bool, max_output: int, deadline: float) -> str:
    out: list[str] = []
    append = out.append
    stack = [model]
    push = stack.append
    pop = stack.pop
    clock = time.monotonic
    escape = _escape if html else None
    size = 0

    def too_big() -> TemplateRenderError:
        return TemplateRenderError(f"rendered output is larger than {max_output} bytes")

    def run(block: tuple) -> None:
        nonlocal size
        nodes, literal_chars = block
        size += literal_chars
        if size > max_output:
            raise too_big()
        if clock() > deadline:
            raise TemplateRenderError("rendering took longer than its time limit")
        for kind, arg, body in nodes:
            if kind == _TEXT:
                append(arg)
                continue
            value = _lookup(arg, stack)
            if kind == _VAR or kind == _RAW:
                if value.__class__ is not str:
                    value = _to_text(value)
                if size + len(value) > max_output:  # before escaping, which only grows it
                    raise too_big()
                if kind == _VAR and escape is not None:
                    value = escape(value)
                size += len(value)
                if size > max_output:
                    raise too_big()
                append(value)
            elif kind == _SECTION:
                if not value or value is _MISSING or callable(value):
                    continue
                if isinstance(value, (list, tuple)):
                    for item in value:
                        push(item)
                        run(body)
                        pop()
                else:
                    push(value)
                    run(body)
                    pop()
            elif not value or value is _MISSING or callable(value):  # _INVERTED
                run(body)

    run(block)
    result = "".join(out)
    # The running count is in characters; the cap is in bytes of UTF-8.
    if not result.isascii() and len(result.encode("utf-8")) > max_output:
        raise too_big()
    return result


def _check_limits(max_output: int, timeout: float) -> None:
    if max_output <= 0:
        raise ValueError("max_output must be positive")
    if not timeout > 0:
        raise ValueError("timeout must be positive")


# --------------------------------------------------------------------------- #
# Public API
# --------------------------------------------------------------------------- #

def validate_template(source: str) -> None:
    """Raise TemplateSyntaxError if ``source`` is not a template we accept.

    The compiled template is cached, so rendering it afterwards does not parse it again.
    """
    _compiled(source)


def render(source: str, model: dict | None, *, html: bool = True,
           max_output: int = DEFAULT_MAX_OUTPUT, timeout: float = DEFAULT_TIMEOUT) -> str:
    """Render ``source`` with ``model``.

    ``html=True`` HTML-escapes ``{{ var }}`` (``& < > " '``); ``html=False`` escapes nothing
    (subject lines, text bodies). A missing name renders empty and is falsey. ``None`` renders
    empty, booleans as ``true``/``false``, numbers via ``str``; dicts, lists and callables render
    empty, and callables are falsey in sections -- model values are never called.

    Raises TemplateSyntaxError if the template is refused (it is validated here too), and
    TemplateRenderError once the output exceeds ``max_output`` bytes of UTF-8 or rendering has
    run for ``timeout`` seconds. Both bounds are checked as rendering proceeds: the size at every
    value and section body, the clock at every section body, so a hostile template stops early
    instead of after it has used the memory or the time.
    """
    _check_limits(max_output, timeout)
    deadline = time.monotonic() + timeout
    block = _compiled(source)
    return _execute(block, {} if model is None else model, html, max_output, deadline)


def render_template(subject: str | None, html_body: str | None, text_body: str | None,
                    model: dict | None, *, max_output: int = DEFAULT_MAX_OUTPUT,
                    timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Render the three parts of a message with one model.

    ``subject`` and ``text_body`` are plain text (nothing escaped), ``html_body`` is HTML. A part
    that is None stays None. ``max_output`` caps each part; ``timeout`` is one deadline for all
    three together. The subject is returned as rendered: if the model puts a line break in it,
    the mail layer must fold or reject it like any other header value.
    """
    _check_limits(max_output, timeout)
    deadline = time.monotonic() + timeout
    model = {} if model is None else model

    def part(source: str | None, html: bool) -> str | None:
        if source is None:
            return None
        return _execute(_compiled(source), model, html, max_output, deadline)

    return {
        "subject": part(subject, False),
        "html_body": part(html_body, True),
        "text_body": part(text_body, False),
    }
