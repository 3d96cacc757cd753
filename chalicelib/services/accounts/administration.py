"""Users administration (instance admins and admin API keys): create, update, delete, issue a
password reset. An operator makes the first instance admin with the admin API key
(``POST /api/v2/admin/users`` with ``admin: true`` and a ``password``)."""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.db.models import Membership, Organization, User
from chalicelib.services.accounts import users as accounts, audit, sessions


def actor(principal) -> str:
    if principal.is_admin_key:
        return f"admin API key {principal.admin_key.id}"
    return f"user {principal.user.id}"


def users_query():
    return select(User).order_by(User.id)


def find(db: Session, user_id: int) -> User:
    user = db.get(User, user_id)
    if user is None:
        raise errors.NotFound(f"no user {user_id}")
    return user


def create(db: Session, principal, client: audit.Client, *, email: str, first_name: str,
           last_name: str, password: str | None, admin: bool) -> User:
    user = accounts.create_user(db, email=email, first_name=first_name, last_name=last_name,
                                password=password, admin=admin)
    audit.record(db, "user_created", client, user=user,
                 details=f"by {actor(principal)}" + ("; instance admin" if admin else ""))
    return user


def update(db: Session, principal, client: audit.Client, user: User, changes: dict) -> User:
    notes = []
    if changes.get("email_address") is not None and \
            accounts.change_email(db, user, changes["email_address"]) is not None:
        notes.append("email changed")
    accounts.update_profile(user, changes)
    if changes.get("admin") is not None and changes["admin"] != user.admin:
        if principal.user is not None and principal.user.id == user.id:
            raise errors.ValidationError("admin: you cannot change your own admin flag",
                                         field="admin")
        user.admin = changes["admin"]
        notes.append(f"admin={user.admin}")
    if changes.get("password") is not None:
        accounts.set_password(db, user, changes["password"])
        notes.append("password set; sessions revoked")
    if changes.get("locked") is False:
        user.locked_until = None
        user.failed_login_attempts = 0
        notes.append("unlocked")
    audit.record(db, "user_updated", client, user=user,
                 details=f"by {actor(principal)}: {', '.join(notes) or 'profile'}")
    return user


def sole_owner_of(db: Session, user: User) -> list[str]:
    """Organizations in which ``user`` is the only owner."""
    owners = (select(Membership.organization_id)
              .where(Membership.role == "owner")
              .group_by(Membership.organization_id)
              .having(func.count(Membership.id) == 1))
    return list(db.scalars(select(Organization.permalink)
                           .join(Membership, Membership.organization_id == Organization.id)
                           .where(Membership.user_id == user.id, Membership.role == "owner",
                                  Organization.id.in_(owners))))


def delete(db: Session, principal, client: audit.Client, user: User) -> None:
    if principal.user is not None and principal.user.id == user.id:
        raise errors.ValidationError("you cannot delete your own account here")
    orphaned = sole_owner_of(db, user)
    if orphaned:
        raise errors.ValidationError(
            f"the user is the last owner of {', '.join(orphaned)}; make someone else owner first")
    sessions.revoke_all(db, user.id)
    audit.record(db, "user_deleted", client, email=user.email_address,
                 details=f"user {user.id} by {actor(principal)}")
    db.delete(user)
    db.flush()
