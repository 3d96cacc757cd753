"""The docker engine and the two local images the rehearsal's simulated Lambda needs (a test
tool). No image registry is reachable, so both are built here from Debian packages and kept:

* ``busybox`` (moto copies each function's code into a volume through a busybox container):
  the static binary of Debian's ``busybox-static``, imported as an image;
* the Lambda runtime stand-in: Debian bookworm (whose python3 is 3.11, the functions'
  runtime) by ``debootstrap --variant=minbase``, with /var/runtime holding boto3 at the pin of
  requirements.txt (the Lambda runtime provides boto3; the zip leaves it out) and
  runtime/bootstrap.py, and /var/gateway holding aiosmtpd (what the SMTP gateway image adds
  to the zip's code), and the database proxy's certificate (dbproxy.py): a throwaway CA made
  at build time, added to the image's trust store as Amazon's roots are in Lambda's, and a
  certificate for 127.0.0.2 signed by it (kept in /var/rehearsal/db-proxy; the CA's key is
  not kept). Tagged with a hash of what goes in, so it is built once and reused
  until one of those changes.

    python infra/rehearsal/images.py      # prints the runtime image's tag
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BOOTSTRAP = os.path.join(HERE, "runtime", "bootstrap.py")
REPOSITORY = "email-service-rehearsal/python3.11"
MIRROR = os.environ.get("REHEARSAL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
DOCKERD_LOG = os.path.join(tempfile.gettempdir(), "email-service-rehearsal-dockerd.log")


def _run(*cmd: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kwargs)


def docker_ready() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def ensure_docker() -> None:
    """Start dockerd when none answers (root; CI). No bridge network and no iptables: every
    rehearsal container shares the host's network and talks to loopback only."""
    if docker_ready():
        return
    if not shutil.which("dockerd"):
        raise SystemExit("no docker engine: make rehearse-deps (as root: apt-get install docker.io)")
    log = open(DOCKERD_LOG, "ab")
    subprocess.Popen(["dockerd", "--bridge=none", "--iptables=false", "--ip-forward=false",
                      "--ip-masq=false", "--host-gateway-ip=127.0.0.1"],
                     stdout=log, stderr=log, start_new_session=True)
    for _ in range(60):
        if docker_ready():
            return
        time.sleep(0.5)
    raise SystemExit(f"dockerd did not start (see {DOCKERD_LOG})")


def _exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag],
                          capture_output=True).returncode == 0


def _pin(name: str) -> str:
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as fh:
        match = re.search(rf"^{name}==(\S+)", fh.read(), re.MULTILINE | re.IGNORECASE)
    if not match:
        raise SystemExit(f"requirements.txt pins no {name}")
    return f"{name}=={match.group(1)}"


def runtime_tag() -> str:
    digest = hashlib.sha256()
    for path in (os.path.abspath(__file__), BOOTSTRAP):
        with open(path, "rb") as fh:
            digest.update(fh.read())
    digest.update(f"{_pin('boto3')} {_pin('aiosmtpd')} {MIRROR}".encode())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def _import(rootfs: str, tag: str, *changes: str) -> None:
    args = ["docker", "import"]
    for change in changes:
        args += ["--change", change]
    tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
    _run(*args, "-", tag, stdin=tar.stdout, stdout=subprocess.DEVNULL)
    if tar.wait():
        raise SystemExit(f"tar of {rootfs} failed")


def ensure_busybox() -> None:
    if _exists("busybox"):
        return
    binary = shutil.which("busybox") or "/bin/busybox"
    if not os.path.exists(binary):
        raise SystemExit("no busybox: make rehearse-deps (as root: apt-get install busybox-static)")
    with tempfile.TemporaryDirectory() as rootfs:
        os.makedirs(os.path.join(rootfs, "bin"))
        shutil.copy2(binary, os.path.join(rootfs, "bin", "busybox"))
        for applet in ("sh", "sleep", "tar", "ls", "cat"):
            os.symlink("busybox", os.path.join(rootfs, "bin", applet))
        _import(rootfs, "busybox:latest", "ENV PATH=/bin")


def _database_certificate(rootfs: str) -> None:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("rehearsal database proxy CA"))
          .issuer_name(name("rehearsal database proxy CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(name("127.0.0.2")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.2"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    with open(os.path.join(rootfs, "etc/ssl/certs/ca-certificates.crt"), "ab") as fh:
        fh.write(ca.public_bytes(pem))
    folder = os.path.join(rootfs, "var", "rehearsal", "db-proxy")
    os.makedirs(folder)
    with open(os.path.join(folder, "cert.pem"), "wb") as fh:
        fh.write(cert.public_bytes(pem))
    with open(os.path.join(folder, "key.pem"), "wb") as fh:
        fh.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def database_certificate(tag: str, into: str) -> tuple[str, str]:
    """Copy the database proxy's certificate and key out of the image into ``into``."""
    container = subprocess.run(["docker", "create", tag], check=True, capture_output=True,
                               text=True).stdout.strip()
    try:
        _run("docker", "cp", f"{container}:/var/rehearsal/db-proxy", into,
             stdout=subprocess.DEVNULL)
    finally:
        subprocess.run(["docker", "rm", container], capture_output=True)
    return os.path.join(into, "db-proxy", "cert.pem"), os.path.join(into, "db-proxy", "key.pem")


def ensure_runtime() -> str:
    """The runtime image's tag, built first when missing (a few minutes, once)."""
    tag = runtime_tag()
    if _exists(tag):
        return tag
    if not shutil.which("debootstrap"):
        raise SystemExit("no debootstrap: make rehearse-deps (as root: apt-get install debootstrap)")
    print(f"==> building the Lambda runtime image {tag} (debootstrap bookworm, once)", flush=True)
    work = tempfile.mkdtemp(prefix="rehearsal-rootfs-")
    rootfs = os.path.join(work, "rootfs")
    try:
        _run("debootstrap", "--variant=minbase", "--include=python3,ca-certificates",
             "bookworm", rootfs, MIRROR, stdout=subprocess.DEVNULL)
        for folder, pin in (("var/runtime", _pin("boto3")), ("var/gateway", _pin("aiosmtpd"))):
            _run(sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
                 "--target", os.path.join(rootfs, folder), pin)
        shutil.copy2(BOOTSTRAP, os.path.join(rootfs, "var", "runtime", "bootstrap.py"))
        _database_certificate(rootfs)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(os.path.join(rootfs, cache), ignore_errors=True)
        _import(rootfs, tag, 'ENTRYPOINT ["/usr/bin/python3", "-B", "/var/runtime/bootstrap.py"]',
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tag


def ensure_all() -> str:
    ensure_docker()
    ensure_busybox()
    return ensure_runtime()


if __name__ == "__main__":
    print(ensure_all())
