"""The local stack: HTTP API, SMTP gateway and queue workers in one process (``make run``)."""
