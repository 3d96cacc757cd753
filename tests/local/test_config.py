"""Settings: spec defaults, environment overrides named after the dotted keys, lazy reads."""
from __future__ import annotations

import pytest

from chalicelib.config import KEYS, ConfigError, get_settings, load_settings


def test_spec_defaults():
    s = load_settings({})
    assert (s.auth_session_timeout_days, s.auth_max_login_attempts, s.auth_lockout_minutes,
            s.auth_minimum_password_length) == (14, 5, 15, 8)
    assert s.auth_allow_registration is False and s.auth_allow_organization_creation is True
    assert s.password_reset_expiry_hours == 2 and s.invitation_expiry_days == 7
    assert s.smtp_server_max_message_size == 14 * 1024 * 1024
    assert (s.port, s.smtp_port, s.time_scale) == (8000, 2525, 1.0)
    assert s.webhooks_allow_private_targets is False
    assert s.database_url.startswith("sqlite:///var/")


def test_every_spec_key_has_an_env_var_named_after_it():
    spec_keys = {k.spec_key: k.env for k in KEYS if k.spec_key}
    assert spec_keys["auth.max_login_attempts"] == "AUTH_MAX_LOGIN_ATTEMPTS"
    assert spec_keys["smtp_server.max_message_size"] == "SMTP_SERVER_MAX_MESSAGE_SIZE"
    for dotted in ("auth.session_timeout_days", "auth.lockout_minutes", "auth.minimum_password_length",
                   "auth.allow_registration", "auth.allow_organization_creation", "auth.frontend_url",
                   "password_reset_expiry_hours", "invitation_expiry_days"):
        assert spec_keys[dotted] == dotted.replace(".", "_").upper()


def test_environment_overrides_and_parsing():
    s = load_settings({"AUTH_MAX_LOGIN_ATTEMPTS": "3", "AUTH_ALLOW_REGISTRATION": "yes",
                       "SMTP_SERVER_MAX_MESSAGE_SIZE": "10MB", "TIME_SCALE": "0.001",
                       "WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true", "PORT": "9000"})
    assert s.auth_max_login_attempts == 3 and s.auth_allow_registration is True
    assert s.smtp_server_max_message_size == 10 * 1024 * 1024
    assert s.time_scale == 0.001 and s.webhooks_allow_private_targets is True and s.port == 9000
    assert s.scaled(3600) == pytest.approx(3.6)


@pytest.mark.parametrize("env", [{"AUTH_MAX_LOGIN_ATTEMPTS": "many"},
                                 {"AUTH_ALLOW_REGISTRATION": "perhaps"},
                                 {"SMTP_SERVER_MAX_MESSAGE_SIZE": "big"}])
def test_bad_values_name_the_variable(env):
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    assert next(iter(env)) in str(info.value)


def test_settings_are_read_lazily(monkeypatch):
    monkeypatch.setenv("AUTH_LOCKOUT_MINUTES", "42")
    assert get_settings().auth_lockout_minutes == 42
    monkeypatch.setenv("AUTH_LOCKOUT_MINUTES", "7")
    assert get_settings().auth_lockout_minutes == 7


def test_readme_documents_every_configuration_key():
    import os

    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                               "configuration.md")).read()
    missing = [key.env for key in KEYS if f"`{key.env}`" not in readme]
    assert not missing, f"docs/configuration.md lacks {missing}: paste `python -m chalicelib.config`"
