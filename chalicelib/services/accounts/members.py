"""Organizations' people: memberships and invitations.

Rules: only an owner (or full access) makes, unmakes, invites or removes an owner; the last
owner can be neither removed nor demoted (counted under row locks on PostgreSQL; SQLite
serializes writers). Anyone may leave an organization, subject to the last-owner rule.

An invitation's token names its organization before the invitee belongs to it, and adding a
member finds an account outside the organization: both look across tenants
(db/tenancy.py, "invitation"), here only.
"""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db import tenancy, unique
from chalicelib.db.models import Invitation, Membership, Organization, User
from chalicelib.services.accounts import users, audit, permissions
from chalicelib.services.security.tokens import generate_secret, hash_secret

LAST_OWNER = ("the last owner of an organization cannot be removed or demoted; make another "
              "member owner first")


def check_role(role: str) -> str:
    if role not in permissions.ROLES:
        raise errors.ValidationError(f"role: must be one of {', '.join(permissions.ROLES)}",
                                     field="role")
    return role


def members_query(org: Organization):
    return (select(Membership).where(Membership.organization_id == org.id)
            .order_by(Membership.id))


def membership_of(db: Session, org_id: int, user_id: int) -> Membership | None:
    return db.scalar(select(Membership).where(Membership.organization_id == org_id,
                                              Membership.user_id == user_id))


def find_member(db: Session, org: Organization, user_id: int) -> Membership:
    found = membership_of(db, org.id, user_id)
    if found is None:
        raise errors.NotFound(f"user {user_id} is not a member of {org.permalink!r}")
    return found


def _owner_count(db: Session, org_id: int) -> int:
    ids = db.scalars(select(Membership.id).where(Membership.organization_id == org_id,
                                                 Membership.role == "owner")
                     .with_for_update()).all()
    return len(ids)


def _guard_owner_change(db: Session, principal, membership: Membership, new_role: str | None):
    """new_role None means removal."""
    if membership.role == "owner" or new_role == "owner":
        permissions.authorize(principal, "owners.manage", membership.organization_id)
    if membership.role == "owner" and new_role != "owner" \
            and _owner_count(db, membership.organization_id) <= 1:
        raise errors.ValidationError(LAST_OWNER, field="role" if new_role else "user_id")


def add_member(db: Session, principal, org: Organization, *, user_id: int | None,
               email: str | None, role: str) -> Membership:
    check_role(role)
    if role == "owner":
        permissions.authorize(principal, "owners.manage", org.id)
    if user_id is None and not email:
        raise errors.ParameterMissing("user_id or email_address is required", field="user_id")
    with tenancy.across_tenants(db, "invitation"):  # an account outside the organization
        user = db.get(User, user_id) if user_id is not None else \
            users.find_by_email(db, users.normalize_email(email))
    if user is None:
        raise errors.ValidationError("user_id: no such account; invite the address instead",
                                     field="user_id")
    taken = errors.ValidationError(f"user_id: user {user.id} is already a member",
                                   field="user_id")
    if membership_of(db, org.id, user.id) is not None:
        raise taken
    membership = Membership(organization_id=org.id, user_id=user.id, role=role)
    with unique.guard(db, taken):  # added twice at once, or while accepting an invitation
        db.add(membership)
    return membership


def change_role(db: Session, principal, org: Organization, user_id: int, role: str) -> Membership:
    check_role(role)
    membership = find_member(db, org, user_id)
    _guard_owner_change(db, principal, membership, role)
    membership.role = role
    return membership


def remove_member(db: Session, principal, org: Organization, user_id: int) -> Membership:
    membership = find_member(db, org, user_id)
    _guard_owner_change(db, principal, membership, None)
    db.delete(membership)
    db.flush()
    return membership


# --- invitations -------------------------------------------------------------------------


def invitation_status(inv: Invitation) -> str:
    if inv.accepted_at is not None:
        return "accepted"
    if inv.revoked_at is not None:
        return "revoked"
    if inv.expires_at <= clock.now():
        return "expired"
    return "pending"


def invitations_query(org: Organization):
    return (select(Invitation).where(Invitation.organization_id == org.id)
            .order_by(Invitation.id.desc()))


def invite(db: Session, principal, org: Organization, *, email: str, role: str) -> tuple[Invitation, str]:
    check_role(role)
    if role == "owner":
        permissions.authorize(principal, "owners.manage", org.id)
    email = users.normalize_email(email)
    existing = users.find_by_email(db, email)
    if existing is not None and membership_of(db, org.id, existing.id) is not None:
        raise errors.ValidationError(f"email_address: {email} is already a member",
                                     field="email_address")
    now = clock.now()
    # A new invitation replaces a pending one for the same address: one live token per person.
    db.execute(update(Invitation).where(Invitation.organization_id == org.id,
                                        Invitation.email_address == email,
                                        Invitation.accepted_at.is_(None),
                                        Invitation.revoked_at.is_(None))
               .values(revoked_at=now).execution_options(synchronize_session=False))
    token = generate_secret("", 32)
    inv = Invitation(organization_id=org.id, email_address=email, role=role,
                     token_hash=hash_secret(token),
                     invited_by_user_id=principal.user.id if principal.user else None,
                     expires_at=now + timedelta(days=get_settings().invitation_expiry_days))
    db.add(inv)
    db.flush()
    return inv, token


def find_invitation(db: Session, org: Organization, invitation_id: int) -> Invitation:
    inv = db.get(Invitation, invitation_id)
    if inv is None or inv.organization_id != org.id:
        raise errors.NotFound(f"no invitation {invitation_id} in {org.permalink!r}")
    return inv


def revoke_invitation(db: Session, principal, inv: Invitation) -> Invitation:
    if inv.role == "owner":
        permissions.authorize(principal, "owners.manage", inv.organization_id)
    if invitation_status(inv) != "pending":
        raise errors.ValidationError(f"the invitation is already {invitation_status(inv)}")
    inv.revoked_at = clock.now()
    return inv


def _bad_token() -> errors.ValidationError:
    return errors.ValidationError("token: the invitation is invalid, expired, revoked or "
                                  "already accepted", field="token")


def pending_invitation(db: Session, token: str) -> Invitation:
    """(Call it acting across tenants: the token names the organization.)"""
    inv = db.scalar(select(Invitation).where(Invitation.token_hash == hash_secret(token or "")))
    if inv is None or invitation_status(inv) != "pending":
        raise _bad_token()
    return inv


def preview(db: Session, token: str) -> dict:
    """What the public invitation page shows before the invitee decides."""
    with tenancy.across_tenants(db, "invitation"):
        inv = pending_invitation(db, token)
        org = inv.organization
        return {"email_address": inv.email_address, "role": inv.role,
                "organization": {"name": org.name, "permalink": org.permalink},
                "expires_at": inv.expires_at,
                "account_exists": users.find_by_email(db, inv.email_address) is not None}


def accept(db: Session, *, token: str, user: User | None, password: str | None,
           first_name: str | None, last_name: str | None, client: audit.Client) -> dict:
    """Join the organization as the signed-in ``user``, or create the account (when new).

    Returns the membership, and a session when an account was created; the request then acts
    for the invitee."""
    with tenancy.across_tenants(db, "invitation"):
        result = _accept(db, token, user, password, first_name, last_name, client)
    tenancy.act(db, tenancy.for_user(result["user"].id))
    return result


def _accept(db: Session, token: str, user: User | None, password: str | None,
            first_name: str | None, last_name: str | None, client: audit.Client) -> dict:
    inv = pending_invitation(db, token)
    created = None
    if user is not None:
        if user.email_address != inv.email_address:
            raise errors.Forbidden(f"this invitation is for {inv.email_address}; sign in as "
                                   "that account to accept it")
    else:
        user = users.find_by_email(db, inv.email_address)
        if user is not None:
            raise errors.Unauthorized(f"an account for {inv.email_address} exists: sign in and "
                                      "accept with Authorization: Bearer <session token>")
        if not password:
            raise errors.ParameterMissing("password is required to create the account",
                                          field="password")
        user = created = users.create_user(db, email=inv.email_address,
                                              first_name=first_name or "",
                                              last_name=last_name or "", password=password)
    # Single use under concurrency: only one UPDATE flips accepted_at.
    claimed = db.execute(update(Invitation)
                         .where(Invitation.id == inv.id, Invitation.accepted_at.is_(None),
                                Invitation.revoked_at.is_(None))
                         .values(accepted_at=clock.now())
                         .execution_options(synchronize_session=False))
    if claimed.rowcount != 1:
        raise _bad_token()
    membership = membership_of(db, inv.organization_id, user.id)
    if membership is None:
        membership = Membership(organization_id=inv.organization_id, user_id=user.id, role=inv.role)
        with unique.guard(db, errors.ValidationError(
                f"token: {user.email_address} became a member of the organization meanwhile",
                field="token")):
            db.add(membership)
    audit.record(db, "invitation_accepted", client, user=user,
                 details=f"organization {inv.organization.permalink} as {inv.role}"
                         + ("; account created" if created else ""))
    result: dict = {"membership": membership, "user": user, "session": None}
    if created is not None:
        result["session"] = users.start_session(db, created, client)
    return result
