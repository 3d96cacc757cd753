"""Password hashing with argon2id (argon2-cffi).

Parameters come from settings (PASSWORD_HASH_TIME_COST, PASSWORD_HASH_MEMORY_KIB,
PASSWORD_HASH_PARALLELISM); a stored hash made with other parameters is re-hashed at the next
successful login (``needs_rehash``). Checking a password for an address that has no account (or
an account without a password) runs the same argon2 verification against a dummy hash, so a
login answer takes as long whether or not the address exists.
"""
from __future__ import annotations

import secrets
import threading
from typing import TYPE_CHECKING

from chalicelib import errors
from chalicelib.config import get_settings

if TYPE_CHECKING:
    from argon2 import PasswordHasher

MAX_PASSWORD_LENGTH = 1024  # argon2 takes any length; this bounds the work one request causes

_lock = threading.Lock()
_hashers: dict[tuple, PasswordHasher] = {}
_dummies: dict[tuple, str] = {}


def _params() -> tuple[int, int, int]:
    s = get_settings()
    return (s.password_hash_time_cost, s.password_hash_memory_kib, s.password_hash_parallelism)


def hasher() -> PasswordHasher:
    params = _params()
    found = _hashers.get(params)
    if found is None:
        from argon2 import PasswordHasher, Type  # imported lazily: cold start

        time_cost, memory_cost, parallelism = params
        found = _hashers[params] = PasswordHasher(time_cost=time_cost, memory_cost=memory_cost,
                                                  parallelism=parallelism, type=Type.ID)
    return found


def _dummy_hash() -> str:
    params = _params()
    with _lock:
        if params not in _dummies:
            _dummies[params] = hasher().hash(secrets.token_urlsafe(24))
        return _dummies[params]


def validate_new(password: str, field: str = "password") -> None:
    """The rules for a password being set (registration, change, reset, invitation)."""
    minimum = get_settings().auth_minimum_password_length
    if not isinstance(password, str) or len(password) < minimum:
        raise errors.ValidationError(f"{field}: must be at least {minimum} characters long",
                                     field=field)
    if len(password) > MAX_PASSWORD_LENGTH:
        raise errors.ValidationError(f"{field}: must be at most {MAX_PASSWORD_LENGTH} characters",
                                     field=field)


def hash_password(password: str) -> str:
    return hasher().hash(password)


def verify(stored_hash: str | None, password: str) -> bool:
    """True when ``password`` matches; with no stored hash, spends the same time and says no."""
    if not isinstance(password, str) or len(password) > MAX_PASSWORD_LENGTH:
        password = ""
    if not stored_hash:
        verify_dummy(password)
        return False
    from argon2.exceptions import InvalidHashError, VerificationError  # lazily: cold start

    try:
        return hasher().verify(stored_hash, password)
    except (VerificationError, InvalidHashError):  # VerifyMismatchError is a VerificationError
        return False


def verify_dummy(password: str) -> None:
    """Burn one verification's worth of time for an unknown address."""
    from argon2.exceptions import InvalidHashError, VerificationError  # lazily: cold start

    try:
        hasher().verify(_dummy_hash(), password or "")
    except (VerificationError, InvalidHashError):
        pass


def needs_rehash(stored_hash: str) -> bool:
    from argon2.exceptions import InvalidHashError  # imported lazily: cold start

    try:
        return hasher().check_needs_rehash(stored_hash)
    except (InvalidHashError, ValueError):
        return True
