"""Queue and schedule handlers: parse a wake-up, claim the row, call a service, record the
outcome. ``dispatch`` is used by both the Lambda SQS handlers and the local queue."""
