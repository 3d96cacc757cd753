"""People and their access: users (registration, login, profile, password reset), sessions,
password hashing, TOTP, passkeys (WebAuthn), single sign-on (OIDC), organization members and invitations, the
permission matrix, admin API keys, instance administration and the authentication audit trail."""
