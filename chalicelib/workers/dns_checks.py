"""The scheduled DNS re-checks (hourly on AWS: ``check_domains`` in app.py; the local stack
runs it on the retention timer): verified domains' records, then the sending addresses'
reverse DNS, each whose last check is older than DOMAIN_CHECK_INTERVAL_HOURS."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def run() -> dict:
    # dnspython and the check modules are imported here, not at cold start.
    from chalicelib.services.delivery import address_health
    from chalicelib.services.domains import checks as domain_checks

    results = {}
    for name, check in (("domains", domain_checks.run_scheduled),
                        ("ip_addresses", address_health.run_scheduled)):
        try:
            results[name] = check()
        except Exception:  # noqa: BLE001  (one failing must not stop the other)
            log.exception("scheduled DNS check of %s failed", name)
    return results
