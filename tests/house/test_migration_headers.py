"""Each migration's header tells the truth: its "Revises:" line names the revision its
``down_revision`` names (0009 and 0014 said 0007 after their chains were re-ordered at merges,
issue 36), and the chain is one line from 0001 to the head."""
from __future__ import annotations

import re
from pathlib import Path

VERSIONS = Path(__file__).resolve().parents[2] / "chalicelib" / "db" / "migrations" / "versions"


def _read(path: Path) -> tuple[str, str, str | None]:
    text = path.read_text(encoding="utf-8")
    revision = re.search(r"^revision\s*=\s*['\"](\w+)['\"]", text, re.M)
    down = re.search(r"^down_revision\s*=\s*(?:['\"](\w+)['\"]|None)", text, re.M)
    header = re.search(r"^Revises:[ \t]*(\w*)", text, re.M)
    assert revision and down and header, path.name
    assert (header.group(1) or None) == down.group(1), \
        f"{path.name}: header says Revises: {header.group(1)}, down_revision is {down.group(1)}"
    return path.name, revision.group(1), down.group(1)


def test_headers_name_the_down_revision_and_the_chain_is_one_line():
    migrations = [_read(p) for p in sorted(VERSIONS.glob("*.py")) if p.name[0].isdigit()]
    downs = [down for _, _, down in migrations]
    assert downs.count(None) == 1, "one first migration"
    revisions = {rev for _, rev, _ in migrations}
    assert len(revisions) == len(migrations)
    assert all(down in revisions for down in downs if down), "a down_revision that is no file"
    assert len(set(downs)) == len(downs), "two migrations revise the same one: a fork"
