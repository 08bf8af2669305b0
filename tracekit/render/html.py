"""Any result as one self-contained HTML page (``-f html``): no network — styles, the sorting script and every
picture (plain SVG) are inline, so the file opens offline and from a mail attachment.

What a page holds, in order: the findings; for every rank of a run (``imbalance``) the rank × step picture of waits
with the summary's sentence; the headline numbers; the pictures its tables allow (the wall
decomposition per step, the one-step table, kernel time per block type, the step timeline, the memory ledger
waterfall, step time per concurrency for two deployments, the decomposition per operating point of a sweep);
every table (sortable, the first ``MAX_ROWS`` rows — the JSON sidecar holds all); the warnings and the step health
checks; and how every number was obtained (command, tracekit version, parameters, inputs).
"""
from __future__ import annotations

import html
import json
import math
import re
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .._version import __version__
from ..result import Result, _scalar, shown_obj, shown_path, table_rows, utf8_text
from .colors import color_of
from .human import ag_measures, column, display_frame, glossary, label_of, origin_of, safe_text, value_text

MAX_ROWS = 500  # rows of one table on the page; the JSON sidecar (and -f json) has every row
MAX_BARS = 60
CHART_W = 900

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#555;margin:0 0 16px} .kv{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:2px 24px}
.kv div{display:flex;justify-content:space-between;border-bottom:1px dotted #ddd;padding:2px 0}
.kv span:last-child{font-variant-numeric:tabular-nums;text-align:right;margin-left:12px}
.finding{background:#fff;border:1px solid #ddd;border-left:4px solid #4C72B0;border-radius:4px;padding:8px 12px;margin:8px 0}
.finding.minor{border-left-color:#bbb;opacity:.85} .finding h3{font-size:15px;margin:0 0 4px}
.finding .gain{float:right;font-variant-numeric:tabular-nums;color:#333} .finding p{margin:2px 0}
.finding code,.prov code{background:#f0f0f0;padding:1px 4px;border-radius:3px;font-size:12px}
.tag{display:inline-block;font-size:11px;padding:0 6px;border-radius:8px;background:#eef;margin-left:6px}
table{border-collapse:collapse;background:#fff;font-size:12.5px;margin:6px 0 2px;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #e2e2e2;padding:3px 7px;white-space:nowrap} th{background:#f3f3f3;cursor:pointer;position:sticky;top:0}
td.n{text-align:right;font-variant-numeric:tabular-nums} tr.bad td{background:#fde8e8}
th.asc::after{content:" ▲"} th.desc::after{content:" ▼"} .note{color:#666;font-size:12px;margin:2px 0 10px}
details{margin:6px 0} summary{cursor:pointer;font-weight:600} .warn{color:#8a4b00}
svg{background:#fff;border:1px solid #e2e2e2;border-radius:4px;max-width:100%;height:auto}
svg text{font:11px system-ui,sans-serif;fill:#333} .legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.lead{font-size:15px;margin:4px 0 8px}
"""

SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
    var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows),asc=!th.classList.contains('asc');
    t.querySelectorAll('th').forEach(function(h){h.classList.remove('asc','desc')});th.classList.add(asc?'asc':'desc');
    rows.sort(function(a,b){var x=a.cells[i].getAttribute('data-v'),y=b.cells[i].getAttribute('data-v');
      var nx=parseFloat(x),ny=parseFloat(y),r;
      if(!isNaN(nx)&&!isNaN(ny)){r=nx-ny}else{r=(x||'').localeCompare(y||'')}return asc?r:-r});
    rows.forEach(function(r){body.appendChild(r)});});});});
"""


def esc(v: Any) -> str:
    """Text for HTML: control characters made visible (``safe_text``), then escaped — a kernel name cannot inject
    markup or script."""
    return html.escape(safe_text(str(v)), quote=True)


def _num(v: Any) -> float | None:
    v = _scalar(v)
    if isinstance(v, bool) or v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


# --------------------------------------------------------------------------- pictures (plain SVG)


def _legend(names: Iterable[str]) -> str:
    return '<div class="legend">' + "".join(f'<span><i style="background:{color_of(n)}"></i>{esc(n)}</span>'
                                            for n in dict.fromkeys(names)) + "</div>"


def stacked_bars(rows: list[tuple[str, list[tuple[str, float]]]], unit: str, div: float) -> str:
    """One horizontal bar per row, its parts stacked in order (values in base units ÷ ``div`` = ``unit``); beyond
    ``MAX_BARS`` rows the first ones, with a note that says how many were left out (``evenly`` samples instead)."""
    total_rows = len(rows)
    rows = rows[:MAX_BARS]
    if not rows:
        return ""
    cut = (f'<p class="note">the first {len(rows):,} of {total_rows:,} bars drawn; the table below and the JSON sidecar'
           ' hold every one</p>') if total_rows > len(rows) else ""
    top = max(sum(max(v, 0) for _, v in parts) for _, parts in rows) or 1.0
    label_w, bar_h, gap = 170, 18, 6
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
            out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{color_of(name)}">'
                       f'<title>{esc(name)}: {v / div:,.3f} {unit}</title></rect>')
            x += w
        total = sum(max(v, 0) for _, v in parts)
        out.append(f'<text x="{x + 4:.2f}" y="{y + 13}">{total / div:,.2f} {unit}</text>')
    out.append("</svg>")
    return "".join(out) + _legend(n for _, parts in rows for n, _ in parts) + cut


def _lane_color(lane: str, label: str) -> str:
    return color_of("exposed") if lane == "exposed" else color_of("step") if lane == "step" else color_of(label)


def step_timeline_svg(tl: pd.DataFrame) -> str:
    """The lanes of one step (tracekit.analyses.timeline): a row per lane, each interval a rectangle coloured by its
    label, exposed AllGather time red; hovering names it."""
    if tl.empty:
        return ""
    s0, s1 = int(tl["start_ns"].min()), int(tl["end_ns"].max())
    span = max(1, s1 - s0)
    lanes = list(dict.fromkeys(tl["lane"]))
    label_w, lane_h, gap = 110, 16, 4
    plot_w = CHART_W - label_w - 10
    h = len(lanes) * (lane_h + gap) + 30
    out = [f'<svg viewBox="0 0 {CHART_W} {h}" width="{CHART_W}" height="{h}" role="img">']
    for i, lane in enumerate(lanes):
        y = 4 + i * (lane_h + gap)
        out.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{esc(lane)}</text>')
        d = tl[tl["lane"] == lane]
        for label, g in d.groupby("label", sort=True):
            fill = _lane_color(lane, label)
            rects = []
            for a, b in zip(g["start_ns"].to_numpy(), g["end_ns"].to_numpy()):
                x = label_w + (int(a) - s0) / span * plot_w
                w = max((int(b) - int(a)) / span * plot_w, 0.3)
                rects.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{lane_h}"/>')
            total = int((g["end_ns"] - g["start_ns"]).sum())
            out.append(f'<g fill="{fill}"><title>{esc(lane)} · {esc(label)}: {len(g):,} interval(s), '
                       f'{total / 1e6:,.3f} ms</title>{"".join(rects)}</g>')
    axis_y = len(lanes) * (lane_h + gap) + 16
    for k in range(6):
        x = label_w + k / 5 * plot_w
        out.append(f'<text x="{x:.1f}" y="{axis_y}" text-anchor="middle">+{span * k / 5 / 1e6:,.1f} ms</text>')
    out.append("</svg>")
    labels = list(dict.fromkeys(tl.loc[~tl["lane"].isin(["exposed", "step"]), "label"]))
    return "".join(out) + _legend(labels[:40] + (["exposed"] if (tl["lane"] == "exposed").any() else []))


def ledger_waterfall_svg(rows: dict[str, float]) -> str:
    """Usable memory falling by each fixed-overhead row, then the state pools filling what is left (the same rows as
    ``tracekit plot ledger``)."""
    from .plots import LEDGER_POOLS, LEDGER_STEPS

    usable = rows.get("usable_gib")
    if usable is None:
        return ""
    bars = [("usable", 0.0, float(usable))]
    level = float(usable)
    for key, name in LEDGER_STEPS:
        v = rows.get(key)
        if v is None or not math.isfinite(float(v)):
            continue
        level -= float(v)
        bars.append((name, level, float(v)))
    bottom = 0.0
    for key, name in LEDGER_POOLS:
        v = rows.get(key)
        if v is None or not math.isfinite(float(v)):
            continue
        bars.append((name, bottom, float(v)))
        bottom += float(v)
    top = max(b + v for _, b, v in bars) or 1.0
    h, base, bw = 360, 250, max(24, (CHART_W - 80) // max(len(bars), 1) - 10)
    out = [f'<svg viewBox="0 0 {CHART_W} {h}" width="{CHART_W}" height="{h}" role="img">']
    for i, (name, b, v) in enumerate(bars):
        x = 60 + i * (bw + 10)
        y = base - (b + v) / top * 230
        hh = max(v / top * 230, 0.5)
        out.append(f'<rect x="{x}" y="{y:.2f}" width="{bw}" height="{hh:.2f}" fill="{color_of(name)}">'
                   f'<title>{esc(name)}: {v:,.2f} GiB</title></rect>')
        out.append(f'<text x="{x + bw / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle">{v:,.1f}</text>')
        out.append(f'<text transform="translate({x + bw / 2:.1f},{base + 12}) rotate(-35)" text-anchor="end" '
                   f'font-size="10">{esc(name)}</text>')
    ly = base - level / top * 230
    out.append(f'<line x1="55" x2="{CHART_W - 10}" y1="{ly:.1f}" y2="{ly:.1f}" stroke="#000" stroke-dasharray="4 3"/>')
    out.append(f'<text x="60" y="{ly - 4:.1f}">{level:,.1f} GiB left for the state pools</text></svg>')
    return "".join(out)


# --------------------------------------------------------------------------- the pictures a result's tables allow


def _wall_rows(df: pd.DataFrame) -> list[tuple[str, list[tuple[str, float]]]]:
    cols = {p: pd.to_numeric(df[f"{p}_ns"], errors="coerce").fillna(0).to_numpy(float).tolist()
            for p in ("busy", "ag_only", "idle")}
    return [(f"step {int(st)}", [(p, cols[p][i]) for p in cols]) for i, st in enumerate(df["step"].tolist())]


def evenly(df: pd.DataFrame, n: int = MAX_BARS) -> tuple[pd.DataFrame, str]:
    """At most ``n`` rows of ``df``, evenly spaced through it (the first and the last among them), and the note that
    says so ("" when every row is there): a picture of 10^5 steps stays one screen and draws in milliseconds."""
    if len(df) <= n:
        return df, ""
    idx = np.unique(np.linspace(0, len(df) - 1, n).round().astype(np.int64))
    return df.iloc[idx], (f"sampled: {len(idx):,} of {len(df):,} rows drawn, evenly spaced from the first to the last"
                          " (the table below and the JSON sidecar hold every one)")


def pictures(result: Result) -> list[tuple[str, str, str]]:
    """(title, svg, note) for each picture this result's tables allow."""
    t, s, out = result.tables, result.summary, []
    wall = t.get("wall") if "wall" in t else (t.get("per_step") if result.command == "wall" else None)
    if wall is not None and len(wall) and {"busy_ns", "ag_only_ns", "idle_ns"} <= set(wall.columns):
        drawn, sampled = evenly(wall)
        out.append(("Wall decomposition per step" + (f" ({len(drawn):,} of {len(wall):,} steps, sampled)" if sampled
                                                     else ""),
                    stacked_bars(_wall_rows(drawn), "ms", 1e6),
                    "; ".join(x for x in (sampled.replace("rows", "steps"), glossary(ag_measures(["ag_only", "idle"])))
                              if x)))
    one = t.get("one_step")
    if one is not None and len(one) and {"step", "group_by", "name", "wall_ns"} <= set(one.columns):
        step = s.get("timeline_step", int(one["step"].min()))
        cat = one[(one["step"] == step) & (one["group_by"] == "category")].sort_values("wall_ns", ascending=False)
        if len(cat):
            out.append((f"Where step {step}'s wall clock goes, by kernel category",
                        stacked_bars([(f"step {step}", [(str(r["name"]), float(r["wall_ns"])) for _, r in
                                                        cat.iterrows()])], "ms", 1e6),
                        "every ns of the step charged to one category; the parts sum exactly to the wall"))
    bt = t.get("block_types")
    if bt is not None and len(bt) and {"block_type", "kernel_ns"} <= set(bt.columns) and "step" in bt.columns:
        med = bt.groupby("block_type")["kernel_ns"].median().sort_values(ascending=False)
        out.append(("Kernel time per block type (median step)",
                    stacked_bars([(str(k), [(str(k), float(v))]) for k, v in med.items()], "ms", 1e6),
                    "kernel time summed over every stream, so it can exceed the wall where streams overlap"))
    tl = t.get("timeline")
    if tl is not None and len(tl) and {"lane", "label", "start_ns", "end_ns"} <= set(tl.columns):
        out.append((f"Step {s.get('timeline_step', '')} timeline (the median step)", step_timeline_svg(tl),
                    "lanes: the step, its blocks or layers, each GPU stream by kernel category, the weight "
                    "AllGathers and the exposed AllGather time (red); hover for names and totals"))
    led = t.get("ledger")
    if led is not None and len(led) and {"row", "value"} <= set(led.columns):
        rows = {str(r["row"]): _num(r["value"]) for _, r in led.iterrows() if _num(r["value"]) is not None}
        svg = ledger_waterfall_svg(rows)
        if svg:
            out.append(("Memory ledger (GiB per GPU)", svg, "from the launch log: tracekit ledger LOG"))
    steps = t.get("steps")
    if result.command == "compare" and steps is not None and len(steps) and \
            {"deployment", "concurrency", "median_wall_ns"} <= set(steps.columns):
        rows = [(f"{r['deployment']} · conc {int(r['concurrency'])}", [(str(r["deployment"]),
                                                                       float(r["median_wall_ns"]))])
                for _, r in steps.sort_values(["concurrency", "deployment"]).iterrows()]
        out.append(("Median step time per instance concurrency", stacked_bars(rows, "ms", 1e6), ""))
    sweep = t.get("sweep")
    if sweep is not None and len(sweep) and {"median_busy_ns", "median_ag_only_ns", "median_idle_ns"} <= set(sweep):
        sw = display_frame(sweep)
        rows = [(" ".join(str(r[k]) for k in ("deployment", "bs", "context") if k in sw.columns),
                 [(p, float(r[f"median_{p}_ns"] or 0)) for p in ("busy", "ag_only", "idle")]) for _, r in sw.iterrows()]
        out.append(("Median step per operating point", stacked_bars(rows, "ms", 1e6), ""))
    return [x for x in out if x[1]]


# --------------------------------------------------------------------------- every rank of a run: who waits when

MAX_CELLS = 64 * 200  # cells of the rank × step picture: 64 ranks × 200 steps, or more ranks and fewer steps
MAX_STEP_COLS = 200  # global steps drawn at most; beyond, evenly sampled (the first and the last among them)
MIN_STEP_COLS = 50   # steps drawn at least (when there are as many), however many ranks
MAX_RANK_ROWS = MAX_CELLS // MIN_STEP_COLS  # 256 ranks drawn in full; beyond, sampled (the stragglers first)
WAIT_HUE = "communication"  # the waits are spent inside collectives: their colour, light (no wait) to dark


def _rgb(hex_color: str) -> tuple[int, int, int]:
    h = hex_color.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def wait_color(t: float) -> str:
    """The sequential scale of waits: ``t`` in [0, 1] from a pale tint of the collectives' colour (``color_of``,
    tracekit/data/colors.json) through the colour itself to a dark shade — no wait is pale, never white (white is a
    rank-step not recorded)."""
    t = min(max(float(t), 0.0), 1.0)
    base = _rgb(color_of(WAIT_HUE))
    pale = tuple(255 - (255 - c) * 0.10 for c in base)
    dark = tuple(c * 0.45 for c in base)
    a, b, u = (pale, base, t / 0.6) if t <= 0.6 else (base, dark, (t - 0.6) / 0.4)
    return "#" + "".join(f"{int(round(x + (y - x) * u)):02X}" for x, y in zip(a, b))


def _even_idx(n: int, k: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, k).round().astype(np.int64)) if n > k else np.arange(n)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def imbalance_sentence(summary: dict) -> str:
    """The run in one sentence, from its summary: who was last how often, and the median imbalance per step."""
    imb = _num(summary.get("imbalance_ns_per_step"))
    tail = f"imbalance {imb / 1e6:,.3f} ms per step (median)" if imb is not None else "no imbalance measured"
    st = summary.get("straggler") if isinstance(summary.get("straggler"), dict) else None
    if st and st.get("rank") is not None:
        head = f"rank {st['rank']} was last in {int(st.get('times_last') or 0):,} of {int(st.get('of') or 0):,} collectives"
    else:
        head = "no rank was last: every collective was a tie"
    return f"{head}; {tail}"


def _absolute(p: str) -> bool:
    return p.startswith(("/", "\\", "~")) or bool(re.match(r"[A-Za-z]:[\\/]", p))


def _rank_names(ranks: pd.DataFrame | None) -> dict[int, str]:
    """rank → its file(s) as shown (``shown_path``): as the ranks table names it (relative to the run), an absolute
    path by its file name only (the page names no folder of the machine)."""
    out: dict[int, str] = {}
    if ranks is None or not {"rank", "file"} <= set(ranks.columns):
        return out
    for r, f in zip(ranks["rank"].tolist(), ranks["file"].tolist()):
        files = f if isinstance(f, (list, tuple, np.ndarray)) else [f]
        shown = [shown_path(x) for x in files if x is not None]
        out[int(r)] = ", ".join(x.replace("\\", "/").rsplit("/", 1)[-1] if _absolute(x) else x for x in shown)
    return out


def rank_step_waits(result: Result) -> tuple[str, str, str] | None:
    """(title, html, note) of the rank × step picture of an ``imbalance`` result: a row per rank, a column per global
    step, each cell coloured by the rank's wait in that step (``tables.steps.wait_ns``; no cell where the rank-step
    was not recorded whole), the straggler of each step (``tables.by_step.straggler``) marked with a ring, a scale in
    ms, a hover title on every cell and the summary's sentence above it. At most ``MAX_RANK_ROWS`` ×
    ``MAX_STEP_COLS`` cells: beyond, steps (and ranks) are sampled evenly and the title and note say so."""
    steps = result.tables.get("steps")
    if steps is None or not len(steps) or not {"step", "rank", "wait_ns"} <= set(steps.columns):
        return None
    by_step = result.tables.get("by_step")
    has_by = by_step is not None and len(by_step) > 0 and {"step", "straggler"} <= set(by_step.columns)
    all_steps = np.unique(np.concatenate([pd.to_numeric(steps["step"]).to_numpy(np.int64)]
                                         + ([pd.to_numeric(by_step["step"]).to_numpy(np.int64)] if has_by else [])))
    ranks_t = result.tables.get("ranks")
    rank_ids = [int(x) for x in steps["rank"].tolist()]
    if ranks_t is not None and "rank" in ranks_t.columns:
        rank_ids += [int(x) for x in ranks_t["rank"].tolist()]
    all_ranks = np.unique(np.asarray(rank_ids, dtype=np.int64))
    row_ranks = all_ranks
    if len(all_ranks) > MAX_RANK_ROWS:  # the ranks most often a step's straggler (a quarter), then evenly sampled
        often = (by_step["straggler"].dropna().astype(np.int64).value_counts().index.tolist()[:MAX_RANK_ROWS // 4]
                 if has_by else [])
        rest = np.setdiff1d(all_ranks, np.asarray(often, dtype=np.int64))
        pick = rest[_even_idx(len(rest), MAX_RANK_ROWS - len(often))]
        row_ranks = np.union1d(np.asarray(often, dtype=np.int64), pick)
    n_cols = min(MAX_STEP_COLS, max(MIN_STEP_COLS, MAX_CELLS // max(len(row_ranks), 1)))
    col_steps = all_steps[_even_idx(len(all_steps), n_cols)]
    stragglers: dict[int, int] = {}
    strag_info: dict[int, tuple] = {}
    if has_by:
        b = by_step[by_step["step"].isin(col_steps) & by_step["straggler"].notna()]
        for r in b.to_dict("records"):
            stragglers[int(r["step"])] = int(r["straggler"])
            strag_info[int(r["step"])] = (r.get("straggler_bs"), r.get("median_bs"), r.get("imbalance_ns"))
    d = steps[steps["step"].isin(col_steps) & steps["rank"].isin(row_ranks)]
    ns = pd.to_numeric(d["wait_ns"], errors="coerce").to_numpy(float)
    top = float(np.nanmax(ns)) if len(ns) and np.isfinite(ns).any() else 0.0
    top = top if top > 0 else 1.0
    col_of = {int(s): i for i, s in enumerate(col_steps.tolist())}
    row_of = {int(r): i for i, r in enumerate(row_ranks.tolist())}
    names = _rank_names(ranks_t)

    label_w, right, top_pad, axis_h, legend_h = 70, 12, 8, 22, 46
    plot_w = CHART_W - label_w - right
    cw = min(plot_w / max(len(col_steps), 1), 40.0)
    ch = max(2.0, min(18.0, 520.0 / max(len(row_ranks), 1)))
    grid_w, grid_h = cw * len(col_steps), ch * len(row_ranks)
    h = int(top_pad + grid_h + axis_h + legend_h)
    out = [f'<svg class="rank-step-waits" viewBox="0 0 {CHART_W} {h}" width="{CHART_W}" height="{h}" role="img">',
           f'<rect x="{label_w}" y="{top_pad}" width="{grid_w:.2f}" height="{grid_h:.2f}" fill="#fff" '
           'stroke="#ccc"/>']
    label_every = max(1, math.ceil(11.0 / ch))
    for r, i in row_of.items():
        if i % label_every == 0 or r in stragglers.values():
            if i % label_every and ch < 11:
                continue
            y = top_pad + i * ch + ch / 2 + 4
            who = names.get(r)
            out.append(f'<text x="{label_w - 5}" y="{y:.1f}" text-anchor="end">rank {r}'
                       + (f"<title>rank {r}: {esc(who)}</title>" if who else "") + "</text>")
    cells = []
    phase = d["phase"].tolist() if "phase" in d.columns else [None] * len(d)
    bs = d["bs"].tolist() if "bs" in d.columns else [None] * len(d)
    for st, rk, w, ph, b in zip(d["step"].tolist(), d["rank"].tolist(), ns.tolist(), phase, bs):
        x = label_w + col_of[int(st)] * cw
        y = top_pad + row_of[int(rk)] * ch
        ok = math.isfinite(w)
        fill = wait_color(w / top) if ok else "#fff"
        bs_txt = f"bs {int(b)}" if _num(b) is not None else "bs n/a"
        cells.append(f'<rect class="cell" x="{x:.2f}" y="{y:.2f}" width="{cw:.2f}" height="{ch:.2f}" fill="{fill}">'
                     f'<title>rank {int(rk)} · step {int(st)} · {bs_txt}'
                     + (f" · {esc(ph)}" if isinstance(ph, str) and ph else "")
                     + f' · wait {(_ms(w) if ok else "n/a")}</title></rect>')
    out.append(f'<g stroke="#fff" stroke-width="{0.5 if cw >= 8 and ch >= 8 else 0}">' + "".join(cells) + "</g>")
    rad = max(1.2, min(cw, ch) * 0.28)
    for st, rk in stragglers.items():
        if rk not in row_of:
            continue
        cx = label_w + col_of[st] * cw + cw / 2
        cy = top_pad + row_of[rk] * ch + ch / 2
        sbs, mbs, imb = strag_info[st]
        detail = (f" (bs {int(sbs)}, median bs {int(mbs)})" if _num(sbs) is not None and _num(mbs) is not None
                  else "") + (f"; imbalance {_ms(float(imb))}" if _num(imb) is not None else "")
        out.append(f'<circle class="straggler" cx="{cx:.2f}" cy="{cy:.2f}" r="{rad:.2f}" fill="#fff" stroke="#000" '
                   f'stroke-width="{1 if rad > 2 else 0.6}"><title>step {st}: straggler rank {rk}{esc(detail)}'
                   "</title></circle>")
    ay = top_pad + grid_h + 14
    tick_every = max(1, math.ceil(len(col_steps) / 12))
    last = len(col_steps) - 1
    for i, s in enumerate(col_steps.tolist()):
        if (i % tick_every == 0 and last - i >= tick_every / 2) or i == last:
            out.append(f'<text x="{label_w + i * cw + cw / 2:.1f}" y="{ay:.1f}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{label_w - 5}" y="{ay:.1f}" text-anchor="end">step</text>')
    ly = top_pad + grid_h + axis_h + 6
    lw = 240
    stops = "".join(f'<stop offset="{k / 10:.1f}" stop-color="{wait_color(k / 10)}"/>' for k in range(11))
    out.append(f'<defs><linearGradient id="tk-wait-scale">{stops}</linearGradient></defs>'
               f'<text x="{label_w - 5}" y="{ly + 10:.1f}" text-anchor="end">wait</text>'
               f'<rect x="{label_w}" y="{ly:.1f}" width="{lw}" height="12" fill="url(#tk-wait-scale)" stroke="#ccc"/>')
    for k in range(5):
        out.append(f'<text x="{label_w + lw * k / 4:.1f}" y="{ly + 25:.1f}" text-anchor="middle">'
                   f"{top * k / 4 / 1e6:,.2f}</text>")
    out.append(f'<text x="{label_w + lw + 22}" y="{ly + 25:.1f}">ms</text>'
               f'<circle cx="{label_w + lw + 50}" cy="{ly + 6:.1f}" r="5" fill="#fff" stroke="#000"/>'
               f'<text x="{label_w + lw + 60}" y="{ly + 10:.1f}">the step\'s straggler (last most often)</text>'
               f'<rect x="{label_w + lw + 290}" y="{ly:.1f}" width="12" height="12" fill="#fff" stroke="#ccc"/>'
               f'<text x="{label_w + lw + 308}" y="{ly + 10:.1f}">not recorded whole</text></svg>')
    sampled = []
    if len(col_steps) < len(all_steps):
        sampled.append(f"{len(col_steps):,} of {len(all_steps):,} steps")
    if len(row_ranks) < len(all_ranks):
        sampled.append(f"{len(row_ranks):,} of {len(all_ranks):,} ranks")
    title = "Waits per rank and step" + (f" ({', '.join(sampled)}, sampled)" if sampled else "")
    notes = []
    if sampled:
        notes.append(f"sampled: {' and '.join(sampled)} drawn, evenly spaced from the first to the last"
                     + (f" (the ranks most often a step's straggler first, up to {MAX_RANK_ROWS // 4})"
                        if len(row_ranks) < len(all_ranks) else "")
                     + "; the tables below and the JSON sidecar hold every one")
    notes.append("a cell is a rank's wait in a global step (Σ over its collectives of last arrival − own arrival), "
                 f"darker = longer, the scale from 0 to the longest drawn ({_ms(top if len(ns) else 0)}); white: the "
                 "rank did not record the step whole; a ring marks the step's straggler; hover a cell for its numbers")
    s = result.summary
    ties = ""
    st = s.get("straggler") if isinstance(s.get("straggler"), dict) else None
    if _num(s.get("collectives")) is not None and st and _num(st.get("of")) is not None:
        nt = int(s["collectives"]) - int(st["of"])
        ties = f' <span class="note">({nt:,} of {int(s["collectives"]):,} collectives tied: no last rank)</span>' \
            if nt > 0 else ""
    lead = f'<p class="lead">{esc(imbalance_sentence(s))}{ties}</p>'
    return title, lead + "".join(out), "; ".join(notes)


# --------------------------------------------------------------------------- sections


def findings_html(df: pd.DataFrame) -> str:
    out = []
    for _, r in df.iterrows():
        if _num(r.get("gain_gib")) is not None:
            gain = f"{float(r['gain_gib']):.2f} GiB"
        elif _num(r.get("gain_ms_per_step")) is not None:
            pct = _num(r.get("gain_pct"))
            gain = f"{float(r['gain_ms_per_step']):.3f} ms/step" + (f" ({pct:.1f} %)" if pct is not None else "")
        else:
            gain = "no number (not measured)"
        minor = bool(r.get("minor"))
        out.append(f'<div class="finding{" minor" if minor else ""}"><span class="gain">{esc(gain)}</span>'
                   f'<h3>{int(r["rank"])}. {esc(r["title"])}<span class="tag">{esc(r["basis"])}</span>'
                   f'{"<span class=tag>minor</span>" if minor else ""}</h3>'
                   f'<p><b>How:</b> {esc(r.get("how") or "")}</p><p><b>Evidence:</b> {esc(r.get("evidence") or "")}</p>'
                   f'<p><b>Try:</b> {esc(r.get("suggestion") or "")}</p>'
                   f'<p><b>See:</b> <code>{esc(r.get("command") or "")}</code></p></div>')
    return "".join(out)


def summary_html(result: Result) -> str:
    origin = origin_of(result)
    cells = [f"<div><span>{esc(label_of(k, result.summary))}</span><span>{esc(value_text(k, v, origin))}</span></div>"
             for k, v in result.summary.items()]
    return f'<div class="kv">{"".join(cells)}</div>'


def table_html(name: str, df: pd.DataFrame, origin=None, *, rows: int = MAX_ROWS, more: str | None = None) -> str:
    df = display_frame(df)
    shown = df.head(rows)
    records = table_rows(shown)
    cols = [column(c, [r.get(c) for r in records], origin) for c in shown.columns]
    bad_rows = ("ok" in shown.columns)
    head = "".join(f"<th>{esc(c.header)}</th>" for c in cols)
    body = []
    for r in records:
        cls = ' class="bad"' if bad_rows and r.get("ok") is False else ""
        tds = []
        for c in cols:
            v = r.get(c.name)
            raw = _scalar(v)
            sort = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else c.fmt(v)
            tds.append(f'<td{" class=n" if c.numeric else ""} data-v="{esc(sort)}">{esc(c.fmt(v))}</td>')
        body.append(f"<tr{cls}>{''.join(tds)}</tr>")
    note = "" if len(df) <= rows else (f'<p class="note">the first {rows:,} of {len(df):,} rows; '
                                       f'{more or "the JSON sidecar (or -f json) holds every row"}</p>')
    return (f'<table class="sortable" id="t-{esc(name)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>{note}')


def _command_line(result: Result) -> str:
    paths = _names_title(result)[0]
    opts = []
    for k, v in result.params.items():
        if v in (None, False, [], {}, ""):
            continue
        opts.append(f"--{k.replace('_', '-')}" + ("" if v is True else f" {json.dumps(v) if not isinstance(v, str) else v}"))
    return " ".join(["tracekit", result.command, *paths, *opts])


def _names_title(result: Result) -> tuple[list[str], str]:
    """The inputs' names, and the page's title (the command and the first input's file name)."""
    names = [str(i.get("path") or i.get("label")) for i in result.inputs if i.get("path") or i.get("label")]
    return names, f"tracekit {result.command}" + (f" · {names[0].rsplit('/', 1)[-1]}" if names else "")


def sections(result: Result, *, rows: int = MAX_ROWS, more: str | None = None, page: bool = True) -> list[str]:
    """The parts of a result's HTML, in order (the page and the notebook display share them)."""
    names, title = _names_title(result)
    parts = [f"<h1>{esc(title)}</h1>",
             f'<p class="sub">{esc(", ".join(names))} · tracekit {esc(__version__)} · schema {esc(result.schema)}</p>']
    f = result.tables.get("findings")
    if f is not None and len(f) and {"rank", "title"} <= set(f.columns):
        parts.append("<h2>Findings</h2>" + '<p class="note">ranked by gain; gains overlap, so they do not add up</p>'
                     + findings_html(f))
    waits = rank_step_waits(result)  # every rank of a run: who waits when, first after the findings
    if waits is not None:
        wtitle, whtml, wnote = waits
        parts.append(f"<h2>{esc(wtitle)}</h2>{whtml}" + (f'<p class="note">{esc(wnote)}</p>' if wnote else ""))
    parts.append("<h2>Summary</h2>" + summary_html(result))
    for ptitle, svg, note in pictures(result):
        parts.append(f"<h2>{esc(ptitle)}</h2>{svg}" + (f'<p class="note">{esc(note)}</p>' if note else ""))
    if result.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f'<li class="warn">{esc(w)}</li>' for w in result.warnings)
                     + "</ul>")
    origin = origin_of(result)
    health = result.tables.get("health")
    if health is not None and len(health) and {"check", "ok"} <= set(health.columns):
        bad = int((~health["ok"].astype(bool)).sum()) if "ok" in health else 0
        parts.append(f"<h2>Trace health</h2><p>{len(health):,} checks, {bad:,} failed</p>"
                     + table_html("health", health, origin, rows=rows, more=more))
    parts.append("<h2>Tables</h2>")
    if origin is not None:
        parts.append(f'<p class="note">{esc(origin.note())}</p>')
    for name, df in result.tables.items():
        if not len(df) or (name == "health" and "check" in df.columns) or (name == "timeline" and "lane" in df.columns):
            continue
        parts.append(f"<details{' open' if name in ('findings', 'wall', 'one_step', 'matched') else ''}>"
                     f"<summary>{esc(name)} ({len(df):,} rows)</summary>"
                     f"{table_html(name, df, origin, rows=rows, more=more)}</details>")
    tl = result.tables.get("timeline")
    if tl is not None and len(tl) and "lane" in tl.columns:
        parts.append(f'<p class="note">the timeline table ({len(tl):,} intervals) is in '
                     f'{"the JSON sidecar" if page else "result.frames()"}</p>')
    if page:
        params = json.dumps(result.params, ensure_ascii=False, default=str, indent=1)
        parts.append('<h2>How these numbers were obtained</h2><div class="prov">'
                     f"<p>Command: <code>{esc(_command_line(result))}</code></p>"
                     f"<p>tracekit {esc(__version__)}, result schema <code>{esc(result.schema)}</code>; "
                     "every number above is in the JSON sidecar (the <code>-f json</code> document).</p>"
                     f"<p>Inputs:</p><ul>{''.join(f'<li><code>{esc(json.dumps(shown_obj(i), default=str, ensure_ascii=False))}</code></li>' for i in result.inputs)}</ul>"
                     f"<details><summary>Parameters</summary><pre>{esc(params)}</pre></details></div>")
    return parts


def scoped_css(scope: str) -> str:
    """The page's styles limited to the elements under ``scope`` (a notebook cell must not restyle the notebook)."""
    out = []
    for rule in CSS.replace("\n", "").split("}"):
        if "{" not in rule:
            continue
        sel, body = rule.split("{", 1)
        sels = [x.strip() for x in sel.split(",") if x.strip()]
        sels = [scope if x in ("body", "main") else f"{scope} {x}" for x in sels]
        out.append(f"{','.join(sels)}{{{body}}}")
    return "".join(out)


def to_html(result: Result) -> str:
    """The whole page."""
    title = _names_title(result)[1]
    return utf8_text("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>{''.join(sections(result))}</main>"
            f"<script>{SORT_JS}</script></body></html>\n")  # valid UTF-8 whatever the names
