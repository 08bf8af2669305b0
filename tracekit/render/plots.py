"""Pictures of the analyses (matplotlib; docs/export.md, "Plots").

Each ``*_figure`` function takes plain tables and returns a :class:`matplotlib.figure.Figure` built
without pyplot (no global state, no GUI backend, nothing shown); :func:`save_figure` writes PNG or SVG.
What the per-batch-size plots draw comes from :mod:`tracekit.analyses.fleet.plot_data` (a renderer runs no analysis).
matplotlib is imported only when a figure is made, so ``import tracekit`` stays light.

Per-bs plots draw one stacked bar per trace: **the median step** — the step whose wall is the median
(the lower one of the two middle steps for an even count) — so the stacked parts add up to a step that
happened. Traces of one deployment and bs (several ranks, say) are drawn side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..errors import InputError, UsageError, check_argument
from .colors import color_of, picture_colors
from .ledger_layout import LEDGER_POOLS, LEDGER_STEPS, ledger_bars

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

IMAGE_FORMATS = ("png", "svg")
PART_COLORS = {p: color_of(p) for p in ("busy", "ag_only", "idle")}
PART_LABELS = {"busy": "busy (compute, comm, other copies)", "ag_only": "only AllGather copies", "idle": "idle"}
EXPOSED_COLOR = color_of("exposed")
NO_BLOCK = "(no block)"
_HATCHES = ["", "//", "..", "xx", "\\\\", "oo"]


# --------------------------------------------------------------------------- figures


def _literal(fig: Figure) -> Figure:
    """Every text of ``fig`` drawn as written: a block type or kernel name with ``$`` in it is a name, not
    matplotlib mathtext (which would render it as a formula, or fail on an unbalanced ``$``)."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        t.set_parse_math(False)
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None:
            for t in leg.get_texts():
                t.set_parse_math(False)
    for leg in fig.legends:
        for t in leg.get_texts():
            t.set_parse_math(False)
    return fig


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise InputError(f"plots need matplotlib, which is not installed ({exc}); pip install matplotlib") from None

    return Figure(figsize=(width, height), layout="constrained")


def type_colors(types) -> dict[str, Any]:
    """The colour of each type in one figure: the same for a name in every plot and in the HTML report
    (:func:`tracekit.render.colors.color_of`) unless it would come too close to a colour already in this figure, then
    one far enough from all (:func:`tracekit.render.colors.picture_colors`; categories and ``(no block)`` never
    move)."""
    return dict(picture_colors([str(t) for t in types], fixed=[NO_BLOCK]))


def _x_keys(points: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """The x category of each row: 'bs N' when every trace has a bs, else the trace file name."""
    if len(points) and points["bs"].notna().all():
        key = points["bs"].astype(int)
        order = sorted(key.unique())
        return key.map(lambda b: f"bs {b}"), [f"bs {b}" for b in order]
    key = points["trace"].map(lambda p: Path(p).name.split(".")[0])
    return key, list(dict.fromkeys(key))


def stacked_bars_figure(
    points: pd.DataFrame,
    *,
    stack: str,
    value: str,
    title: str,
    ylabel: str = "ms per step",
    colors: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    order: list[str] | None = None,
) -> Figure:
    """Bars per x category (bs) and deployment (side by side, hatched), stacked by ``stack``.

    ``points`` has columns deployment, bs, trace, ``stack`` and ``value`` (ns); a bar per (x, deployment,
    trace), drawn in ms."""
    pts = points.copy()
    xkey, xs = _x_keys(pts)
    pts["_x"] = xkey.to_numpy()
    deployments = list(dict.fromkeys(pts["deployment"]))
    stacks = order or sorted(pts[stack].astype(str).unique())
    colors = dict(colors or type_colors(stacks))
    bars = pts.groupby(["_x", "deployment", "trace"], sort=False)
    per_x = {x: [k for k in bars.groups if k[0] == x] for x in xs}
    fig = _figure(max(7.5, 2.5 + 0.9 * sum(len(v) for v in per_x.values())), 5.0)
    ax = fig.add_subplot()
    several = any(len(v) > 1 for v in per_x.values())
    ticks, tick_labels, top = [], [], 0.0
    for i, x in enumerate(xs):
        keys = sorted(per_x[x], key=lambda k: (deployments.index(k[1]), k[2]))
        width = 0.8 / max(len(keys), 1)
        for j, key in enumerate(keys):
            pos = i - 0.4 + width * (j + 0.5)
            g = bars.get_group(key)
            vals = g.groupby(g[stack].astype(str))[value].sum()
            bottom = 0.0
            hatch = _HATCHES[deployments.index(key[1]) % len(_HATCHES)] if len(deployments) > 1 else ""
            for s in stacks:
                ms = float(vals.get(s, 0)) / 1e6
                if ms > 0:
                    ax.bar(
                        pos,
                        ms,
                        width * 0.92,
                        bottom=bottom,
                        color=colors.get(s, "#999999"),
                        hatch=hatch,
                        edgecolor="white",
                        linewidth=0.5,
                    )
                bottom += ms
            ax.text(pos, bottom, f"{bottom:.2f}", ha="center", va="bottom", fontsize=8)
            top = max(top, bottom)
            if several:
                ticks.append(pos)
                tick_labels.append(key[1] if len(deployments) > 1 else Path(key[2]).name.split(".")[0])
    if several:
        ax.set_xticks(ticks, tick_labels, fontsize=8, rotation=20 if len(ticks) > 6 else 0)
        sec = ax.secondary_xaxis(-0.12)
        sec.set_xticks(range(len(xs)), xs)
        sec.tick_params(length=0)
        sec.spines["bottom"].set_visible(False)
    else:  # one bar per x: name its deployment under the bs when there are several
        names = [f"{x}\n{per_x[x][0][1]}" if len(deployments) > 1 else x for x in xs]
        ax.set_xticks(range(len(xs)), names)
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_ylim(0, top * 1.12 if top > 0 else 1)
    ax.set_ylabel(ylabel)
    fig.suptitle(title)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    from matplotlib.patches import Patch

    # the legend lists the stack top-down, as the bars show it
    handles = [Patch(facecolor=colors.get(s, "#999999"), label=(labels or {}).get(s, s)) for s in reversed(stacks)]
    if len(deployments) > 1:
        handles += [
            Patch(facecolor="white", edgecolor="black", hatch=_HATCHES[k % len(_HATCHES)], label=d)
            for k, d in enumerate(deployments)
        ]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _literal(fig)


def decomposition_figure(points: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Stacked bars per bs: the median step's busy, only-AllGather and idle time (:func:`decomposition_points`)."""
    long = points.melt(
        id_vars=["deployment", "bs", "trace", "step"],
        value_vars=[f"{p}_ns" for p in PART_COLORS],
        var_name="part",
        value_name="ns",
    )
    long["part"] = long["part"].str.removesuffix("_ns")
    return stacked_bars_figure(
        long,
        stack="part",
        value="ns",
        order=list(PART_COLORS),
        colors=PART_COLORS,
        labels=PART_LABELS,
        title=title or "Decode step wall: busy / only AllGather / idle (median step)",
    )


def blocks_figure(points: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Stacked bars per bs: the median step's kernel time per block type (:func:`blocks_points`)."""
    order = None
    if "first_block" in points:  # stack in the order blocks run: the head at the bottom, the tail on top
        order = list(points.groupby("block_type")["first_block"].min().sort_values(kind="stable").index)
    return stacked_bars_figure(
        points,
        stack="block_type",
        value="kernel_ns",
        ylabel="kernel ms per step (all streams)",
        order=order,
        colors=type_colors(points["block_type"]),
        title=title or "Kernel time per block type (median step)",
    )


def exposure_figure(points: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Stacked bars per bs: the median step's exposed AllGather time per type (:func:`exposure_points`)."""
    return stacked_bars_figure(
        points,
        stack="type",
        value="exposed_ns",
        ylabel="exposed ms per step",
        title=title or "Exposed AllGather time per type (median step)",
    )


def timeline_figure(
    tables: Mapping[str, pd.DataFrame],
    *,
    step: int,
    main_stream: tuple[int, int] | None = None,
    title: str | None = None,
) -> Figure:
    """One step: a row per GPU stream with its kernels and copies coloured by block type (copies paler), the
    blocks on top, each AllGather outlined on its stream, exposed AllGather time as red bands and a row.

    ``tables`` are those of :func:`tracekit.exporters.collect`: events (annotated), steps, blocks, allgathers,
    exposed."""
    check_argument(tables, "tables", "a mapping of table names to DataFrames (tracekit.collect)", Mapping)
    steps = tables["steps"]
    row = steps[steps["step"] == step]
    if row.empty:
        raise UsageError(f"no step {step}; the trace has steps {int(steps['step'].min())}..{int(steps['step'].max())}")
    s0, s1 = int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0])
    ev = tables["events"]
    gpu = ev[ev["kind"].isin(("kernel", "memcpy", "memset")) & (ev["start_ns"] >= s0) & (ev["start_ns"] < s1)]
    lanes = sorted({(int(d), int(st)) for d, st in zip(gpu["device"], gpu["stream"])})
    blocks = tables["blocks"]
    blocks = blocks[blocks["step"] == step]
    btype = gpu["block_type"].astype(object).where(gpu["block_type"].notna(), NO_BLOCK).astype(str)
    colors = type_colors(list(blocks["block_type"]) + list(btype))
    n_rows = len(lanes) + 2
    fig = _figure(14.0, 1.6 + 0.55 * n_rows)
    ax = fig.add_subplot()
    ms = lambda a: (np.asarray(a, dtype=np.int64) - s0) / 1e6
    y_blocks, y_exposed = 0, n_rows - 1
    lane_y = {lane: i + 1 for i, lane in enumerate(lanes)}
    for t, g in blocks.groupby("block_type", sort=True):
        ax.broken_barh(
            list(zip(ms(g["start_ns"]), (g["end_ns"] - g["start_ns"]) / 1e6)),
            (y_blocks - 0.4, 0.8),
            facecolors=colors[str(t)],
            edgecolors="white",
            linewidth=0.4,
        )
    span_ms = (s1 - s0) / 1e6
    for r in blocks.itertuples(index=False):
        w = (r.end_ns - r.start_ns) / 1e6
        if w > span_ms * 0.025:
            ax.text(
                ms([r.start_ns])[0] + w / 2,
                y_blocks,
                str(r.block_type),
                ha="center",
                va="center",
                fontsize=6,
                color="white",
                clip_on=True,
            )
    is_copy = (gpu["kind"] != "kernel").to_numpy()
    for (lane_key, t, copy), g in gpu.assign(
        _t=btype.to_numpy(), _c=is_copy, _lane=[lane_y[(int(d), int(s))] for d, s in zip(gpu["device"], gpu["stream"])]
    ).groupby(["_lane", "_t", "_c"], sort=True):
        ax.broken_barh(
            list(zip(ms(g["start_ns"]), np.maximum(g["dur_ns"].to_numpy(), 1) / 1e6)),
            (lane_key - 0.35, 0.7),
            facecolors=colors[t],
            alpha=0.5 if copy else 1.0,
            linewidth=0,
        )
    ags = tables.get("allgathers")
    if ags is not None and len(ags):
        ags = ags[(ags["step"] == step)]
        for (d, st), g in ags.groupby(["device", "stream"]):
            y = lane_y.get((int(d), int(st)))
            if y is not None:
                ax.broken_barh(
                    list(zip(ms(g["start_ns"]), (g["end_ns"] - g["start_ns"]) / 1e6)),
                    (y - 0.45, 0.9),
                    facecolors="none",
                    edgecolors="black",
                    linewidth=0.6,
                )
    exp = tables.get("exposed")
    exposed_ms = 0.0
    if exp is not None and len(exp):
        exp = exp[(exp["start_ns"] < s1) & (exp["end_ns"] > s0)]
        xr = list(zip(ms(exp["start_ns"]), (exp["end_ns"] - exp["start_ns"]) / 1e6))
        exposed_ms = float((exp["end_ns"] - exp["start_ns"]).sum()) / 1e6
        ax.broken_barh(xr, (y_exposed - 0.4, 0.8), facecolors=EXPOSED_COLOR, linewidth=0)
        ax.broken_barh(xr, (y_blocks - 0.5, n_rows), facecolors=EXPOSED_COLOR, alpha=0.12, linewidth=0)
    names = (
        ["blocks"]
        + [f"dev {d} stream {s}" + (" (main)" if (d, s) == tuple(main_stream or ()) else "") for d, s in lanes]
        + ["exposed AllGather"]
    )
    ax.set_yticks(range(n_rows), names, fontsize=8)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_xlim(0, span_ms)
    ax.set_xlabel(f"ms from the start of step {step}")
    ax.set_title(title or f"Step {step}: {span_ms:.2f} ms wall, {exposed_ms:.2f} ms exposed AllGather time")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    from matplotlib.patches import Patch

    shown = sorted({str(t) for t in blocks["block_type"]} | set(btype))
    handles = [Patch(facecolor=colors[t], label=t) for t in shown]
    handles += [
        Patch(facecolor="none", edgecolor="black", label="AllGather span"),
        Patch(facecolor=EXPOSED_COLOR, label="exposed AllGather"),
        Patch(facecolor="#777777", alpha=0.5, label="copies: paler"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    return _literal(fig)


def ledger_figure(ledgers: Mapping[str, Mapping[str, float]], *, title: str | None = None) -> Figure:
    """Waterfalls of per-GPU memory, one panel per launch log side by side: usable memory falls by each fixed
    overhead row to what is left, which the state pools then fill. ``ledgers`` maps a label to its
    ledger rows (row name → GiB)."""
    check_argument(ledgers, "ledgers", "a mapping of labels to ledger rows (row name to GiB)", Mapping)
    labels = list(ledgers)
    fig = _figure(5.2 * len(labels) + 1.0, 5.0)
    axes = fig.subplots(1, len(labels), sharey=True, squeeze=False)[0]
    colors = type_colors([n for _, n in LEDGER_STEPS + LEDGER_POOLS])
    for ax, label in zip(axes, labels):
        bars, level = ledger_bars(ledgers[label])
        names, bottoms, heights = (list(x) for x in zip(*bars))
        cols = ["#4C72B0"] + [colors[n] for n in names[1:]]
        x = range(len(names))
        ax.bar(x, heights, bottom=bottoms, color=cols, edgecolor="white", linewidth=0.6)
        for i, (b, h) in enumerate(zip(bottoms, heights)):
            ax.text(i, b + h, f"{h:.1f}", ha="center", va="bottom", fontsize=7)
        ax.axhline(level, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(list(x), names, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{label}: {level:.1f} GiB left for state pools (dashed)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes[0].set_ylabel("GiB per GPU")
    fig.suptitle(title or "Where every GiB went (launch-log ledger)")
    return _literal(fig)


def save_figure(fig: Figure, path: str | Path, *, dpi: int = 150) -> dict[str, Any]:
    """Write ``fig`` as PNG or SVG (from the suffix); returns path, format, bytes and size in pixels."""
    from matplotlib.figure import Figure as MplFigure

    check_argument(fig, "fig", "a matplotlib Figure (a tracekit plot function's)", MplFigure)
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in IMAGE_FORMATS:
        raise UsageError(
            f"{path}: plots are written as .png or .svg, not {path.suffix or 'a file without suffix'};"
            " name the output e.g. plot.png"
        )
    from .files import write_file

    # whole or not at all: drawn into a temporary file beside it, renamed into place; its folder must exist
    write_file(path, lambda fh: fig.savefig(fh, format=fmt, dpi=dpi), what="picture")
    w, h = fig.get_size_inches()
    return {
        "path": str(path),
        "format": fmt,
        "bytes": path.stat().st_size,
        "width_px": int(round(w * dpi)),
        "height_px": int(round(h * dpi)),
    }
