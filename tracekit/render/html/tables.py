"""Text on the HTML page: a string escaped, a number read, the summary as a key-value grid, a table as a sortable
``<table>`` (its first ``MAX_ROWS`` rows; the JSON sidecar holds all)."""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

from ...result import Result, plain_value, table_rows
from ..human import column, display_frame, label_of, origin_of, safe_text, value_text

MAX_ROWS = 500  # rows of one table on the page; the JSON sidecar (and -f json) has every row


def esc(v: Any) -> str:
    """Text for HTML: control characters made visible (``safe_text``), then escaped — a kernel name cannot inject
    markup or script."""
    return html.escape(safe_text(str(v)), quote=True)


def num(v: Any) -> float | None:
    v = plain_value(v)
    if isinstance(v, bool) or v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def summary_html(result: Result) -> str:
    """The summary as a key-value grid; a part that is itself a record (a dict holding a dict, or of more than
    ``GRID_KEYS`` keys: the ranks of a run) as its own two-column table below it, never a dict's raw text."""
    origin = origin_of(result)
    cells, parts = [], []
    for k, v in result.summary.items():
        if _is_record(v):
            parts.append(record_html(label_of(k, result.summary), v, origin))
            continue
        cells.append(
            f"<div><span>{esc(label_of(k, result.summary))}</span><span>{esc(value_text(k, v, origin))}</span></div>"
        )
    return f'<div class="kv">{"".join(cells)}</div>' + "".join(parts)


GRID_KEYS = 6  # a summary dict of more keys than this is a table of its own


def _is_record(v: Any) -> bool:
    return isinstance(v, dict) and (len(v) > GRID_KEYS or any(isinstance(x, dict) for x in v.values()))


def _flat(d: dict, head: str = "") -> list[tuple[str, str, Any]]:
    """(shown name, key for formatting, value) of every leaf of a nested dict, nested names joined by a space."""
    out = []
    for k, v in d.items():
        name = f"{head} {label_of(str(k), d)}".strip()
        out += _flat(v, name) if isinstance(v, dict) else [(name, str(k), v)]
    return out


def record_html(title: str, d: dict, origin=None) -> str:
    """A summary part that is a record (e.g. ``ranks``: ranks, clock, steps, the straggler …) as a two-column table,
    each value formatted as the summary formats its key."""
    rows = "".join(
        f"<tr><th>{esc(name)}</th><td class=n>{esc(value_text(key, v, origin))}</td></tr>" for name, key, v in _flat(d)
    )
    return f'<table class="record"><caption>{esc(title)}</caption>{rows}</table>'


def table_html(name: str, df: pd.DataFrame, origin=None, *, rows: int = MAX_ROWS, more: str | None = None) -> str:
    df = display_frame(df)
    shown = df.head(rows)
    records = table_rows(shown)
    cols = [column(c, [r.get(c) for r in records], origin) for c in shown.columns]
    bad_rows = "ok" in shown.columns
    head = "".join(f"<th>{esc(c.header)}</th>" for c in cols)
    body = []
    for r in records:
        cls = ' class="bad"' if bad_rows and r.get("ok") is False else ""
        tds = []
        for c in cols:
            v = r.get(c.name)
            raw = plain_value(v)
            sort = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else c.fmt(v)
            tds.append(f'<td{" class=n" if c.numeric else ""} data-v="{esc(sort)}">{esc(c.fmt(v))}</td>')
        body.append(f"<tr{cls}>{''.join(tds)}</tr>")
    note = (
        ""
        if len(df) <= rows
        else (
            f'<p class="note">the first {rows:,} of {len(df):,} rows; '
            f"{more or 'the JSON sidecar (or -f json) holds every row'}</p>"
        )
    )
    return (
        f'<table class="sortable" id="t-{esc(name)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{note}"
    )
