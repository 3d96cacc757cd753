"""The peer a self-hoster would pick instead, for ``bench_latency.py --postfix``: a private
Postfix instance with OpenDKIM as its milter, against ``make run``'s SMTP gateway + delivery,
both relaying to the bench's sink on loopback (no delay), or through the delay proxy
(``compare(round_trip=...)``).

* **Postfix** (Debian's package, not its system service): ``main.cf`` and ``master.cf`` in a
  temp directory (``postfix -c <dir> start``), its own queue and data directories, smtpd on a
  free port of 127.0.0.1 with STARTTLS offered (a throwaway certificate), mail from
  127.0.0.0/8 relayed to the sink (``relayhost``), no chroot, Postfix's default process
  limit (100), logs to a file (``maillog_file``). Stopped with ``postfix -c <dir> stop``.
* **OpenDKIM** (Debian's package): ``opendkim -f -x <conf>`` in the foreground on a free
  port, signing mail from the sender's domain with a fresh RSA-2048 key (relaxed/simple),
  as our gateway signs with the tenant domain's key.
* **The client**: 10 sessions at once (smtplib threads in a process of their own), each
  with STARTTLS, reused for its share of the messages; the gateway also wants AUTH (the
  tenant's SMTP key), once a session. Messages/s from the first connection until the sink
  has them all; CPU of each side's process trees over the same span (Postfix: its master,
  which reaps its children, and every live child; OpenDKIM; the stack's tree).

Needs root (Postfix's master runs as root and drops to ``mail_owner``); when Postfix or
OpenDKIM is missing or will not start, ``compare`` returns the reason instead of figures."""
from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SESSIONS = 10
BODY = "Hello from the Postfix comparison.\r\n" * 30


def _key_and_certificate(folder: str) -> tuple[str, str, str]:
    """(DKIM key path, TLS certificate path, TLS key path), fresh."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    def write(path: str, data: bytes) -> str:
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, 0o644)
        return path

    def pem(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())

    dkim = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    tls = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pf.bench.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(tls.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(tls, hashes.SHA256()))
    return (write(os.path.join(folder, "dkim.key"), pem(dkim)),
            write(os.path.join(folder, "tls.crt"), cert.public_bytes(serialization.Encoding.PEM)),
            write(os.path.join(folder, "tls.key"), pem(tls)))


class PrivatePostfix:
    """Postfix + OpenDKIM under ``folder``; ``start()`` / ``stop()``."""

    def __init__(self, folder: str, sink_port: int, sender_domain: str,
                 relay: tuple[str, int] | None = None, sessions: int = 0):
        from tests.support import free_port

        self.folder = folder
        self.etc = os.path.join(folder, "etc")
        self.queue = os.path.join(folder, "queue")
        self.port, self.milter_port = free_port(), free_port()
        self.sink_port, self.sender_domain = sink_port, sender_domain
        # (host, port) to relay to instead of the sink (the delay proxy); sessions: its
        # destination concurrency limit (0: Postfix's default, 20)
        self.relay, self.sessions = relay or ("127.0.0.1", sink_port), sessions
        self.opendkim: subprocess.Popen | None = None
        self.started = False

    def _write_config(self) -> None:
        # Postfix's daemons run as mail_owner: they must reach the temp directories.
        os.makedirs(self.folder, exist_ok=True)
        for path in (os.path.dirname(self.folder), self.folder):
            os.chmod(path, 0o755)
        dkim_key, cert, key = _key_and_certificate(self.folder)
        os.makedirs(self.etc, exist_ok=True)
        os.makedirs(os.path.join(self.folder, "data"), exist_ok=True)
        os.makedirs(self.queue, exist_ok=True)
        shutil.chown(os.path.join(self.folder, "data"), "postfix", "postfix")
        main = {
            "compatibility_level": "3.6", "queue_directory": self.queue,
            "data_directory": os.path.join(self.folder, "data"),
            "command_directory": "/usr/sbin", "daemon_directory": "/usr/lib/postfix/sbin",
            "shlib_directory": "/usr/lib/postfix", "meta_directory": "/etc/postfix",
            "mail_owner": "postfix", "setgid_group": "postdrop",
            "myhostname": "pf.bench.test", "mydomain": "bench.test",
            "inet_interfaces": "127.0.0.1", "inet_protocols": "ipv4", "mydestination": "",
            "local_recipient_maps": "", "alias_maps": "", "alias_database": "",
            "relayhost": f"[{self.relay[0]}]:{self.relay[1]}", "mynetworks": "127.0.0.0/8",
            "smtpd_relay_restrictions": "permit_mynetworks, reject",
            "smtpd_tls_security_level": "may", "smtpd_tls_cert_file": cert,
            "smtpd_tls_key_file": key, "smtp_tls_security_level": "none",
            "smtpd_milters": f"inet:127.0.0.1:{self.milter_port}",
            "non_smtpd_milters": "$smtpd_milters", "milter_default_action": "tempfail",
            "maillog_file": os.path.join(self.folder, "maillog"), "biff": "no",
            "maillog_file_prefixes": self.folder,
            "smtputf8_enable": "no",
        }
        if self.sessions:
            main["default_destination_concurrency_limit"] = str(self.sessions)
        with open(os.path.join(self.etc, "main.cf"), "w") as fh:
            fh.writelines(f"{k} = {v}\n" for k, v in main.items())
        lines = []
        with open("/etc/postfix/master.cf") as fh:
            for line in fh:
                fields = line.split()
                if line[:1] in ("#", " ", "\t", "\n") or len(fields) < 8:
                    if lines and line[:1] in (" ", "\t") and lines[-1] is not None:
                        lines.append(line)  # an -o or flags line of a kept service
                    continue
                if fields[0] in ("maildrop", "uucp", "ifmail", "bsmtp", "scalemail-backend",
                                 "mailman"):
                    lines.append(None)  # skipped, with its continuation lines
                    continue
                if fields[1] == "inet":
                    fields[0] = f"127.0.0.1:{self.port}"
                fields[4] = "n"  # no chroot: the temp queue has no copies of /etc files
                lines.append(" ".join(fields) + "\n")
        with open(os.path.join(self.etc, "master.cf"), "w") as fh:
            fh.writelines(line for line in lines if line is not None)
        with open(os.path.join(self.folder, "opendkim.conf"), "w") as fh:
            fh.write(f"Syslog no\nDomain {self.sender_domain}\nKeyFile {dkim_key}\n"
                     f"Selector bench\nSocket inet:{self.milter_port}@127.0.0.1\nMode s\n"
                     "Canonicalization relaxed/simple\nRequireSafeKeys no\n"
                     f"PidFile {os.path.join(self.folder, 'opendkim.pid')}\n")

    def start(self) -> "PrivatePostfix":
        self._write_config()
        self.opendkim = subprocess.Popen(
            ["opendkim", "-f", "-x", os.path.join(self.folder, "opendkim.conf")],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.folder, "opendkim.log"), "w"))
        out = subprocess.run(["postfix", "-c", self.etc, "start"], capture_output=True,
                             text=True, timeout=120)
        if out.returncode:
            raise RuntimeError(f"postfix start: {out.stdout.strip()} {out.stderr.strip()}"[-800:])
        self.started = True
        import smtplib

        deadline = time.monotonic() + 60
        while True:
            try:
                with smtplib.SMTP("127.0.0.1", self.port, timeout=10) as smtp:
                    smtp.ehlo("probe.bench.test")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("postfix did not answer: " + self.log()[-800:])
                time.sleep(0.2)
        return self

    def master_pid(self) -> int:
        with open(os.path.join(self.queue, "pid", "master.pid")) as fh:
            return int(fh.read().split()[0])

    def cpu(self) -> float:
        from bench.make_run import tree_cpu

        return tree_cpu(self.master_pid()) + tree_cpu(self.opendkim.pid)

    def log(self) -> str:
        try:
            with open(os.path.join(self.folder, "maillog")) as fh:
                return fh.read()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.started:
            subprocess.run(["postfix", "-c", self.etc, "stop"], capture_output=True, timeout=120)
            self.started = False
        if self.opendkim is not None:
            self.opendkim.terminate()
            try:
                self.opendkim.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.opendkim.kill()
                self.opendkim.wait()
            self.opendkim = None


_CLIENT = r"""
import json, smtplib, ssl, sys, threading
host, port, user, password, sender, count, sessions, body = json.loads(sys.stdin.read())
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
errors = []
def run(i):
    try:
        with smtplib.SMTP(host, port, local_hostname="client.bench.test", timeout=120) as smtp:
            smtp.starttls(context=context)
            smtp.ehlo("client.bench.test")
            if password:
                smtp.login(user, password)
            for n in range(i, count, sessions):
                to = f"user{n}@sink.example.net"
                message = (f"From: App <{sender}>\r\nTo: {to}\r\nSubject: Compare {n}\r\n"
                           f"Date: Mon, 01 Jan 2024 00:00:00 +0000\r\n"
                           f"Message-ID: <c{n}.{port}@bench.test>\r\nMIME-Version: 1.0\r\n"
                           "Content-Type: text/plain; charset=us-ascii\r\n\r\n" + body)
                smtp.sendmail(sender, [to], message.encode())
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(errors[:3]))
"""


def submit(port: int, user: str, password: str, sender: str, count: int) -> None:
    """``count`` messages over SESSIONS sessions, from a process of its own."""
    import json

    out = subprocess.run([sys.executable, "-c", _CLIENT], input=json.dumps(
        ["127.0.0.1", port, user, password, sender, count, SESSIONS, BODY]),
        capture_output=True, text=True, timeout=1800)
    errors = json.loads(out.stdout or "null") if out.returncode == 0 else [out.stderr[-800:]]
    if errors:
        raise RuntimeError(f"submission failed: {errors}")


def _measure(world, count: int, port: int, user: str, password: str, sender: str, cpu) -> dict:
    from bench.latency_rig import wait_for

    sent0 = world.counters.messages[0]
    cpu0 = cpu()
    started = time.perf_counter()
    submit(port, user, password, sender, count)
    done = wait_for(lambda: world.counters.messages[0], sent0 + count, "messages")
    return {"rate": count / (done - started), "cpu_ms": 1000 * (cpu() - cpu0) / count}


def compare(world, count: int, folder: str, database_url: str,
            settings: dict | None = None, round_trip: float = 0.0) -> dict:
    """Postfix + OpenDKIM against make run's gateway + delivery, each ``count`` messages
    (after 20 of warm-up) to the sink; returns {"n", "postfix", "service"} or {"error"}.
    ``round_trip`` (ms) above 0: both relay through the delay proxy (one destination's
    address, that round trip), Postfix with 100 sessions to it (the reference's count;
    its default is 20) and the service with its defaults."""
    from bench.latency_rig import destination_address, new_database_url
    from bench.common import ADMIN_KEY
    from bench.make_run import MakeRun, tree_cpu
    from tests.support import Api, make_tenant

    figures: dict = {"n": count}
    if os.geteuid() != 0 or not (shutil.which("postfix") and shutil.which("opendkim")):
        return {"error": "needs root and Debian's postfix and opendkim"}
    domain = "pf.example.com"
    world.set_round_trip(round_trip)
    relay = (destination_address(0), world.mx_port) if round_trip > 0 else \
        ("127.0.0.1", world.sink_port)
    figures["round_trip"] = round_trip
    postfix = PrivatePostfix(os.path.join(folder, "postfix"), world.sink_port, domain,
                             relay, 100 if round_trip > 0 else 0)
    try:
        os.makedirs(postfix.folder, exist_ok=True)
        postfix.start()
        submit(postfix.port, "", "", f"app@{domain}", 20)  # warm-up
        time.sleep(1)
        figures["postfix"] = _measure(world, count, postfix.port, "", "", f"app@{domain}",
                                      postfix.cpu)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        postfix.stop()
    env = {**world.service_env(), **(settings or {}),
           "DELIVERY_RELAY": f"{relay[0]}:{relay[1]}",
           "DATABASE_URL": new_database_url(folder, "postfix-compare", database_url),
           "SIGNING_KEY_PATH": os.path.join(folder, "postfix-compare-key.pem")}
    stack = MakeRun(env).start()
    try:
        tenant = make_tenant(Api(stack.base_url, ADMIN_KEY))
        sender = f"app@{tenant.domain}"
        sent0 = world.counters.messages[0]
        submit(stack.smtp_port, "bench", tenant.smtp_key, sender, 20)  # warm-up
        from bench.latency_rig import wait_for

        wait_for(lambda: world.counters.messages[0], sent0 + 20, "warm-up messages")
        figures["service"] = _measure(world, count, stack.smtp_port, "bench", tenant.smtp_key,
                                      sender, lambda: tree_cpu(stack.pid))
    finally:
        stack.stop()
    return figures
