"""Outgoing and incoming message rows after submission: their statuses, their event history,
what a tenant may do to them (retry, release, cancel, bulk jobs), finding them, the captured-mail inbox, and retention."""
