"""The Chalice app: registers the HTTP surfaces, the queue consumers and the sweeper schedule.
Nothing else lives here; the service is in chalicelib/."""
import gc

# The import builds hundreds of thousands of objects that live as long as the process (models,
# schemas, routes); garbage collections during it only re-scan them (~35 ms of a cold start).
# Collect nothing until it is done, then freeze them out of later collections.
gc.disable()

import logging  # noqa: E402
import os  # noqa: E402

from chalice import Chalice, Rate  # noqa: E402

from chalicelib import aws_bootstrap  # noqa: E402
from chalicelib.api import register  # noqa: E402

# In AWS: settings that hold secrets come from Secrets Manager (no-op locally).
aws_bootstrap.load_once()

app = Chalice(app_name="email-service")
app.log.setLevel(logging.INFO)
register(app)

# Queue names are fixed at deploy time (Chalice writes them into the template).
_PREFIX = os.environ.get("SQS_QUEUE_PREFIX", "email-service-")


# The worker and sweeper modules are imported inside the handlers (cold start): an HTTP
# function's cold start does not pay for them, and dispatch loads only the worker it needs.
def _dispatch(event):
    from chalicelib.workers import dispatch

    return dispatch.handle_sqs_event(event, _PREFIX)


# Up to 100 wake-ups an invocation, gathered for up to 1 s: its SMTP conversations run side
# by side (DELIVERY_CONCURRENCY), so a batch costs about one message's wall time, not ten
# (docs/capacity.md, "The deliveries mapping").
@app.on_sqs_message(queue=_PREFIX + "deliveries", batch_size=100,
                    maximum_batching_window_in_seconds=1)
def deliveries_worker(event):
    try:
        return _dispatch(event)
    finally:
        # A frozen function keeps no time: its idle SMTP sessions are closed and their
        # destinations' connection slots given back before the invocation ends.
        from chalicelib.services.delivery import pacing

        try:
            pacing.release_idle(everything=True)
        except Exception:  # noqa: BLE001  (the database away: the slots' leases lapse)
            app.log.exception("giving back idle delivery sessions' slots failed")


@app.on_sqs_message(queue=_PREFIX + "webhooks", batch_size=10)
def webhooks_worker(event):
    return _dispatch(event)


@app.on_sqs_message(queue=_PREFIX + "inbound", batch_size=10)
def inbound_worker(event):
    return _dispatch(event)


@app.on_sqs_message(queue=_PREFIX + "bulk", batch_size=1)
def bulk_worker(event):
    return _dispatch(event)


@app.schedule(Rate(1, unit=Rate.MINUTES))
def sweep(event):
    from chalicelib.workers import sweeper

    return sweeper.sweep()


@app.schedule(Rate(1, unit=Rate.HOURS))
def prune(event):
    from chalicelib.workers import retention

    return retention.run()


@app.schedule(Rate(1, unit=Rate.HOURS))
def check_domains(event):
    # Re-checks verified domains' DNS and the sending addresses' reverse DNS when older than
    # DOMAIN_CHECK_INTERVAL_HOURS (a day by default), in batches: each run continues where
    # the last one stopped.
    from chalicelib.workers import dns_checks

    return dns_checks.run()


@app.lambda_function(name="migrate")
def migrate(event, context):
    # Invoked by infra/deploy.sh with the new code before `chalice deploy` switches traffic.
    from chalicelib import deploy_tasks

    if isinstance(event, dict) and event.get("signing_key") in deploy_tasks.SIGNING_KEY_ACTIONS:
        return deploy_tasks.signing_key(event["signing_key"])  # rotating the installation key
    if isinstance(event, dict) and event.get("content_backfill"):  # bounded: resumable
        return deploy_tasks.content_backfill(max_batches=int(event.get("max_batches", 50)))
    return deploy_tasks.migrate()


gc.freeze()
gc.enable()
