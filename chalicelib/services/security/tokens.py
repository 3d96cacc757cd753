"""Random secrets and how they are stored: only a SHA-256 hash, looked up through an index.

A lookup's timing can only tell an attacker about the hash of their own guess, never about a
stored secret, so no separate constant-time comparison is needed.

A fast hash is right for these (not argon2): they are 128+ bits of randomness, so nothing can
be guessed offline, and they are checked on every request. Passwords use argon2id instead.
"""
from __future__ import annotations

import hashlib
import re
import secrets


def generate_secret(prefix: str = "", nbytes: int = 24) -> str:
    return prefix + secrets.token_urlsafe(nbytes)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def hint(secret: str) -> str:
    """What a listing may show of a secret: its last four characters."""
    return "…" + secret[-4:]


_SLUG = re.compile(r"[^a-z0-9]+")
PERMALINK = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def slugify(text: str, fallback: str = "item") -> str:
    slug = _SLUG.sub("-", text.lower()).strip("-")[:48].strip("-")
    return slug or fallback
