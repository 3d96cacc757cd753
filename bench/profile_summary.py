"""Where a py-spy profile's samples go: the file ``bench_pipeline.py --profile PREFIX`` writes
(collapsed stacks, one line per distinct stack with its sample count), summarised as shares of
all samples: by kind of thread, by library of the innermost frame (self), by library anywhere
on the stack (inclusive), by function (self and inclusive, this repository's functions), and
with ``--callers PATTERN`` who calls the frames matching a regular expression.

Run: .venv/bin/python bench/profile_summary.py PROFILE.txt [--top 30] [--callers 'get_settings']"""
from __future__ import annotations

import argparse
import collections
import re

_LINE = re.compile(r":\d+\)")
_FILE = re.compile(r"\(([^()]+)\)$")
#: How a stack's thread is named, by a frame it holds (first match wins).
THREAD_KINDS = (("process_request_thread", "HTTP request"),
                ("workers/dispatch.py", "queue worker"),
                ("chalicelib/queues.py", "queue scheduling"), ("_sweep_loop", "sweeper"),
                ("aiosmtpd", "SMTP gateway"))


def read(path: str) -> list[tuple[list[str], int]]:
    """(frames outermost first, without line numbers and the process label; samples)."""
    stacks = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            stack, _, count = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            # py-spy --subprocesses names the process (and its parents) first
            while frames and frames[0].startswith("process "):
                frames = frames[1:]
            stacks.append(([_LINE.sub(")", f) for f in frames], int(count)))
    return stacks


def library(frame: str) -> str:
    """This repository's package (chalicelib/services/delivery) or the library's top name."""
    found = _FILE.search(frame)
    path = found.group(1) if found else frame
    if path.startswith("chalicelib/"):
        return "/".join(path.split("/")[:3])
    return path.split("/")[0]


def summary(stacks, top: int) -> list[str]:
    total = sum(n for _, n in stacks) or 1
    kinds, self_lib, incl_lib = (collections.Counter() for _ in range(3))
    self_fn, incl_fn = collections.Counter(), collections.Counter()
    for frames, n in stacks:
        joined = ";".join(frames)
        kinds[next((k for mark, k in THREAD_KINDS if mark in joined), "other")] += n
        if frames:
            self_lib[library(frames[-1])] += n
            self_fn[frames[-1]] += n
        for lib in {library(f) for f in frames}:
            incl_lib[lib] += n
        for fn in set(frames):
            if "chalicelib/" in fn:
                incl_fn[fn] += n
    out = [f"{total} samples"]
    for title, counter in (("thread kind", kinds), ("self, by library", self_lib),
                           ("inclusive, by library", incl_lib), ("self, by function", self_fn),
                           ("inclusive, this repository's functions", incl_fn)):
        out.append(f"\n== {title}")
        out += [f"{v / total:6.1%}  {k}" for k, v in counter.most_common(top)]
    return out


def callers(stacks, pattern: str, depth: int, top: int) -> list[str]:
    """Who calls the first frame matching ``pattern``: the nearest ``depth`` frames of this
    repository above it."""
    total = sum(n for _, n in stacks) or 1
    found, hit = collections.Counter(), 0
    for frames, n in stacks:
        at = next((i for i, f in enumerate(frames) if re.search(pattern, f)), None)
        if at is None:
            continue
        hit += n
        chain = [f for f in frames[:at] if "chalicelib/" in f][-depth:]
        found[" < ".join(reversed(chain))] += n
    return [f"{pattern}: {hit / total:.1%}"] + \
        [f"  {v / total:6.1%}  {k}" for k, v in found.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--callers", action="append", default=[],
                        help="regular expression of a frame whose callers to show (repeatable)")
    parser.add_argument("--depth", type=int, default=2)
    args = parser.parse_args()
    stacks = read(args.profile)
    lines = [] if args.callers else summary(stacks, args.top)
    for pattern in args.callers:
        lines += callers(stacks, pattern, args.depth, args.top)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
