"""The web console's static files: where they are, what they are, and the headers they go
out with. Served as-is (no bundler) by api/console.py, on the API's own origin.

Files: ``console/`` at the repository root when running from a checkout (``make run``, the
tests); infra/build.py copies it to ``chalicelib/console_files/`` for the Lambda package."""
from __future__ import annotations

import os
import re
import stat

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # chalicelib/
_CANDIDATES = (os.path.join(_HERE, "console_files"),
               os.path.join(os.path.dirname(_HERE), "console"))

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}

# No inline script or style, nothing from another origin: a token in this page's storage can
# only be read by the scripts this server sends. frame-ancestors: no clickjacking.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; "
                           "img-src 'self' data:; connect-src 'self'; font-src 'self'; "
                           "frame-src 'self'; object-src 'none'; base-uri 'none'; "
                           "form-action 'self'; frame-ancestors 'none'")

_cache: dict[str, tuple[int, bytes]] = {}
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def root() -> str | None:
    for candidate in _CANDIDATES:
        if os.path.isfile(os.path.join(candidate, "index.html")):
            return candidate
    return None


def headers(content_type: str) -> dict[str, str]:
    # Files are not fingerprinted, so a browser revalidates every time (no stale app.js after
    # an upgrade); they are small and few.
    return {"Content-Type": content_type, "Cache-Control": "no-cache",
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def read(*segments: str) -> tuple[bytes, str] | None:
    """(body, content type) of a console file, or None when there is none by that path. Only
    plain names with a known extension: no '..', no hidden files, no directories."""
    base = root()
    if base is None or not segments:
        return None
    if not all(_SEGMENT.match(s) and ".." not in s for s in segments):
        return None
    content_type = CONTENT_TYPES.get(os.path.splitext(segments[-1])[1])
    if content_type is None:
        return None
    path = os.path.join(base, *segments)
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    stamp = info.st_mtime_ns
    cached = _cache.get(path)
    if cached is None or cached[0] != stamp:
        # Kept in memory while unchanged: a page load asks for a dozen files at once.
        with open(path, "rb") as handle:
            cached = _cache[path] = (stamp, handle.read())
    return cached[1], content_type


def index() -> tuple[bytes, str] | None:
    return read("index.html")


def wants_html(accept: str | None) -> bool:
    return "text/html" in (accept or "").lower()
