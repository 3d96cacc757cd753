"""Finding management resources the caller may see, with the permission check in the same step.

Organizations a user does not belong to answer 404 (their existence is not disclosed); inside
an organization the user belongs to, an action above their role answers 403. Once found, a
member's request acts for that organization (db/tenancy.py): its servers and their rows, its
members; an admin API key or an instance admin already acts for every tenant.
"""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.db import tenancy
from chalicelib.db.models import Organization, Server
from chalicelib.services.accounts import permissions


def organization(db: Session, principal, permalink: str, action: str) -> Organization:
    org = db.scalar(select(Organization).where(Organization.permalink == permalink))
    if org is None or not permissions.is_member(principal, org.id):
        raise errors.NotFound(f"no organization {permalink!r}")
    permissions.authorize(principal, action, org.id)
    if not permissions.is_full_access(principal):
        tenancy.enter_organization(db, org.id, principal.user.id)
    return org


def server(db: Session, principal, org_permalink: str, server_permalink: str,
           action: str) -> Server:
    org = organization(db, principal, org_permalink, "organization.read")
    srv = db.scalar(select(Server).where(Server.organization_id == org.id,
                                         Server.permalink == server_permalink))
    if srv is None:
        raise errors.NotFound(f"no server {server_permalink!r} in organization {org_permalink!r}")
    permissions.authorize(principal, action, org.id)
    return srv
