"""The way into the sending pipeline: submission (HTTP and SMTP alike), storing messages,
idempotency keys, send limits, scheduling, message streams and templates."""
