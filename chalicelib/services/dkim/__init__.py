"""DKIM: per-domain keys (generation, public records, decrypted-key cache), fast signing and
verification, and key rotation."""
