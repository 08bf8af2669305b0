"""The pictures a result's tables allow on the page: where the median step's wall clock goes, the wall
decomposition per step, kernel time per block type, the step timeline, the memory ledger, step time per
concurrency of two deployments and the decomposition per operating point of a sweep."""

from __future__ import annotations

import pandas as pd

from ...result import Result
from .svg import evenly, ledger_waterfall_svg, stacked_bars
from .tables import num
from .timeline import step_timeline_svg
from ..human import ag_measures, display_frame, glossary


def _wall_rows(df: pd.DataFrame) -> list[tuple[str, list[tuple[str, float]]]]:
    cols = {
        p: pd.to_numeric(df[f"{p}_ns"], errors="coerce").fillna(0).to_numpy(float).tolist()
        for p in ("busy", "ag_only", "idle")
    }
    return [(f"step {int(st)}", [(p, cols[p][i]) for p in cols]) for i, st in enumerate(df["step"].tolist())]


def one_step_picture(result: Result) -> tuple[str, str, str] | None:
    """Where the median step's wall clock goes (the one-step table, by kernel category): a bar per category, the
    costliest first, each labelled with its share of the wall."""
    one, s = result.tables.get("one_step"), result.summary
    if one is None or not len(one) or not {"step", "group_by", "name", "wall_ns"} <= set(one.columns):
        return None
    step = s.get("timeline_step", int(one["step"].min()))
    cat = one[(one["step"] == step) & (one["group_by"] == "category")].sort_values("wall_ns", ascending=False)
    if not len(cat):
        return None
    total = float(pd.to_numeric(cat["wall_ns"], errors="coerce").sum()) or 1.0
    rows = [
        (f"{r['name']} ({float(r['wall_ns']) / total * 100:.1f} %)", [(str(r["name"]), float(r["wall_ns"]))])
        for r in cat.to_dict("records")
    ]
    return (
        f"Where step {step}'s wall clock goes, by kernel category",
        stacked_bars(rows, "ms", 1e6),
        f"the median step ({total / 1e6:,.3f} ms): every ns of it charged to one category, so the bars sum exactly"
        " to the wall; the one_step table below has the same rows",
    )


def pictures(result: Result, *, page: bool = True) -> list[tuple[str, str, str]]:
    """(title, svg, note) for each picture this result's tables allow (the one-step picture and the layers come
    first on the page, from :func:`one_step_picture` and :func:`layer_section`)."""
    t, s, out = result.tables, result.summary, []
    wall = t.get("wall") if "wall" in t else (t.get("per_step") if result.command == "wall" else None)
    if wall is not None and len(wall) and {"busy_ns", "ag_only_ns", "idle_ns"} <= set(wall.columns):
        drawn, sampled = evenly(wall)
        out.append(
            (
                "Wall decomposition per step"
                + (f" ({len(drawn):,} of {len(wall):,} steps, sampled)" if sampled else ""),
                stacked_bars(_wall_rows(drawn), "ms", 1e6),
                "; ".join(
                    x for x in (sampled.replace("rows", "steps"), glossary(ag_measures(["ag_only", "idle"]))) if x
                ),
            )
        )
    bt = t.get("block_types")
    if bt is not None and len(bt) and {"block_type", "kernel_ns"} <= set(bt.columns) and "step" in bt.columns:
        med = bt.groupby("block_type")["kernel_ns"].median().sort_values(ascending=False)
        out.append(
            (
                "Kernel time per block type (median step)",
                stacked_bars([(str(k), [(str(k), float(v))]) for k, v in med.items()], "ms", 1e6),
                "kernel time summed over every stream, so it can exceed the wall where streams overlap",
            )
        )
    tl = t.get("timeline")
    if tl is not None and len(tl) and {"lane", "label", "start_ns", "end_ns"} <= set(tl.columns):
        out.append(
            (
                f"Step {s.get('timeline_step', '')} timeline (the median step)",
                step_timeline_svg(tl, zoom=page),
                "lanes: the step, its blocks or layers, each GPU stream by kernel category, the weight "
                "AllGathers and the exposed AllGather time (red); hover for names and totals"
                + ("; zoom with the wheel or the buttons, drag to pan" if page else ""),
            )
        )
    led = t.get("ledger")
    if led is not None and len(led) and {"row", "value"} <= set(led.columns):
        rows = {str(r["row"]): num(r["value"]) for _, r in led.iterrows() if num(r["value"]) is not None}
        svg = ledger_waterfall_svg(rows)
        if svg:
            out.append(("Memory ledger (GiB per GPU)", svg, "from the launch log: tracekit ledger LOG"))
    steps = t.get("steps")
    if (
        result.command == "compare"
        and steps is not None
        and len(steps)
        and {"deployment", "concurrency", "median_wall_ns"} <= set(steps.columns)
    ):
        rows = [
            (f"{r['deployment']} · conc {int(r['concurrency'])}", [(str(r["deployment"]), float(r["median_wall_ns"]))])
            for _, r in steps.sort_values(["concurrency", "deployment"]).iterrows()
        ]
        out.append(("Median step time per instance concurrency", stacked_bars(rows, "ms", 1e6), ""))
    sweep = t.get("sweep")
    if sweep is not None and len(sweep) and {"median_busy_ns", "median_ag_only_ns", "median_idle_ns"} <= set(sweep):
        sw = display_frame(sweep)
        rows = [
            (
                " ".join(str(r[k]) for k in ("deployment", "bs", "context") if k in sw.columns),
                [(p, float(r[f"median_{p}_ns"] or 0)) for p in ("busy", "ag_only", "idle")],
            )
            for _, r in sw.iterrows()
        ]
        out.append(("Median step per operating point", stacked_bars(rows, "ms", 1e6), ""))
    return [x for x in out if x[1]]
