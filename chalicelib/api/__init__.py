"""Registers every blueprint of the three surfaces on the Chalice app."""
from __future__ import annotations

from chalice import Chalice

from chalicelib import __version__, observability
from chalicelib.api.framework import envelope_middleware

ADMIN_PREFIX = "/api/v2/admin"
SERVER_PREFIX = "/api/v2/server"
AUTH_PREFIX = "/api/v2/auth"


def blueprints():
    """(module path, url prefix) of every blueprint; issues add theirs here."""
    return [
        ("chalicelib.api.admin.organizations", ADMIN_PREFIX),
        ("chalicelib.api.admin.domains", ADMIN_PREFIX),
        ("chalicelib.api.admin.instance", ADMIN_PREFIX),
        ("chalicelib.api.admin.webhooks", ADMIN_PREFIX),
        ("chalicelib.api.server.core", SERVER_PREFIX),
        ("chalicelib.api.admin.routes", ADMIN_PREFIX),
        ("chalicelib.api.server.inbound", SERVER_PREFIX),
        ("chalicelib.api.server.bounces", SERVER_PREFIX),
        ("chalicelib.api.admin.members", ADMIN_PREFIX),
        ("chalicelib.api.admin.users", ADMIN_PREFIX),
        ("chalicelib.api.admin.auth_events", ADMIN_PREFIX),
        ("chalicelib.api.accounts.session", AUTH_PREFIX),
        ("chalicelib.api.accounts.invitations", AUTH_PREFIX),
        ("chalicelib.api.accounts.sso", AUTH_PREFIX),
        ("chalicelib.api.accounts.options", AUTH_PREFIX),
        ("chalicelib.api.accounts.passkeys", AUTH_PREFIX),
        ("chalicelib.api.server.bulk", SERVER_PREFIX),
        ("chalicelib.api.server.messages", SERVER_PREFIX),
        ("chalicelib.api.server.captured", SERVER_PREFIX),
        ("chalicelib.api.admin.suppressions", ADMIN_PREFIX),
        ("chalicelib.api.server.streams", SERVER_PREFIX),
        ("chalicelib.api.server.templates", SERVER_PREFIX),
        ("chalicelib.api.server.mail_frames", SERVER_PREFIX),
        ("chalicelib.api.server.template_sends", SERVER_PREFIX),
        ("chalicelib.api.server.stats", SERVER_PREFIX),
        ("chalicelib.api.server.engagement", SERVER_PREFIX),
        ("chalicelib.api.admin.domain_tracking", ADMIN_PREFIX),
        ("chalicelib.api.admin.domain_dns", ADMIN_PREFIX),
        ("chalicelib.api.admin.domain_dmarc", ADMIN_PREFIX),
        ("chalicelib.api.admin.reputation", ADMIN_PREFIX),
        ("chalicelib.api.admin.data_removal", ADMIN_PREFIX),
        ("chalicelib.api.public.tracking", ""),
        ("chalicelib.api.public.unsubscribe", ""),
        ("chalicelib.api.public.mail_frames", ""),
        ("chalicelib.api.openapi", ""),
        ("chalicelib.api.public.metrics", ""),
        ("chalicelib.api.console", None),  # None: "/" stays "/" (a prefix would make it "")
    ]


def register(app: Chalice) -> None:
    import importlib

    @app.route("/health", methods=["GET"])
    def health():
        # Never touches storage: a load balancer's probe must not load the database.
        return {"status": "ok", "version": __version__}

    for module_path, prefix in blueprints():
        module = importlib.import_module(module_path)
        app.register_blueprint(module.bp, url_prefix=prefix)
    app.register_middleware(envelope_middleware, "http")
    app.register_middleware(observability.middleware, "all")
