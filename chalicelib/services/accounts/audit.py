"""The authentication audit trail (AuthEvent rows; GET /api/v2/admin/auth_events).

Event names (stable; docs/accounts.md and docs/operating.md describe them):
login, login_failed, lockout, logout, registration, password_changed, email_changed,
email_change_failed, password_reset_requested,
password_reset_issued, password_reset_completed, totp_enrolled, totp_enabled, totp_disabled,
passkey_registered, passkey_renamed, passkey_removed, passkey_register_failed,
passkey_remove_failed, sso_login, sso_linked, sso_account_created, sso_failed, invitation_accepted, user_created,
user_updated, user_deleted, admin_api_key_created, admin_api_key_revoked; server_paused (by
the reputation guard, no user) and server_pause_lifted (services/reputation/guard.py);
data_removed (an address's personal data removed: api/admin/data_removal.py; its details
name the scope, who asked, the address's hash and the counts, never the address).

A failure is recorded and then raised: the service commits first (``fail``), because the
request's transaction is rolled back when the error leaves the handler.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import observability
from chalicelib.db.models import AuthEvent, User


@dataclass(frozen=True)
class Client:
    """Where a request came from (the API layer fills it from the HTTP request)."""

    ip_address: str | None = None
    user_agent: str | None = None


NO_CLIENT = Client()


def record(db: Session, event: str, client: Client = NO_CLIENT, *, user: User | None = None,
           email: str | None = None, success: bool = True, details: str | None = None) -> AuthEvent:
    row = AuthEvent(event=event, success=success, user_id=user.id if user is not None else None,
                    email_address=(email or (user.email_address if user is not None else None)),
                    ip_address=(client.ip_address or None) and client.ip_address[:64],
                    user_agent=(client.user_agent or None) and client.user_agent[:512],
                    details=details)
    db.add(row)
    db.flush()
    observability.log(f"auth.{event}", "info" if success else "warning", user_id=row.user_id,
                      email_address=row.email_address, client_ip=row.ip_address, details=details)
    return row


def fail(db: Session, error: Exception, event: str, client: Client = NO_CLIENT, **fields):
    """Record a failed event, commit it (with whatever the caller changed, such as a failed-login
    counter) and raise ``error``: the rollback of the failing request must not erase it."""
    record(db, event, client, success=False, **fields)
    db.commit()
    raise error


def events_query(limit: int, user_id: int | None = None, event: str | None = None):
    # Insertion order (id), not created_at: robust to clock corrections between writes.
    stmt = select(AuthEvent).order_by(AuthEvent.id.desc())
    if user_id is not None:
        stmt = stmt.where(AuthEvent.user_id == user_id)
    if event:
        stmt = stmt.where(AuthEvent.event == event)
    return stmt.limit(limit)


