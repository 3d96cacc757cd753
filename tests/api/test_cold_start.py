"""Importing app.py (what a Lambda cold start pays before its first request) must not load the
libraries only some requests or only the workers and the SMTP gateway need: they are imported
inside the functions that use them. A fresh interpreter, so earlier tests' imports don't count."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LAZY = ["requests", "email_validator", "urllib3", "aiosmtpd", "argon2", "pyotp", "jwt", "dkim", "dns",
        "cryptography", "chalicelib.workers.dispatch", "chalicelib.workers.delivery",
        "chalicelib.services.delivery.process", "chalicelib.services.delivery.attempt",
        "chalicelib.smtp",
        # dialect modules: the engine loads the configured one on first connection
        "sqlalchemy.dialects.postgresql", "sqlalchemy.dialects.sqlite",
        # only SSO, a webhook or inbound delivery, tracking, templates or a bounce need these
        "chalicelib.services.accounts.oidc", "chalicelib.services.webhooks.deliver",
        "chalicelib.services.inbound.endpoints", "chalicelib.services.tracking.rewrite",
        "chalicelib.services.sending.templating", "chevron", "email.parser",
        # logs, metrics and traces: built at the first line or flush (chalicelib/observability)
        "aws_lambda_powertools", "aws_xray_sdk", "chalicelib.workers.sweeper"]


def test_import_app_leaves_heavy_modules_unloaded():
    code = ("import json, sys, app; print(json.dumps(sorted(m for m in sys.modules if m in %r)))"
            % (LAZY,))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"import app loaded {loaded}: import them inside the functions that use them"


def test_import_app_registers_the_routes_and_handlers():
    # The same fresh import still builds the whole app (guards the test above against an app.py
    # that avoids the imports by not registering anything).
    code = ("import app; print(len(app.app.routes), sorted(app.app.handler_map))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    count, handlers = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(count) > 50
    for name in ("deliveries_worker", "webhooks_worker", "inbound_worker", "sweep"):
        assert name in handlers


def test_import_app_turns_garbage_collection_back_on_with_the_import_frozen():
    code = "import gc, app; print(gc.isenabled(), gc.get_freeze_count() > 10000)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "True True"
