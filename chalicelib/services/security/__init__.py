"""Keys and secrets: the installation's RSA signing key and its rotation, the SecretBox that
encrypts secrets at rest, random tokens and how they are stored, signed ids, the SSRF guard
for outbound URLs, and per-key API throttling."""
