"""Organizations and their servers.

A new organization belongs to no tenant until it exists, and its permalink is unique among
all organizations: creating one looks across tenants (db/tenancy.py, "create-organization");
a user who creates one then acts for it, as its owner."""
from __future__ import annotations

from sqlalchemy import exists, select
from sqlalchemy.orm import Session, object_session

from chalicelib import clock, errors
from chalicelib.db import tenancy, unique
from chalicelib.db.models import IPPool, Membership, Organization, Server, Stream
from chalicelib.services.accounts import permissions
from chalicelib.services.domains import manage as domains
from chalicelib.services.security.tokens import PERMALINK, slugify

SERVER_MODES = ("Live", "Development")


def permalink_taken(permalink: str) -> errors.ValidationError:
    return errors.ValidationError(f"permalink: {permalink!r} is already taken",
                                  field="permalink")


def unique_permalink(db: Session, wanted: str | None, name: str, taken) -> str:
    if wanted is not None:
        if not PERMALINK.match(wanted):
            raise errors.ValidationError(
                "permalink: use 1-63 lower-case letters, digits and hyphens, starting with a "
                "letter or digit", field="permalink")
        if taken(wanted):
            raise permalink_taken(wanted)
        return wanted
    base = slugify(name)
    candidate, n = base, 1
    while taken(candidate):
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def save_with_permalink(db: Session, row, wanted: str | None, name: str, taken) -> None:
    """Give ``row`` its permalink (``wanted``, or the first free one made from ``name``) and
    insert it. When a concurrent request takes the same permalink first, a wanted one is a
    ValidationError (unique.guard); a made-up one is made up again, past the new row."""
    for attempt in range(3):
        row.permalink = unique_permalink(db, wanted, name, taken)
        try:
            with unique.guard(db, permalink_taken(row.permalink)):
                db.add(row)
            return
        except errors.ValidationError:
            if wanted is not None or attempt == 2:
                raise


def create_organization(db: Session, principal, *, name: str, permalink: str | None = None,
                        time_zone: str = "UTC") -> Organization:
    with tenancy.across_tenants(db, "create-organization"):
        org = Organization(name=name, time_zone=time_zone)
        save_with_permalink(
            db, org, permalink, name,
            lambda p: db.scalar(select(exists().where(Organization.permalink == p))))
        if principal.user is not None:  # a user creator becomes owner
            db.add(Membership(organization_id=org.id, user_id=principal.user.id, role="owner"))
            db.flush()
            db.refresh(principal.user, ["memberships"])
    if principal.user is not None and not permissions.is_full_access(principal):
        tenancy.act(db, tenancy.for_organization(org.id, principal.user.id))
    return org


def organizations_query(principal):
    stmt = select(Organization).order_by(Organization.id)
    if not permissions.is_full_access(principal):
        stmt = stmt.join(Membership, Membership.organization_id == Organization.id).where(
            Membership.user_id == principal.user.id)
    return stmt


def update_organization(db: Session, org: Organization, *, name: str | None = None,
                        time_zone: str | None = None) -> Organization:
    """Rename or change the time zone (the permalink, which URLs use, stays)."""
    if name is not None:
        org.name = name
    if time_zone is not None:
        org.time_zone = time_zone
    db.flush()
    return org


def delete_organization(db: Session, org: Organization) -> None:
    db.delete(org)


def create_server(db: Session, org: Organization, *, name: str, permalink: str | None = None,
                  mode: str = "Live") -> Server:
    if mode not in SERVER_MODES:
        raise errors.ValidationError(f"mode: must be one of {', '.join(SERVER_MODES)}", field="mode")
    default_pool = db.scalar(select(IPPool).where(IPPool.is_default.is_(True)))
    server = Server(organization_id=org.id, name=name, mode=mode,
                    ip_pool_id=default_pool.id if default_pool else None)
    save_with_permalink(db, server, permalink, name,
                        lambda p: db.scalar(select(exists().where(Server.organization_id == org.id,
                                                                  Server.permalink == p))))
    tenancy.add_server(db, server.id)  # its rows are the organization's to write
    # Every server has a default transactional stream (Postmark's "outbound").
    db.add(Stream(server_id=server.id, name="Default Transactional Stream", permalink="outbound",
                  stream_type="transactional", is_default=True))
    db.flush()
    return server


def update_server(server: Server, changes: dict) -> Server:
    if "mode" in changes and changes["mode"] not in SERVER_MODES:
        raise errors.ValidationError(f"mode: must be one of {', '.join(SERVER_MODES)}", field="mode")
    retention = server.message_retention_days
    for key in ("name", "mode", "track_opens", "track_clicks", "message_retention_days",
                "send_limit_action"):
        if key in changes and changes[key] is not None:
            setattr(server, key, changes[key])
    if server.message_retention_days != retention:
        domains.retention_changed(object_session(server), server)
    _content_retention(server, changes)
    for key in ("send_limit_per_hour", "send_limit_per_day"):
        if key in changes:  # an explicit null lifts the limit
            setattr(server, key, changes[key])
    return server


def _content_retention(server: Server, changes: dict) -> None:
    """Content is kept at most as long as the record: a content_retention_days above
    message_retention_days is refused; lowering message_retention_days below the content's
    (without naming content_retention_days) lowers the content's with it. No lower bound
    for retries is needed: content retention never erases a message with work pending."""
    wanted = changes.get("content_retention_days")
    if wanted is not None:
        if wanted > server.message_retention_days:
            raise errors.ValidationError(
                f"content_retention_days: at most message_retention_days "
                f"({server.message_retention_days})", field="content_retention_days")
        server.content_retention_days = wanted
    elif (server.content_retention_days or 0) > server.message_retention_days:
        server.content_retention_days = server.message_retention_days


def suspend_server(server: Server, reason: str | None) -> Server:
    server.suspended_at = server.suspended_at or clock.now()
    server.suspension_reason = reason or "suspended by an administrator"
    return server


def unsuspend_server(server: Server) -> Server:
    server.suspended_at = None
    server.suspension_reason = None
    return server


def assign_ip_pool(db: Session, server: Server, pool_id: int | None) -> Server:
    if pool_id is not None and db.get(IPPool, pool_id) is None:
        raise errors.ValidationError(f"ip_pool_id: no IP pool {pool_id}", field="ip_pool_id")
    server.ip_pool_id = pool_id
    return server
