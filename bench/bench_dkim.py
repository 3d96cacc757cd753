"""Benchmark: OpenSSL-backed DKIM signing vs pure dkimpy, same run.

    .venv/bin/python bench/bench_dkim.py [--seconds 3] [--size 10240]

Both sides sign the same ~10 KB multipart message, relaxed/relaxed
rsa-sha256, same RSA-2048 key, selector, domain, header list and timestamp;
the first signatures are checked to be byte-identical before timing.
``sign`` is measured warm (its parsed-key LRU populated, as in a long-running
worker); pure ``dkim.sign`` parses the PEM on every call, as it always does.
"""

from __future__ import annotations

import argparse
import base64
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dkim  # noqa: E402
import cryptography  # noqa: E402

from chalicelib.services.dkim import signer as ds  # noqa: E402

DOMAIN = "example.com"
SELECTOR = "bench"
TS = 1_700_000_000


def make_message(size: int) -> bytes:
    head = (
        "From: \"Example Shop\" <no-reply@example.com>\r\n"
        "To: Customer <customer@example.org>\r\n"
        "Reply-To: support@example.com\r\n"
        "Subject: =?UTF-8?Q?Your_order_=E2=9C=93?=\r\n"
        "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n"
        "Message-ID: <bench-1@example.com>\r\n"
        "List-Unsubscribe: <https://example.com/u/abc>\r\n"
        "List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"
        "MIME-Version: 1.0\r\n"
        "Content-Type: multipart/alternative; boundary=\"b1\"\r\n"
        "\r\n"
        "--b1\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "\r\n"
    ).encode()
    text_line = b"Thank you for your order. Your items will ship soon.  \r\n"
    html = base64.encodebytes(b"<p>Thank you for your order.</p>" * 40).replace(b"\n", b"\r\n")
    parts = [head]
    while sum(map(len, parts)) + len(html) + 80 < size:
        parts.append(text_line)
    parts.append(b"\r\n--b1\r\nContent-Type: text/html; charset=utf-8\r\n")
    parts.append(b"Content-Transfer-Encoding: base64\r\n\r\n" + html + b"--b1--\r\n")
    return b"".join(parts)


def rate(fn, seconds: float) -> tuple[float, int]:
    fn()  # warm-up
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        fn()
        n += 1
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="time per contender")
    ap.add_argument("--size", type=int, default=10 * 1024, help="message size in bytes")
    args = ap.parse_args()

    message = make_message(args.size)
    pem, _pub = ds.generate_key()

    t0 = time.perf_counter()
    ds.public_key_b64(pem)  # first load: cryptography parses + validates the key
    cold_load_ms = (time.perf_counter() - t0) * 1e3

    fast_sig = ds.sign(message, domain=DOMAIN, selector=SELECTOR, private_pem=pem, timestamp=TS)
    headers = [h.strip() for h in dkim.util.parse_tag_value(fast_sig.split(b":", 1)[1])[b"h"].split(b":")]

    real_time = dkim.time
    try:  # dkim.sign has no timestamp argument; pin its clock for the identity check only
        dkim.time = type("T", (), {"time": staticmethod(lambda: float(TS))})
        ref_sig = dkim.sign(message, SELECTOR.encode(), DOMAIN.encode(), pem,
                            canonicalize=(b"relaxed", b"relaxed"), include_headers=headers)
    finally:
        dkim.time = real_time
    if fast_sig != ref_sig:
        sys.exit("signatures differ: fast path is not byte-identical to dkimpy")

    def fast():
        ds.sign(message, domain=DOMAIN, selector=SELECTOR, private_pem=pem, timestamp=TS)

    def pure():
        dkim.sign(message, SELECTOR.encode(), DOMAIN.encode(), pem,
                  canonicalize=(b"relaxed", b"relaxed"), include_headers=headers)

    pure_rate, pure_n = rate(pure, args.seconds)
    fast_rate, fast_n = rate(fast, args.seconds)
    ratio = fast_rate / pure_rate

    print(f"python {platform.python_version()}, dkimpy {_version('dkimpy')}, "
          f"cryptography {cryptography.__version__}, {platform.machine()}")
    print(f"message: {len(message)} bytes, RSA-2048, relaxed/relaxed rsa-sha256, "
          f"h={len(headers)} fields; signatures byte-identical: yes")
    print(f"cold key load (cryptography, once per key per process): {cold_load_ms:.1f} ms")
    print(f"pure dkimpy dkim.sign : {pure_rate:9.1f} sig/s  ({1e3 / pure_rate:.3f} ms/sig, n={pure_n})")
    print(f"dkim_signing.sign     : {fast_rate:9.1f} sig/s  ({1e3 / fast_rate:.3f} ms/sig, n={fast_n})")
    print(f"speed-up              : {ratio:.1f}x")
    print()
    print("| message | dkimpy `dkim.sign` (sig/s) | `dkim_signing.sign` (sig/s) | speed-up |")
    print("|---|---|---|---|")
    print(f"| {len(message) / 1024:.1f} KB, RSA-2048 | {pure_rate:.0f} | {fast_rate:.0f} | {ratio:.1f}x |")


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return "?"


if __name__ == "__main__":
    main()
