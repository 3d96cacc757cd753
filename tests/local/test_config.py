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


def test_a_loopback_host_is_addressed_as_localhost_for_browsers_and_passkeys():
    """Browsers refuse an IP address as the passkeys' relying-party id: the default public
    URL (what `make run`'s banner prints) and the relying party name a loopback or
    unspecified HOST localhost; an explicit loopback PUBLIC_URL gets the same relying party."""
    from chalicelib.config import load_settings

    default = load_settings({})
    assert default.effective_public_url == "http://localhost:8000"
    assert default.effective_webauthn_rp_id == "localhost"
    assert default.effective_webauthn_origins == ["http://localhost:8000"]
    for host in ("127.0.0.1", "127.0.0.2", "::1", "0.0.0.0", "::", "localhost"):
        assert load_settings({"HOST": host, "PORT": "9000"}).effective_public_url == \
            "http://localhost:9000"
    explicit = load_settings({"PUBLIC_URL": "http://127.0.0.1:9000/"})
    assert explicit.effective_public_url == "http://127.0.0.1:9000"  # as given
    assert explicit.effective_webauthn_rp_id == "localhost"
    assert explicit.effective_webauthn_origins == ["http://localhost:9000"]
    lan = load_settings({"HOST": "192.0.2.5"})
    assert lan.effective_public_url == "http://192.0.2.5:8000"
    assert load_settings({"HOST": "2001:db8::5"}).effective_public_url == "http://[2001:db8::5]:8000"
    public = load_settings({"PUBLIC_URL": "https://mail.example.com"})
    assert public.effective_webauthn_rp_id == "mail.example.com"
    assert public.effective_webauthn_origins == ["https://mail.example.com"]
    chosen = load_settings({"WEBAUTHN_RP_ID": "example.com",
                            "WEBAUTHN_ORIGINS": "https://a.example.com"})
    assert (chosen.effective_webauthn_rp_id, chosen.effective_webauthn_origins) == \
        ("example.com", ["https://a.example.com"])
