"""smtp/lines.py's filter: whatever the reads look like, aiosmtpd is handed the same
normalised stream, and a lone dot next to a bare line end is refused however it is split."""
from __future__ import annotations

import asyncio
import random
import re

import pytest

from chalicelib.smtp.lines import DataLineReader

ENDINGS = [b"\r\n", b"\n", b"\r"]


def reference(stream: bytes) -> tuple[bytes, bool]:
    """The whole stream at once: every line end written CRLF; refused when a line holding
    only a dot has a bare line end before it or after it."""
    out, bare_before = [], False
    for text, ending in re.findall(rb"([^\r\n]*)(\r\n|\r|\n)", stream):
        if text == b"." and (bare_before or ending != b"\r\n"):
            return b"".join(out), True
        out.append(text + b"\r\n")
        bare_before = ending != b"\r\n"
    return b"".join(out), False


def filtered(reads: list[bytes]) -> tuple[bytes, bool]:
    loop = asyncio.new_event_loop()
    try:
        refused = []
        reader = DataLineReader.adopt(asyncio.StreamReader(limit=1 << 20, loop=loop),
                                      refuse=lambda: refused.append(True))
        for read in reads:
            reader.feed_data(read)
        return bytes(reader._buffer), bool(refused)
    finally:
        loop.close()


def splits(stream: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 6))))
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]


def test_any_split_of_any_stream_gives_the_whole_stream_s_result():
    rng = random.Random(32)
    pieces = [b".", b"..", b"x", b"ab", b"", b".x"]
    for _ in range(4000):
        stream = b"".join(rng.choice(pieces) + rng.choice(ENDINGS)
                          for _ in range(rng.randint(1, 8))) + b"end\r\n"
        want_out, want_refused = reference(stream)
        out, refused = filtered(splits(stream, rng))
        assert refused == want_refused, stream
        if not refused:
            assert out == want_out, stream


@pytest.mark.parametrize("sequence", [b"\n.\n", b"\n.\r\n", b"\r.\r", b"\r\n.\r", b"\r.\r\n",
                                      b"\r\n.\n", b"\r.\n"])
def test_every_smuggling_sequence_is_refused_at_every_split(sequence):
    stream = b"DATA\r\nSubject: x\r\n\r\nbody" + sequence + b"MAIL FROM:<a@b>\r\n.\r\n"
    for cut in range(1, len(stream)):
        assert filtered([stream[:cut], stream[cut:]])[1], cut


def test_a_clean_read_is_passed_on_as_it_is():
    clean = b"Subject: x\r\n\r\n..stuffed\r\n.\r\n"
    assert filtered([clean]) == (clean, False)
    assert filtered([b"a\nb\rc\r\n"]) == (b"a\r\nb\r\nc\r\n", False)
