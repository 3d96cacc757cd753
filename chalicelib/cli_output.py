"""How the operator CLI prints: ``--json`` is the API answer's ``data`` object, unchanged, for
every command (``tail --json``: one message record per line); without it, people-readable
text: a table for lists, ``field: value`` lines for one record, zone-file lines for ``dns``."""
from __future__ import annotations

import json
from typing import Any, TextIO


def as_json(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(_cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def table(rows: list[dict], columns: tuple[str, ...], pagination: dict | None = None) -> str:
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    if pagination:
        lines.append(f"page {pagination.get('page')} of {max(1, pagination.get('total_pages') or 0)}"
                     f" ({pagination.get('total')} total)")
    return "\n".join(lines)


def record(data: dict) -> str:
    width = max((len(k) for k in data), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in data.items())


def human(data: Any, columns: tuple[str, ...] | None = None) -> str:
    """A list answer ``{<items>: [...], pagination}`` as a table; a one-record answer
    ``{<record>: {...}}`` as field lines; anything else as field lines of ``data``."""
    if isinstance(data, dict):
        lists = [k for k, v in data.items() if isinstance(v, list) and k != "pagination"]
        if "pagination" in data and len(lists) == 1:
            rows = data[lists[0]]
            cols = columns or (tuple(rows[0])[:6] if rows else ("id",))
            return table(rows, cols, data["pagination"])
        if len(data) == 1 and isinstance(next(iter(data.values())), dict):
            return record(next(iter(data.values())))
        return record(data)
    return _cell(data)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def zone_lines(domain: dict) -> list[str]:
    """The domain's records as zone-file lines: a TXT value longer than 255 octets is split
    into several character-strings of one record (RFC 1035 3.3.14), as DKIM publishers do;
    resolvers concatenate them."""
    from chalicelib.services.dkim.signer import dns_txt_strings

    lines = []
    for purpose, rec in (domain.get("dns_records") or {}).items():
        value = rec["value"]
        if rec["type"] == "TXT":
            rdata = " ".join(_quoted(s) for s in dns_txt_strings(value))
        else:  # a CNAME target is a name: absolute, unquoted
            rdata = f"{value}."
        lines.append(f"{rec['name']}.\tIN\t{rec['type']}\t{rdata}\t; {purpose}")
    return lines


def message_line(m: dict) -> str:
    return (f"{m.get('created_at', '')}  #{m['id']:<6} {m.get('status', ''):<9} "
            f"{m.get('mail_from', '')} -> {m.get('rcpt_to', '')}  {m.get('subject') or ''}")


def write(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()
