"""Who is calling (a Principal) and which credential a route requires: shared by the
framework that runs every route and the authentication that builds the principal."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Credential a route requires.
NONE = "none"          # public
ADMIN = "admin"        # X-Admin-API-Key, or Bearer session (role-scoped)
SERVER = "server"      # X-Server-API-Key of an API credential
# The same, for a POST that changes nothing of the server (a render, a mail frame): a Bearer
# user needs only the role that reads (messages.read), as for a GET.
SERVER_READ = "server-read"
SESSION = "session"    # Bearer session only


@dataclass
class Principal:
    """Who is calling: an admin API key, a signed-in user, or a server's API credential."""

    kind: str  # "admin_key", "user", "server"
    admin_key: Any = None
    user: Any = None
    session: Any = None
    server: Any = None
    credential: Any = None

    @property
    def is_admin_key(self) -> bool:
        return self.kind == "admin_key"
