"""Every status a message row and a delivery attempt can have, by name. Messages are the
spec's (outgoing and incoming scopes); inbound mail handed to a route's endpoint has its own
handover statuses; the console's status filters are written from these lists
(chalicelib/console_rules.py). Nothing here imports anything: the database layer reads it too.
"""

# --- outgoing messages ---------------------------------------------------------------------
PENDING = "Pending"        # due for a delivery attempt (next_attempt_at)
SCHEDULED = "Scheduled"    # due at its send_at
SENT = "Sent"
SOFT_FAIL = "SoftFail"     # an attempt failed temporarily; retried on the schedule
HARD_FAIL = "HardFail"     # refused for good, or retries exhausted
HELD = "Held"              # not sent: suppressed, development mode, or outcome unknown
BOUNCED = "Bounced"        # accepted, then a bounce report came back
CANCELLED = "Cancelled"

OUTGOING = (PENDING, SCHEDULED, SENT, SOFT_FAIL, HARD_FAIL, HELD, BOUNCED, CANCELLED)
DELIVERABLE = (PENDING, SOFT_FAIL, SCHEDULED)  # what a delivery worker may claim
RETRYABLE = (HELD, HARD_FAIL)                   # POST .../retry
CANCELLABLE = (SCHEDULED, PENDING)              # POST .../cancel

# --- incoming messages (mail received for a route) -----------------------------------------
DELIVERED = "Delivered"
FAILED = "Failed"
REJECTED = "Rejected"
INCOMING = (PENDING, HELD, DELIVERED, FAILED, REJECTED)

# Handover of inbound mail to its route's endpoint (GET /server/inbound).
QUEUED = "Queued"
RETRYING = "Retrying"
ACCEPTED = "Accepted"      # route mode accept: kept, no endpoint
INBOUND = (QUEUED, RETRYING, DELIVERED, FAILED, HELD, ACCEPTED, BOUNCED)
INBOUND_DUE = (QUEUED, RETRYING)

PROCESSED = "Processed"    # a stored bounce or complaint report

# Both scopes, once each: the status filter of GET /server/messages.
MESSAGE = tuple(dict.fromkeys(OUTGOING + INCOMING))

# --- delivery attempts (outgoing) ----------------------------------------------------------
# SENT, SOFT_FAIL and HARD_FAIL as above, and:
IN_FLIGHT = "InFlight"     # written right before DATA: the worker may die with it
UNKNOWN = "Unknown"        # a stale InFlight: the remote server may have accepted it
