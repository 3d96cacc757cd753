"""What the gateway's outbound relay (``smtp/relay.py``) tells the worker that handed it a
message: how the onward delivery went, in the first line of its reply to DATA.

The relay answers DATA only once the recipient's MX has answered it (it keeps no queue), with
the MX's reply code and a first line such as::

    [relay host=mx.example.net source=203.0.113.5 tls=verified mta-sts=enforce stage=done refused=-]

The worker (``client.send`` with ``relayed``) then records the attempt as the MX's: its host,
the pool address the relay bound, TLS and MTA-STS of the hop that matters, and whether the
recipient (not the sender) was refused. Another relay's reply (a plain smarthost) has no such
line and is recorded as it is.
"""
from __future__ import annotations

import re

from chalicelib import statuses

_REPORT = re.compile(r"^\[relay ((?:[a-z-]+=\S+ ?)+)\] ?(.*)$", re.DOTALL)
_TLS = {"none": (False, False), "unverified": (True, False), "verified": (True, True)}
_REFUSED = {"sender": "the sender", "recipient": "the recipient", "message": "the message"}


def line(outcome) -> str:
    """The report line of an ``client.Outcome`` (the relay's side)."""
    tls = "verified" if outcome.tls_verified else "unverified" if outcome.tls else "none"
    refused = "-"
    if outcome.status == statuses.HARD_FAIL:
        refused = "sender" if not outcome.recipient_rejected else \
            "message" if outcome.stage in ("data", "done") else "recipient"
    fields = {"host": outcome.host, "source": outcome.source_address, "tls": tls,
              "mta-sts": outcome.mta_sts, "stage": outcome.stage, "refused": refused}
    return "[relay " + " ".join(f"{k}={v or '-'}" for k, v in fields.items()) + "]"


def apply(outcome) -> None:
    """Take the relay's report from ``outcome.output`` (the worker's side), if there is one."""
    match = _REPORT.match(outcome.output or "")
    if match is None:
        return
    fields = {k: (None if v == "-" else v)
              for k, v in (part.split("=", 1) for part in match.group(1).split())}
    via = f"through the IP pool's relay {outcome.host}"
    host = (fields.get("host") or outcome.host or "")[:255]
    outcome.host = host
    outcome.tls, outcome.tls_verified = _TLS.get(fields.get("tls") or "none", (False, False))
    outcome.mta_sts = fields.get("mta-sts")
    outcome.source_address = fields.get("source")
    outcome.stage = fields.get("stage") or outcome.stage
    refused = fields.get("refused")
    outcome.recipient_rejected = outcome.status == statuses.HARD_FAIL and \
        refused in ("recipient", "message")
    outcome.output = match.group(2).strip() or None
    if outcome.status == statuses.SENT:
        outcome.details = f"accepted by {host} ({via}): {outcome.code}"
    elif outcome.status == statuses.HARD_FAIL:
        outcome.details = f"{host} refused {_REFUSED.get(refused, 'the message')} " \
                          f"permanently ({via}): {outcome.code} {outcome.output}"
    else:
        outcome.details = f"not delivered to {host} ({via}): {outcome.code} {outcome.output}"
