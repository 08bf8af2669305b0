"""The layers (or an annotation's blocks) of the median step on the page: a column per layer in the order they ran,
the layer types by cost, and every layer as a table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...result import Result
from ..colors import picture_colors
from .svg import CHART_W, legend
from .tables import esc, table_html
from ..human import origin_of


def layer_section(result: Result) -> tuple[str, str, str] | None:
    """The layers (or an annotation's blocks) of the median step: a column per layer in the order they ran, its
    height the layer's wall, coloured by layer type; then a table of the layer types by cost and one of every
    layer. From the report's timeline lane of layers or blocks and, for automatic layers, its layers table."""
    t, s = result.tables, result.summary
    tl = t.get("timeline")
    if tl is None or not len(tl) or not {"lane", "label", "start_ns", "end_ns"} <= set(tl.columns):
        return None
    lane = "layers" if (tl["lane"] == "layers").any() else "blocks" if (tl["lane"] == "blocks").any() else None
    if lane is None:
        return None
    step = s.get("timeline_step")
    rows = tl[tl["lane"] == lane].sort_values("start_ns", kind="stable")
    start = rows["start_ns"].to_numpy(np.int64)
    wall = rows["end_ns"].to_numpy(np.int64) - start
    kinds = rows["label"].astype(str).tolist()
    kernel_ns = kernels = None
    lay = t.get("layers")
    if lane == "layers" and lay is not None and len(lay) and {"step", "start_ns", "kernel_ns"} <= set(lay.columns):
        mine = lay[lay["step"] == step].set_index("start_ns")
        kernel_ns = mine["kernel_ns"].reindex(start).to_numpy(float)
        kernels = mine["kernels"].reindex(start).to_numpy(float) if "kernels" in mine.columns else None
    word = "layer" if lane == "layers" else "block"
    s0 = int(tl["start_ns"].min())
    table = pd.DataFrame(
        {word: np.arange(len(rows)), f"{word}_type": kinds, "start_ms": (start - s0) / 1e6, "wall_ms": wall / 1e6}
    )
    if kernel_ns is not None:
        table["kernel_ms"] = kernel_ns / 1e6
        if kernels is not None:
            table["kernels"] = pd.array(kernels, dtype="Int64") if np.isfinite(kernels).all() else kernels
    by_type = (
        table.groupby(f"{word}_type", sort=False)
        .agg(
            **{
                f"{word}s": (word, "size"),
                "wall_ms": ("wall_ms", "sum"),
                **({"kernel_ms": ("kernel_ms", "sum")} if "kernel_ms" in table else {}),
            }
        )
        .sort_values("wall_ms", ascending=False)
        .reset_index()
    )
    bt = t.get("block_types")
    if (
        "kernel_ms" not in by_type
        and lane == "blocks"
        and bt is not None
        and len(bt)
        and {"step", "block_type", "kernel_ns"} <= set(bt.columns)
    ):  # the annotation's kernel time per block type
        k = bt[bt["step"] == step].groupby("block_type")["kernel_ns"].sum() / 1e6
        by_type["kernel_ms"] = by_type[f"{word}_type"].map(k).astype(float)
    by_type.insert(3, "wall_pct", by_type["wall_ms"] / max(float(table["wall_ms"].sum()), 1e-12) * 100)
    by_type["mean_wall_ms"] = by_type["wall_ms"] / by_type[f"{word}s"]
    colors = picture_colors(by_type[f"{word}_type"].tolist())
    n = len(table)
    label_w, plot_h, top_pad = 50, 200, 10
    plot_w = CHART_W - label_w - 10
    cw = plot_w / max(n, 1)
    top = float(table["wall_ms"].max()) or 1.0
    out = [
        f'<svg class="layers" viewBox="0 0 {CHART_W} {plot_h + 40}" width="{CHART_W}" height="{plot_h + 40}" '
        'role="img">'
    ]
    for k in range(5):
        y = top_pad + plot_h - k / 4 * plot_h
        out.append(
            f'<line x1="{label_w}" x2="{CHART_W - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{label_w - 4}" y="{y + 4:.1f}" text-anchor="end">{top * k / 4:,.2f}</text>'
        )
    for i, (kind, w) in enumerate(zip(kinds, table["wall_ms"].tolist())):
        hh = max(w / top * plot_h, 0.5)
        extra = (
            f", kernels {table['kernel_ms'].iat[i]:,.3f} ms"
            if "kernel_ms" in table and np.isfinite(table["kernel_ms"].iat[i])
            else ""
        )
        out.append(
            f'<rect x="{label_w + i * cw:.2f}" y="{top_pad + plot_h - hh:.2f}" width="{max(cw * 0.85, 0.5):.2f}"'
            f' height="{hh:.2f}" fill="{colors[kind]}"><title>{word} {i}: {esc(kind)} · wall {w:,.3f} ms'
            f"{extra}</title></rect>"
        )
    tick_every = max(1, math.ceil(n / 20))
    for i in range(0, n, tick_every):
        out.append(
            f'<text x="{label_w + (i + 0.42) * cw:.1f}" y="{top_pad + plot_h + 14}" text-anchor="middle">{i}</text>'
        )
    out.append(
        f'<text x="{label_w - 4}" y="{top_pad + plot_h + 14}" text-anchor="end">{word}</text>'
        f'<text x="4" y="{top_pad - 1}">ms</text></svg>'
    )
    origin = origin_of(result)
    html_ = (
        "".join(out)
        + legend(by_type[f"{word}_type"].tolist(), colors)
        + f"<p><b>{word.capitalize()} types by cost</b></p>"
        + table_html(f"{word}_types_step", by_type, origin)
        + f"<details><summary>every {word} of step {step} ({n:,} rows)</summary>"
        + table_html(f"{word}s_step", table, origin)
        + "</details>"
    )
    note = (
        f"a column per {word} of step {step} in the order they ran, its height the {word}'s wall (from its start"
        f" to the next {word}'s), coloured by {word} type"
        + ("; kernel ms: the kernel time inside it, summed over every stream" if kernel_ns is not None else "")
        + "; hover a column for its numbers"
    )
    return f"{word.capitalize()}s of step {step} (the median step)", html_, note
