"""Every status a message row and a delivery attempt can have, by name. Messages are the
spec's (outgoing and incoming scopes); inbound mail handed to a route's endpoint has its own
handover statuses; the console's status filters are written from these lists
(chalicelib/console/rules.py). Nothing here imports anything: the database layer reads it too.
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
# Handover of inbound mail to its route's endpoint (GET /server/inbound).
QUEUED = "Queued"
RETRYING = "Retrying"
DELIVERED = "Delivered"
FAILED = "Failed"
ACCEPTED = "Accepted"      # route mode accept: kept, no endpoint
INBOUND = (QUEUED, RETRYING, DELIVERED, FAILED, HELD, ACCEPTED, BOUNCED)
INBOUND_DUE = (QUEUED, RETRYING)

PROCESSED = "Processed"    # a stored bounce or complaint report

# Every status an incoming message row takes: the handover's, and a stored report's. (It
# used to list Pending and Rejected, which no incoming row ever has, and lacked Queued,
# Retrying, Accepted and Processed, which the status filter then refused.)
INCOMING = INBOUND + (PROCESSED,)

# Both scopes, once each: the status filter of GET /server/messages.
MESSAGE = tuple(dict.fromkeys(OUTGOING + INCOMING))

# What each status means, by scope: docs/api.md's tables, and what the console's status
# filter explains them with. Held and Bounced are statuses of both scopes.
OUTGOING_MEANINGS = {
    PENDING: "accepted, due for delivery now",
    SCHEDULED: "accepted with a later send_at; due then",
    SENT: "the recipient's server accepted it",
    SOFT_FAIL: "a temporary failure; another attempt is scheduled",
    HARD_FAIL: "rejected (5xx) or out of retries",
    HELD: "not sent: a suppressed recipient, development mode, a send limit or an unknown outcome",
    BOUNCED: "sent, then a bounce report came back for it",
    CANCELLED: "cancelled before any attempt; never sent",
}
INCOMING_MEANINGS = {
    QUEUED: "received, waiting to be handed to its route's endpoint",
    RETRYING: "the endpoint failed; handing it over again later",
    DELIVERED: "handed to its route's endpoint",
    FAILED: "the endpoint did not take it, out of retries",
    HELD: "kept by its route (mode hold) until released",
    ACCEPTED: "kept by its route (mode accept); no endpoint",
    BOUNCED: "refused by its route (mode bounce): the sender got a 550",
    PROCESSED: "a bounce or complaint report about mail this server sent",
}

# --- delivery attempts (outgoing) ----------------------------------------------------------
# SENT, SOFT_FAIL and HARD_FAIL as above, and:
IN_FLIGHT = "InFlight"     # written right before DATA: the worker may die with it
UNKNOWN = "Unknown"        # a stale InFlight: the remote server may have accepted it
