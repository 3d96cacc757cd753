"""Webhooks of a server: management, the signed payload, the fan-out of message events into
queued requests, and delivering them (one at a time or in batches)."""
