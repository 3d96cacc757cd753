"""One child process of `make run` (``python -m chalicelib.local.child http|smtp|worker``),
started by local/supervisor.py with the supervisor's environment plus the broker's address:
an HTTP API server or an SMTP gateway on the stack's shared port (SO_REUSEPORT), or a queue
worker taking wake-ups from the broker. It never prepares the database (the supervisor did)
and stops on SIGTERM or SIGINT (Ctrl-C reaches the whole process group), or when the
supervisor is gone."""
from __future__ import annotations

import ctypes
import logging
import signal
import sys
import threading

from chalicelib.config import get_settings
from chalicelib.local.signals import StopRequest

log = logging.getLogger(__name__)

KINDS = ("http", "smtp", "worker")


def _die_with_parent() -> None:
    """Linux: the kernel sends SIGTERM to this process when the supervisor dies, even by
    SIGKILL, so no child outlives it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the broker's closed socket stops workers
        pass


def _serve_http(stopped: StopRequest) -> None:
    sys.path.insert(0, ".")
    from app import app  # noqa: E402  (the Chalice app at the repository root)
    from chalicelib.local.http_server import HttpServer

    settings = get_settings()
    server = HttpServer(app, settings.host, settings.port, reuse_port=True)
    server.start()
    stopped.wait()
    server.stop()


def _serve_smtp(stopped: StopRequest) -> None:
    from chalicelib.smtp.gateway import Gateway

    settings = get_settings()
    gateway = Gateway(settings.host, settings.smtp_port, reuse_port=True)
    gateway.start()
    stopped.wait()
    gateway.stop()


def _work(port, stopped: StopRequest) -> None:
    """WORKER_THREADS threads, each taking a batch of due wake-ups of one queue at a time
    from the broker (up to 10; deliveries up to DELIVERY_BATCH_SIZE, their conversations on
    the process's delivery pool) and handing it to the dispatcher the Lambda handlers use."""
    from chalicelib import observability, queues
    from chalicelib.workers import dispatch
    from chalicelib.workers.registry import load_workers

    load_workers()

    def loop() -> None:
        while not stopped.is_set():
            try:
                taken = port.take(queues.LocalPort.BATCH_SIZE, 1.0,
                                  queues.LocalPort.batch_limits())
            except (EOFError, OSError):  # the broker (the supervisor) is gone
                log.warning("queue broker gone; worker stops")
                stopped.set()
                return
            if taken is not None:
                dispatch.dispatch_batch(*taken)  # never raises
                observability.push_counts()  # this batch's counts into the shared tally

    threads = [threading.Thread(target=loop, name=f"queue-worker-{n}")
               for n in range(get_settings().worker_threads)]
    for thread in threads:
        thread.start()
    stopped.wait()
    for thread in threads:  # each ends within a take's timeout
        thread.join()
    from chalicelib.services.delivery import pacing

    try:  # idle SMTP sessions closed, their destinations' connection slots given back
        pacing.release_idle(everything=True)
    except Exception:  # noqa: BLE001  (the database gone: the slots' leases lapse)
        log.exception("giving back idle delivery sessions' slots failed")


def _push_counts(stopped: StopRequest) -> None:
    """The HTTP and SMTP processes' counts into the shared tally, off their request paths."""
    from chalicelib import observability

    while not stopped.wait(0.5):
        observability.push_counts()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in KINDS:
        print(f"usage: python -m chalicelib.local.child {'|'.join(KINDS)}", file=sys.stderr)
        return 2
    _die_with_parent()
    settings = get_settings()
    logging.basicConfig(level=settings.log_level.upper(),
                        format=f"%(asctime)s %(levelname)s {argv[0]}[%(process)d] %(name)s: "
                               "%(message)s")
    for noisy in ("alembic", "mail.log"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from chalicelib import observability, queues
    from chalicelib.local.broker import BrokerPort

    port = BrokerPort()
    queues.set_port(port)
    observability.share_counters(port.add_counts)
    stopped = StopRequest()
    if argv[0] != "worker":
        threading.Thread(target=_push_counts, args=(stopped,), name="metrics-push",
                         daemon=True).start()
    stopped.install()
    if argv[0] == "worker":
        _work(port, stopped)
    elif argv[0] == "http":
        _serve_http(stopped)
    else:
        _serve_smtp(stopped)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
