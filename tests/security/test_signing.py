import base64
import multiprocessing
import os
import shutil
import stat
import subprocess
import warnings

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from chalicelib.services.security import signing


@pytest.fixture(autouse=True)
def _fresh_cache():
    signing.clear_cache()
    yield
    signing.clear_cache()


@pytest.fixture(scope="module")
def key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


# --------------------------------------------------------------------------- #
# sign / verify
# --------------------------------------------------------------------------- #


def test_sign_and_verify_round_trip(key):
    body = b'{"event":"delivered","id":"m_1"}\n'
    sig = signing.sign_body(key, body)
    base64.b64decode(sig, validate=True)  # standard alphabet, padded
    assert signing.verify_body(key.public_key(), body, sig)
    assert signing.verify_body(key, body, sig)  # private key accepted too


def test_verify_rejects_tampering_and_garbage(key):
    body = b"exact bytes"
    sig = signing.sign_body(key, body)
    assert not signing.verify_body(key.public_key(), body + b" ", sig)
    assert not signing.verify_body(key.public_key(), b"Exact bytes", sig)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert not signing.verify_body(other.public_key(), body, sig)
    assert not signing.verify_body(key.public_key(), body, "not base64!!")
    assert not signing.verify_body(key.public_key(), body, "")
    assert not signing.verify_body(key.public_key(), body, base64.b64encode(b"x" * 256).decode())


def test_sign_requires_bytes(key):
    with pytest.raises(TypeError):
        signing.sign_body(key, "text")


def test_signature_is_deterministic_pkcs1v15(key):
    body = b"same"
    assert signing.sign_body(key, body) == signing.sign_body(key, body)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_signature_verifies_with_openssl_cli(key, tmp_path):
    body = b'{"type":"email.bounced","data":{"to":"a@example.com"}}\r\n\x00\xff'
    sig = signing.sign_body(key, body)
    (tmp_path / "pub.pem").write_bytes(signing.public_key_pem(key))
    (tmp_path / "body.bin").write_bytes(body)
    (tmp_path / "sig.bin").write_bytes(base64.b64decode(sig))
    result = subprocess.run(
        [
            "openssl", "dgst", "-sha256",
            "-verify", str(tmp_path / "pub.pem"),
            "-signature", str(tmp_path / "sig.bin"),
            str(tmp_path / "body.bin"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Verified OK" in result.stdout

    (tmp_path / "body.bin").write_bytes(body + b"!")
    result = subprocess.run(
        [
            "openssl", "dgst", "-sha256",
            "-verify", str(tmp_path / "pub.pem"),
            "-signature", str(tmp_path / "sig.bin"),
            str(tmp_path / "body.bin"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_openssl_signature_verifies_with_verify_body(key, tmp_path):
    """The other direction: a signature made by openssl is accepted."""
    (tmp_path / "key.pem").write_bytes(signing.private_key_pem(key))
    body = b"made by openssl"
    (tmp_path / "body.bin").write_bytes(body)
    subprocess.run(
        ["openssl", "dgst", "-sha256", "-sign", str(tmp_path / "key.pem"),
         "-out", str(tmp_path / "sig.bin"), str(tmp_path / "body.bin")],
        check=True,
        capture_output=True,
    )
    sig = base64.b64encode((tmp_path / "sig.bin").read_bytes()).decode()
    assert signing.verify_body(key.public_key(), body, sig)
    assert sig == signing.sign_body(key, body)


# --------------------------------------------------------------------------- #
# public key / DKIM
# --------------------------------------------------------------------------- #


def test_public_key_b64_is_spki_der(key):
    der = base64.b64decode(signing.public_key_b64(key), validate=True)
    loaded = serialization.load_der_public_key(der)
    assert loaded.public_numbers() == key.public_key().public_numbers()
    assert signing.public_key_b64(key.public_key()) == signing.public_key_b64(key)


def test_dkim_record(key):
    record = signing.dkim_record(key)
    assert record == "v=DKIM1; k=rsa; p=" + signing.public_key_b64(key)
    assert record.startswith("v=DKIM1; k=rsa; p=MIIBIjAN")  # 2048-bit SPKI prefix


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_dkim_p_value_matches_openssl(key, tmp_path):
    (tmp_path / "key.pem").write_bytes(signing.private_key_pem(key))
    der = subprocess.run(
        ["openssl", "pkey", "-in", str(tmp_path / "key.pem"), "-pubout", "-outform", "DER"],
        check=True,
        capture_output=True,
    ).stdout
    assert signing.public_key_b64(key) == base64.b64encode(der).decode()


# --------------------------------------------------------------------------- #
# load_or_create_key
# --------------------------------------------------------------------------- #


def test_creates_key_with_0600_and_parent_dirs(tmp_path):
    path = tmp_path / "a" / "b" / "signing.pem"
    key = signing.load_or_create_key(str(path))
    assert isinstance(key, rsa.RSAPrivateKey)
    assert key.key_size == 2048
    assert key.public_key().public_numbers().e == 65537
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    # no temp files left behind
    assert sorted(os.listdir(path.parent)) == ["signing.pem"]


def test_creates_key_0600_even_with_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        key_path = tmp_path / "k.pem"
        signing.load_or_create_key(str(key_path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600


def test_reload_gives_identical_key(tmp_path):
    path = str(tmp_path / "k.pem")
    first = signing.load_or_create_key(path)
    assert signing.load_or_create_key(path) is first  # cached
    signing.clear_cache()
    second = signing.load_or_create_key(path)
    assert second is not first
    assert second.private_numbers() == first.private_numbers()
    body = b"payload"
    assert signing.verify_body(second.public_key(), body, signing.sign_body(first, body))


def test_cache_is_per_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = signing.load_or_create_key("k.pem")
    assert signing.load_or_create_key(str(tmp_path / "k.pem")) is a
    b = signing.load_or_create_key("other.pem")
    assert b.private_numbers() != a.private_numbers()


def test_loads_traditional_pem(tmp_path, key):
    path = tmp_path / "trad.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    before = path.read_bytes()
    loaded = signing.load_or_create_key(str(path))
    assert loaded.private_numbers() == key.private_numbers()
    assert path.read_bytes() == before  # never rewritten


def test_loads_pkcs8_pem(tmp_path, key):
    path = tmp_path / "p8.pem"
    path.write_bytes(signing.private_key_pem(key))
    path.chmod(0o600)
    assert signing.load_or_create_key(str(path)).private_numbers() == key.private_numbers()


def test_corrupt_file_is_an_error_and_not_overwritten(tmp_path):
    path = tmp_path / "bad.pem"
    path.write_bytes(b"-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n")
    path.chmod(0o600)
    with pytest.raises(signing.SigningKeyError, match="bad.pem"):
        signing.load_or_create_key(str(path))
    assert b"garbage" in path.read_bytes()


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.pem"
    path.write_bytes(b"")
    with pytest.raises(signing.SigningKeyError, match="empty"):
        signing.load_or_create_key(str(path))


def test_encrypted_file_is_an_error(tmp_path, key):
    path = tmp_path / "enc.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    path.chmod(0o600)
    with pytest.raises(signing.SigningKeyError, match="password"):
        signing.load_or_create_key(str(path))


def test_non_rsa_key_is_an_error(tmp_path):
    path = tmp_path / "ec.pem"
    path.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    with pytest.raises(signing.SigningKeyError, match="not an RSA key"):
        signing.load_or_create_key(str(path))


def test_world_readable_key_warns(tmp_path, key):
    path = tmp_path / "open.pem"
    path.write_bytes(signing.private_key_pem(key))
    path.chmod(0o644)
    with pytest.warns(UserWarning, match="chmod 600"):
        signing.load_or_create_key(str(path))


def test_private_key_file_mode_no_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        signing.load_or_create_key(str(tmp_path / "quiet.pem"))
        signing.clear_cache()
        signing.load_or_create_key(str(tmp_path / "quiet.pem"))


def test_losing_the_race_uses_the_key_on_disk(tmp_path, monkeypatch, key):
    """Deterministic version of the race: another process publishes its key
    between our 'file missing' check and our link; we must return its key."""
    path = tmp_path / "race.pem"
    real_generate = rsa.generate_private_key

    def generate_while_other_process_wins(*args, **kwargs):
        path.write_bytes(signing.private_key_pem(key))
        path.chmod(0o600)
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(signing.rsa, "generate_private_key", generate_while_other_process_wins)
    loaded = signing.load_or_create_key(str(path))
    assert loaded.private_numbers() == key.private_numbers()
    assert os.listdir(tmp_path) == ["race.pem"]


def test_fallback_without_hard_links(tmp_path, monkeypatch):
    import errno

    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(signing.os, "link", no_link)
    path = tmp_path / "nolink.pem"
    key = signing.load_or_create_key(str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    signing.clear_cache()
    assert signing.load_or_create_key(str(path)).private_numbers() == key.private_numbers()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def _child_load(path, barrier, queue):
    from chalicelib.services.security import signing as child_signing

    barrier.wait(timeout=30)
    key = child_signing.load_or_create_key(path)
    queue.put(child_signing.public_key_b64(key))


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_concurrent_creation_from_processes_ends_with_one_key(tmp_path, start_method):
    if start_method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{start_method} not available")
    ctx = multiprocessing.get_context(start_method)
    nproc = 4
    path = str(tmp_path / "shared" / "signing.pem")
    barrier = ctx.Barrier(nproc)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child_load, args=(path, barrier, queue)) for _ in range(nproc)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in range(nproc)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    on_disk = signing.load_or_create_key(path)
    assert set(results) == {signing.public_key_b64(on_disk)}
    assert os.listdir(os.path.dirname(path)) == ["signing.pem"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
