"""Secrets for the cloud: fill the settings that hold secrets from AWS Secrets Manager once per
Lambda container (or gateway container), before the first ``get_settings()``.

Secrets never sit in the Lambda configuration; the configuration names them instead:

* ``DATABASE_SECRET_ARN``: the service's database role (JSON ``{"username", "password"}``);
  its user and password are put into ``DATABASE_URL`` (which carries host, port and
  database). ``DATABASE_PASSWORD`` (ECS injects single JSON keys of a secret) does the same
  for the password. ``DATABASE_OWNER_SECRET_ARN`` (the migrate function only: the
  RDS-managed master user, owner of the tables) fills ``DATABASE_OWNER_URL`` the same way.
* ``SIGNING_KEY_SECRET_ARN`` (or ``SIGNING_KEY_PEM`` injected by ECS): the installation RSA key
  (PEM), written 0600 under /tmp and pointed to by ``SIGNING_KEY_PATH`` — every container signs
  with the same key instead of generating its own.
* ``<SETTING>_SECRET_ARN`` for any other setting (``ENCRYPTION_KEY_SECRET_ARN``,
  ``ADMIN_API_KEY_SECRET_ARN``, ``AUTH_OIDC_CLIENT_SECRET_SECRET_ARN``): the secret string
  becomes ``<SETTING>``.

Nothing happens when none of these variables is set (local stack, tests), so importing the app
stays free of AWS calls there.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, MutableMapping

SUFFIX = "_SECRET_ARN"
# <NAME>_SECRET_ARN holding a database user and password -> the URL setting they go into.
_DATABASE_URLS = {"DATABASE": "DATABASE_URL", "DATABASE_OWNER": "DATABASE_OWNER_URL"}
_done = False


def _settings_envs() -> set[str]:
    from chalicelib.config import KEYS

    return {key.env for key in KEYS}


def _with_credentials(url: str, username: str | None, password: str | None) -> str:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if username:
        parsed = parsed.set(username=username)
    if password is not None:
        parsed = parsed.set(password=password)
    return parsed.render_as_string(hide_password=False)


def _write_key(pem: str, environ: MutableMapping[str, str]) -> None:
    directory = os.path.join(tempfile.gettempdir(), "email-service")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, "signing_key.pem")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(pem if pem.endswith("\n") else pem + "\n")
    environ["SIGNING_KEY_PATH"] = path


def needed(environ: MutableMapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return any(name.endswith(SUFFIX) for name in env) or "DATABASE_PASSWORD" in env \
        or "SIGNING_KEY_PEM" in env


def load(environ: MutableMapping[str, str] | None = None,
         fetch: Callable[[str], str] | None = None) -> list[str]:
    """Resolve the secret references in ``environ``; returns the settings it filled.
    ``fetch(arn) -> secret string`` defaults to Secrets Manager through boto3."""
    env = os.environ if environ is None else environ
    if fetch is None:
        fetch = _secrets_manager_fetch()
    filled: list[str] = []
    settings = _settings_envs()
    for name in sorted(n for n in list(env) if n.endswith(SUFFIX) and env[n]):
        target = name[: -len(SUFFIX)]
        value = fetch(env[name])
        if target in _DATABASE_URLS:
            url = _DATABASE_URLS[target]
            creds: dict[str, Any] = json.loads(value)
            env[url] = _with_credentials(env[url], creds.get("username"), creds.get("password"))
            filled.append(url)
        elif target == "SIGNING_KEY":
            _write_key(value, env)
            filled.append("SIGNING_KEY_PATH")
        elif target in settings:
            env[target] = value
            filled.append(target)
        else:
            raise ValueError(f"{name}: {target} is not a setting of chalicelib/config.py")
    if env.get("DATABASE_PASSWORD"):
        env["DATABASE_URL"] = _with_credentials(env["DATABASE_URL"], None,
                                                env.pop("DATABASE_PASSWORD"))
        filled.append("DATABASE_URL")
    if env.get("SIGNING_KEY_PEM"):
        _write_key(env.pop("SIGNING_KEY_PEM"), env)
        filled.append("SIGNING_KEY_PATH")
    return filled


def _secrets_manager_fetch() -> Callable[[str], str]:
    client = None

    def fetch(arn: str) -> str:
        nonlocal client
        if client is None:
            import boto3

            client = boto3.client("secretsmanager")
        return client.get_secret_value(SecretId=arn)["SecretString"]

    return fetch


def load_once(force: bool = False) -> None:
    """Called at the top of app.py: one Secrets Manager round per Lambda cold start. Outside
    Lambda (local stack, tests, and `chalice package`, which imports app.py with the stage's
    unresolved variables) only when ``force`` is true (the gateway's and deploy_tasks's entry
    points)."""
    global _done
    in_lambda = "AWS_LAMBDA_FUNCTION_NAME" in os.environ
    if not _done and (in_lambda or force) and needed():
        load()
        _done = True
