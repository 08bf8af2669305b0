"""The page's plain-SVG pictures made of bars: a legend, horizontal stacked bars (at most ``MAX_BARS``), rows
sampled evenly for a picture of many steps, and the memory ledger's waterfall."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from ..colors import color_of, picture_colors
from .tables import esc
from ..ledger_layout import ledger_bars

MAX_BARS = 60
CHART_W = 900


def legend(names: Iterable[str], colors: dict[str, str] | None = None) -> str:
    colors = colors or {}
    return (
        '<div class="legend">'
        + "".join(
            f'<span><i style="background:{colors.get(n) or color_of(n)}"></i>{esc(n)}</span>'
            for n in dict.fromkeys(names)
        )
        + "</div>"
    )


def stacked_bars(rows: list[tuple[str, list[tuple[str, float]]]], unit: str, div: float) -> str:
    """One horizontal bar per row, its parts stacked in order (values in base units ÷ ``div`` = ``unit``); beyond
    ``MAX_BARS`` rows the first ones, with a note that says how many were left out (``evenly`` samples instead)."""
    total_rows = len(rows)
    rows = rows[:MAX_BARS]
    if not rows:
        return ""
    cut = (
        (
            f'<p class="note">the first {len(rows):,} of {total_rows:,} bars drawn; the table below and the JSON sidecar'
            " hold every one</p>"
        )
        if total_rows > len(rows)
        else ""
    )
    top = max(sum(max(v, 0) for _, v in parts) for _, parts in rows) or 1.0
    colors = picture_colors(n for _, parts in rows for n, _ in parts)
    label_w = int(min(max(170, 6.6 * max(len(str(label)) for label, _ in rows) + 12), 420))  # the labels fit
    bar_h, gap = 18, 6
    plot_w = CHART_W - label_w - 90
    h = len(rows) * (bar_h + gap) + 10
    out = [f'<svg viewBox="0 0 {CHART_W} {h}" width="{CHART_W}" height="{h}" role="img">']
    for i, (label, parts) in enumerate(rows):
        y = 5 + i * (bar_h + gap)
        out.append(f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end">{esc(label)}</text>')
        x = float(label_w)
        for name, v in parts:
            w = max(v, 0) / top * plot_w
            if w <= 0:
                continue
            out.append(
                f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{colors[str(name)]}">'
                f"<title>{esc(name)}: {v / div:,.3f} {unit}</title></rect>"
            )
            x += w
        total = sum(max(v, 0) for _, v in parts)
        out.append(f'<text x="{x + 4:.2f}" y="{y + 13}">{total / div:,.2f} {unit}</text>')
    out.append("</svg>")
    return "".join(out) + legend((str(n) for _, parts in rows for n, _ in parts), colors) + cut


def evenly(df: pd.DataFrame, n: int = MAX_BARS) -> tuple[pd.DataFrame, str]:
    """At most ``n`` rows of ``df``, evenly spaced through it (the first and the last among them), and the note that
    says so ("" when every row is there): a picture of 10^5 steps stays one screen and draws in milliseconds."""
    if len(df) <= n:
        return df, ""
    idx = np.unique(np.linspace(0, len(df) - 1, n).round().astype(np.int64))
    return df.iloc[idx], (
        f"sampled: {len(idx):,} of {len(df):,} rows drawn, evenly spaced from the first to the last"
        " (the table below and the JSON sidecar hold every one)"
    )


def ledger_waterfall_svg(rows: dict[str, float]) -> str:
    """Usable memory falling by each fixed-overhead row, then the state pools filling what is left (the same bars as
    ``tracekit plot ledger``: :func:`tracekit.render.ledger_layout.ledger_bars`)."""
    if rows.get("usable_gib") is None:
        return ""
    bars, level = ledger_bars(rows)
    top = max(b + v for _, b, v in bars) or 1.0
    colors = picture_colors(name for name, _, _ in bars)
    h, base, bw = 360, 250, max(24, (CHART_W - 80) // max(len(bars), 1) - 10)
    out = [f'<svg viewBox="0 0 {CHART_W} {h}" width="{CHART_W}" height="{h}" role="img">']
    for i, (name, b, v) in enumerate(bars):
        x = 60 + i * (bw + 10)
        y = base - (b + v) / top * 230
        hh = max(v / top * 230, 0.5)
        out.append(
            f'<rect x="{x}" y="{y:.2f}" width="{bw}" height="{hh:.2f}" fill="{colors[name]}">'
            f"<title>{esc(name)}: {v:,.2f} GiB</title></rect>"
        )
        out.append(f'<text x="{x + bw / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle">{v:,.1f}</text>')
        out.append(
            f'<text transform="translate({x + bw / 2:.1f},{base + 12}) rotate(-35)" text-anchor="end" '
            f'font-size="10">{esc(name)}</text>'
        )
    ly = base - level / top * 230
    out.append(f'<line x1="55" x2="{CHART_W - 10}" y1="{ly:.1f}" y2="{ly:.1f}" stroke="#000" stroke-dasharray="4 3"/>')
    out.append(f'<text x="60" y="{ly - 4:.1f}">{level:,.1f} GiB left for the state pools</text></svg>')
    return "".join(out)
