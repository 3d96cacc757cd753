"""The names a sending domain is known by: the domain itself (normalized), the one-label
hosts under it (return path, tracking), and the envelope sender of its mail. No database
access but the SQL expression the delivery worker reads with its claim."""
from __future__ import annotations

from chalicelib import errors
from chalicelib.config import get_settings
from chalicelib.db.models import Domain


def normalize_domain(name: str, field: str = "name") -> str:
    value = (name or "").strip().rstrip(".").lower()
    try:
        ascii_name = value.encode("idna").decode("ascii")
    except UnicodeError:
        raise errors.ValidationError(f"{field}: {name!r} is not a valid domain name",
                                     field=field) from None
    labels = ascii_name.split(".")
    valid = (len(labels) >= 2 and len(ascii_name) <= 253 and all(
        0 < len(label) <= 63 and not label.startswith("-") and not label.endswith("-")
        and all(c.isalnum() or c == "-" for c in label) for label in labels))
    if not valid:
        raise errors.ValidationError(f"{field}: {name!r} is not a valid domain name", field=field)
    return ascii_name


def normalize_host(value: str, field: str) -> str:
    """One DNS label (the part left of the domain): ``rp``, ``bounces``, ``track``."""
    label = (value or "").strip().rstrip(".").lower()
    if not (0 < len(label) <= 63 and all(c.isalnum() or c == "-" for c in label)
            and not label.startswith("-") and not label.endswith("-") and label.isascii()):
        raise errors.ValidationError(
            f"{field}: {value!r} must be one DNS label (letters, digits, hyphens; at most 63), "
            f"the part before the domain name", field=field)
    return label


def return_path_name(domain: Domain) -> str:
    return f"{domain.return_path_host}.{domain.name}"


def tracking_name(domain: Domain) -> str | None:
    return f"{domain.tracking_host}.{domain.name}" if domain.tracking_host else None


def verified_return_path_column():
    """SQL: ``<return_path_host>.<name>`` of a domain whose return-path CNAME is verified,
    else NULL (read with the delivery worker's claim)."""
    from sqlalchemy import case

    return case((Domain.return_path_verified_at.is_not(None),
                 Domain.return_path_host + "." + Domain.name), else_=None)


def envelope_host(return_path_domain: str | None) -> str:
    """The host of an outgoing message's envelope sender: ``<host>.<domain>`` once the
    domain's return-path CNAME is verified (``verified_return_path_column``), else
    RETURN_PATH_DOMAIN. The message records it (``messages.return_path``)."""
    return return_path_domain or get_settings().effective_return_path_domain


def envelope_sender(token: str, return_path_domain: str | None) -> str:
    """The envelope sender (MAIL FROM) of an outgoing message: ``<token>@<host>.<domain>``
    once the domain's return-path CNAME is verified (SPF then aligns with the From domain),
    else ``<token>@RETURN_PATH_DOMAIN``. Bounces to either are matched by the token."""
    return f"{token}@{envelope_host(return_path_domain)}"
