"""Who may do what: the permission matrix, enforced here and nowhere else.

Admin API keys have full access. Instance admins (users with ``admin``) have full access.
Other users act inside their organizations according to their role. docs/accounts.md's permission
matrix is generated from ``ACTIONS`` (keep them in step).
"""
from __future__ import annotations

from chalicelib import errors

ROLES = ("viewer", "member", "admin", "owner")
RANK = {role: rank for rank, role in enumerate(ROLES)}

# action -> least role that may perform it inside an organization; None: instance admins only.
ACTIONS: dict[str, str | None] = {
    "organization.read": "viewer",
    "organization.update": "admin",
    "organization.delete": "owner",
    "members.read": "viewer",
    "members.manage": "admin",
    "owners.manage": "owner",  # making, unmaking, inviting or removing an owner
    "invitations.read": "admin",
    "invitations.manage": "admin",
    "servers.read": "viewer",
    "servers.manage": "admin",
    "domains.read": "viewer",
    "domains.manage": "member",
    "credentials.read": "member",
    "credentials.manage": "admin",
    "routes.read": "viewer",
    "routes.manage": "member",
    "webhooks.read": "member",
    "webhooks.manage": "member",
    "messages.read": "viewer",      # the messaging surface with a session (X-Server)
    "messages.manage": "member",
    "suppressions.read": "viewer",
    "suppressions.manage": "member",
    "ip_pools.read": None,
    "ip_pools.manage": None,
    "admin_keys.manage": None,
    "users.manage": None,
    "auth_events.read": None,
    # Lifting the reputation guard's pause of a server (POST .../unsuspend on a server the
    # guard paused), and reading every infrastructure signal of the installation.
    "reputation.lift": None,
    "infrastructure_signals.read": None,
    # Removing an address's personal data (a data subject's request; services/privacy/):
    # on the organization's servers, or on every server of the installation.
    "data.remove": "admin",
    "data.remove_installation": None,
}


def role_in(principal, organization_id: int) -> str | None:
    user = principal.user
    for membership in user.memberships:
        if membership.organization_id == organization_id:
            return membership.role
    return None


def is_full_access(principal) -> bool:
    return principal.is_admin_key or bool(principal.user is not None and principal.user.admin)


def can(principal, action: str, organization_id: int | None = None) -> bool:
    if action not in ACTIONS:
        raise KeyError(action)
    if is_full_access(principal):
        return True
    least = ACTIONS[action]
    if least is None or organization_id is None:
        return False
    role = role_in(principal, organization_id)
    return role is not None and RANK[role] >= RANK[least]


def authorize(principal, action: str, organization_id: int | None = None) -> None:
    if not can(principal, action, organization_id):
        raise errors.Forbidden(f"you do not have permission for {action}")


def is_member(principal, organization_id: int) -> bool:
    return is_full_access(principal) or role_in(principal, organization_id) is not None
