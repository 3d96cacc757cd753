"""Reputation: what receivers think of our mail, told to the people who can act on it.

* ``signals.py``: **infrastructure signals**. A refusal whose reason (``services/failures/``)
  blames the sending IP address (block list, IP reputation, reverse DNS) or the sending
  domain (domain reputation, authentication, the return path refused), from an SMTP reply
  during delivery or from a bounce, is recorded with the address and IP pool the mail left
  from, the sending domain, the receiver that said it and its words; each address's, pool's
  and domain's health counts them over INFRASTRUCTURE_SIGNAL_WINDOW_HOURS, and each is
  logged (``infrastructure.signal``) and counted (``InfrastructureSignals``), so an operator
  learns of a listing before tenants do.
* ``guard.py``: the **reputation guard** of every server: its bounce rate (bounces that say
  the address is bad) and complaint rate over a sliding window of the mail it sent, read
  from rolled-up counters; warnings and a pause (the server's sending suspended, with its
  reason, until an instance admin lifts it) at the REPUTATION_* thresholds, never below
  REPUTATION_MIN_VOLUME messages.
* ``outcomes.py``: the two places the rest of the service tells this package what happened,
  one for delivery (every attempt's outcome, from ``delivery/recorder.outcome``) and one for
  what comes back (every stored bounce and feedback report, from ``inbound/return_path.store``).
"""
