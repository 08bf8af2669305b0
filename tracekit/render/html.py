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
from .colors import color_of, picture_colors
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
.lead{font-size:15px;margin:4px 0 8px} .headline{font-size:16px;background:#fff;border:1px solid #ddd;border-radius:4px;padding:8px 12px}
.finding h3,.finding p{overflow-wrap:anywhere;word-break:break-word} .finding code{word-break:break-all}
.prov code.cmd{display:block;white-space:pre-wrap;word-break:break-all}
.timeline .tl-row{display:flex;align-items:flex-start} .timeline .tl-view{flex:1;min-width:0}
.timeline svg{border:0;border-radius:0} .timeline svg.tl-plot{cursor:grab;width:100%;display:block}
.timeline svg.tl-axis{width:100%;display:block} .timeline svg.tl-names{flex:none}
.tl-ctl button{font-size:12px;margin-right:6px}
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


def _legend(names: Iterable[str], colors: dict[str, str] | None = None) -> str:
    colors = colors or {}
    return '<div class="legend">' + "".join(f'<span><i style="background:{colors.get(n) or color_of(n)}"></i>'
                                            f'{esc(n)}</span>' for n in dict.fromkeys(names)) + "</div>"


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
            out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{colors[str(name)]}">'
                       f'<title>{esc(name)}: {v / div:,.3f} {unit}</title></rect>')
            x += w
        total = sum(max(v, 0) for _, v in parts)
        out.append(f'<text x="{x + 4:.2f}" y="{y + 13}">{total / div:,.2f} {unit}</text>')
    out.append("</svg>")
    return "".join(out) + _legend((str(n) for _, parts in rows for n, _ in parts), colors) + cut


FIXED_LANES = ("step", "exposed")  # lanes drawn in their own fixed colour, whatever their label


def step_timeline_svg(tl: pd.DataFrame, *, zoom: bool = True) -> str:
    """The lanes of one step (tracekit.analyses.time.timeline): a row per lane, each interval a rectangle coloured by its
    label, exposed AllGather time red; hovering names it. With ``zoom`` (the page; a notebook has no script) the
    plot is its own SVG whose view box the page's script narrows and moves: the wheel zooms around the pointer,
    dragging pans, the buttons zoom in, out and back; the lane names and the time axis stay put (the axis is
    rewritten for the view)."""
    if tl.empty:
        return ""
    s0, s1 = int(tl["start_ns"].min()), int(tl["end_ns"].max())
    span = max(1, s1 - s0)
    lanes = list(dict.fromkeys(tl["lane"]))
    labels = list(dict.fromkeys(tl.loc[~tl["lane"].isin(FIXED_LANES), "label"].astype(str)))
    colors = picture_colors(labels, fixed=[x for x in FIXED_LANES if (tl["lane"] == x).any()])
    label_w, lane_h, gap = 150, 16, 4
    plot_w = CHART_W - label_w - 10
    h = len(lanes) * (lane_h + gap) + 4
    names = [f'<svg class="tl-names" viewBox="0 0 {label_w} {h}" width="{label_w}" height="{h}">']
    plot = [f'<svg class="tl-plot" viewBox="0 0 {plot_w} {h}" width="{plot_w}" height="{h}" '
            f'preserveAspectRatio="none" role="img" data-span-ns="{span}">']
    for i, lane in enumerate(lanes):
        y = 4 + i * (lane_h + gap)
        names.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{esc(lane)}<title>{esc(lane)}</title>'
                     "</text>")
        d = tl[tl["lane"] == lane]
        for label, g in d.groupby("label", sort=True):
            fill = colors[lane] if lane in FIXED_LANES else colors[str(label)]
            a = g["start_ns"].to_numpy(np.int64) - s0
            b = g["end_ns"].to_numpy(np.int64) - s0
            xs = a / span * plot_w
            ws = np.maximum((b - a) / span * plot_w, 0.3)
            rects = "".join(f'<rect x="{x:.3f}" y="{y}" width="{w:.3f}" height="{lane_h}"/>'
                            for x, w in zip(xs.tolist(), ws.tolist()))
            total = int((b - a).sum())
            edge = ' stroke="#fff" stroke-width="1" vector-effect="non-scaling-stroke"' \
                if lane in ("layers", "blocks") else ""  # neighbouring layers of one type stay apart
            plot.append(f'<g fill="{fill}"{edge}><title>{esc(lane)} · {esc(label)}: {len(g):,} interval(s), '
                        f'{total / 1e6:,.3f} ms</title>{rects}</g>')
    names.append("</svg>")
    plot.append("</svg>")
    anchor = ["start", "middle", "middle", "middle", "middle", "end"]  # the first and last tick stay inside
    ticks = "".join(f'<text x="{k / 5 * plot_w:.1f}" y="14" text-anchor="{anchor[k]}">+{span * k / 5 / 1e6:,.2f} ms'
                    "</text>" for k in range(6))
    axis = (f'<svg class="tl-axis" viewBox="0 0 {plot_w} 20" width="{plot_w}" height="20" data-span-ns="{span}">'
            f"{ticks}</svg>")
    controls = ('<div class="tl-ctl"><button type="button" data-zoom="in">zoom in</button>'
                '<button type="button" data-zoom="out">zoom out</button>'
                '<button type="button" data-zoom="reset">whole step</button>'
                '<span class="note"> wheel over the lanes: zoom around the pointer · drag: pan</span></div>'
                ) if zoom else ""
    legend = _legend(labels[:40] + (["exposed"] if (tl["lane"] == "exposed").any() else []), colors)
    return (f'<div class="timeline">{controls}<div class="tl-row">{"".join(names)}<div class="tl-view">'
            f'{"".join(plot)}{axis}</div></div>{legend}</div>')


TIMELINE_JS = """
function tkTimeline(el){
  var plot=el.querySelector('svg.tl-plot'),axis=el.querySelector('svg.tl-axis');if(!plot)return;
  var vb=plot.viewBox.baseVal,W=vb.width,H=vb.height,span=parseFloat(plot.getAttribute('data-span-ns'));
  function set(x,w){w=Math.max(W/2000,Math.min(W,w));x=Math.max(0,Math.min(W-w,x));
    plot.setAttribute('viewBox',x+' 0 '+w+' '+H);
    if(axis){var t=axis.querySelectorAll('text');for(var k=0;k<t.length;k++){
      var ms=(x+w*k/(t.length-1))/W*span/1e6;t[k].textContent='+'+ms.toFixed(ms<1?4:ms<100?3:2)+' ms';}}}
  function zoom(f,frac){var x=vb.x,w=vb.width,c=x+w*(frac==null?0.5:frac);set(c-(c-x)/f,w/f);}
  el.tkZoom=zoom;el.tkSet=set;
  plot.addEventListener('wheel',function(e){e.preventDefault();var r=plot.getBoundingClientRect();
    zoom(e.deltaY<0?1.5:1/1.5,(e.clientX-r.left)/Math.max(r.width,1));},{passive:false});
  var drag=null;
  plot.addEventListener('mousedown',function(e){drag={x:e.clientX,vx:vb.x};e.preventDefault();});
  window.addEventListener('mousemove',function(e){if(!drag)return;var r=plot.getBoundingClientRect();
    set(drag.vx-(e.clientX-drag.x)/Math.max(r.width,1)*vb.width,vb.width);});
  window.addEventListener('mouseup',function(){drag=null;});
  el.querySelectorAll('button[data-zoom]').forEach(function(b){b.addEventListener('click',function(){
    var z=b.getAttribute('data-zoom');if(z==='in')zoom(2);else if(z==='out')zoom(0.5);else set(0,W);});});
}
document.querySelectorAll('.timeline').forEach(tkTimeline);
"""


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
    colors = picture_colors(name for name, _, _ in bars)
    h, base, bw = 360, 250, max(24, (CHART_W - 80) // max(len(bars), 1) - 10)
    out = [f'<svg viewBox="0 0 {CHART_W} {h}" width="{CHART_W}" height="{h}" role="img">']
    for i, (name, b, v) in enumerate(bars):
        x = 60 + i * (bw + 10)
        y = base - (b + v) / top * 230
        hh = max(v / top * 230, 0.5)
        out.append(f'<rect x="{x}" y="{y:.2f}" width="{bw}" height="{hh:.2f}" fill="{colors[name]}">'
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
    rows = [(f"{r['name']} ({float(r['wall_ns']) / total * 100:.1f} %)", [(str(r["name"]), float(r["wall_ns"]))])
            for r in cat.to_dict("records")]
    return (f"Where step {step}'s wall clock goes, by kernel category", stacked_bars(rows, "ms", 1e6),
            f"the median step ({total / 1e6:,.3f} ms): every ns of it charged to one category, so the bars sum exactly"
            " to the wall; the one_step table below has the same rows")


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
    table = pd.DataFrame({word: np.arange(len(rows)), f"{word}_type": kinds, "start_ms": (start - s0) / 1e6,
                          "wall_ms": wall / 1e6})
    if kernel_ns is not None:
        table["kernel_ms"] = kernel_ns / 1e6
        if kernels is not None:
            table["kernels"] = pd.array(kernels, dtype="Int64") if np.isfinite(kernels).all() else kernels
    by_type = (table.groupby(f"{word}_type", sort=False)
               .agg(**{f"{word}s": (word, "size"), "wall_ms": ("wall_ms", "sum"),
                       **({"kernel_ms": ("kernel_ms", "sum")} if "kernel_ms" in table else {})})
               .sort_values("wall_ms", ascending=False).reset_index())
    bt = t.get("block_types")
    if "kernel_ms" not in by_type and lane == "blocks" and bt is not None and len(bt) and \
            {"step", "block_type", "kernel_ns"} <= set(bt.columns):  # the annotation's kernel time per block type
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
    out = [f'<svg class="layers" viewBox="0 0 {CHART_W} {plot_h + 40}" width="{CHART_W}" height="{plot_h + 40}" '
           'role="img">']
    for k in range(5):
        y = top_pad + plot_h - k / 4 * plot_h
        out.append(f'<line x1="{label_w}" x2="{CHART_W - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{label_w - 4}" y="{y + 4:.1f}" text-anchor="end">{top * k / 4:,.2f}</text>')
    for i, (kind, w) in enumerate(zip(kinds, table["wall_ms"].tolist())):
        hh = max(w / top * plot_h, 0.5)
        extra = (f", kernels {table['kernel_ms'].iat[i]:,.3f} ms" if "kernel_ms" in table and
                 np.isfinite(table["kernel_ms"].iat[i]) else "")
        out.append(f'<rect x="{label_w + i * cw:.2f}" y="{top_pad + plot_h - hh:.2f}" width="{max(cw * 0.85, 0.5):.2f}"'
                   f' height="{hh:.2f}" fill="{colors[kind]}"><title>{word} {i}: {esc(kind)} · wall {w:,.3f} ms'
                   f"{extra}</title></rect>")
    tick_every = max(1, math.ceil(n / 20))
    for i in range(0, n, tick_every):
        out.append(f'<text x="{label_w + (i + 0.42) * cw:.1f}" y="{top_pad + plot_h + 14}" text-anchor="middle">{i}'
                   "</text>")
    out.append(f'<text x="{label_w - 4}" y="{top_pad + plot_h + 14}" text-anchor="end">{word}</text>'
               f'<text x="4" y="{top_pad - 1}">ms</text></svg>')
    origin = origin_of(result)
    html_ = ("".join(out) + _legend(by_type[f"{word}_type"].tolist(), colors)
             + f"<p><b>{word.capitalize()} types by cost</b></p>"
             + table_html(f"{word}_types_step", by_type, origin)
             + f"<details><summary>every {word} of step {step} ({n:,} rows)</summary>"
             + table_html(f"{word}s_step", table, origin) + "</details>")
    note = (f"a column per {word} of step {step} in the order they ran, its height the {word}'s wall (from its start"
            f" to the next {word}'s), coloured by {word} type"
            + ("; kernel ms: the kernel time inside it, summed over every stream" if kernel_ns is not None else "")
            + "; hover a column for its numbers")
    return f"{word.capitalize()}s of step {step} (the median step)", html_, note


def pictures(result: Result, *, page: bool = True) -> list[tuple[str, str, str]]:
    """(title, svg, note) for each picture this result's tables allow (the one-step picture and the layers come
    first on the page, from :func:`one_step_picture` and :func:`layer_section`)."""
    t, s, out = result.tables, result.summary, []
    wall = t.get("wall") if "wall" in t else (t.get("per_step") if result.command == "wall" else None)
    if wall is not None and len(wall) and {"busy_ns", "ag_only_ns", "idle_ns"} <= set(wall.columns):
        drawn, sampled = evenly(wall)
        out.append(("Wall decomposition per step" + (f" ({len(drawn):,} of {len(wall):,} steps, sampled)" if sampled
                                                     else ""),
                    stacked_bars(_wall_rows(drawn), "ms", 1e6),
                    "; ".join(x for x in (sampled.replace("rows", "steps"), glossary(ag_measures(["ag_only", "idle"])))
                              if x)))
    bt = t.get("block_types")
    if bt is not None and len(bt) and {"block_type", "kernel_ns"} <= set(bt.columns) and "step" in bt.columns:
        med = bt.groupby("block_type")["kernel_ns"].median().sort_values(ascending=False)
        out.append(("Kernel time per block type (median step)",
                    stacked_bars([(str(k), [(str(k), float(v))]) for k, v in med.items()], "ms", 1e6),
                    "kernel time summed over every stream, so it can exceed the wall where streams overlap"))
    tl = t.get("timeline")
    if tl is not None and len(tl) and {"lane", "label", "start_ns", "end_ns"} <= set(tl.columns):
        out.append((f"Step {s.get('timeline_step', '')} timeline (the median step)", step_timeline_svg(tl, zoom=page),
                    "lanes: the step, its blocks or layers, each GPU stream by kernel category, the weight "
                    "AllGathers and the exposed AllGather time (red); hover for names and totals"
                    + ("; zoom with the wheel or the buttons, drag to pan" if page else "")))
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


def _finding_html(r: dict) -> str:
    if _num(r.get("gain_gib")) is not None:
        gain = f"{float(r['gain_gib']):.2f} GiB"
    elif _num(r.get("gain_ms_per_step")) is not None:
        pct = _num(r.get("gain_pct"))
        gain = f"{float(r['gain_ms_per_step']):.3f} ms/step" + (f" ({pct:.1f} %)" if pct is not None else "")
    else:
        gain = "no number (not measured)"
    minor = bool(_scalar(r.get("minor")))
    title = str(r.get("title") or "")
    return (f'<div class="finding{" minor" if minor else ""}"><span class="gain">{esc(gain)}</span>'
            f'<h3 title="{esc(title)}">{int(r["rank"])}. {esc(title)}<span class="tag">{esc(r.get("basis") or "")}'
            f'</span>{"<span class=tag>minor</span>" if minor else ""}</h3>'
            f'<p><b>How:</b> {esc(r.get("how") or "")}</p><p><b>Evidence:</b> {esc(r.get("evidence") or "")}</p>'
            f'<p><b>Try:</b> {esc(r.get("suggestion") or "")}</p>'
            f'<p><b>See:</b> <code>{esc(r.get("command") or "")}</code></p></div>')


def findings_html(df: pd.DataFrame) -> str:
    """The findings, ranked: the major ones as cards, the minor ones (``minor``: under the thresholds) behind one
    closed ``<details>`` after them. A long name wraps inside its card (its full text on hover)."""
    rows = df.to_dict("records")
    major = [r for r in rows if not bool(_scalar(r.get("minor")))]
    minor = [r for r in rows if bool(_scalar(r.get("minor")))]
    out = "".join(_finding_html(r) for r in major)
    if not major:
        out += '<p class="note">no finding above the thresholds (docs/findings.md: --min-pct)</p>'
    if minor:
        out += (f'<details class="minor-findings"><summary>{len(minor):,} minor finding{"s" if len(minor) != 1 else ""}'
                " (each under the thresholds)</summary>" + "".join(_finding_html(r) for r in minor) + "</details>")
    return out


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


# a result's parameter (the Python function's name) -> the CLI option that sets it, where the two names differ
PARAM_OPTIONS = {"sizes": "ag_size", "ann": "annotation"}
NS_UNITS = (("ms", 1e6), ("us", 1e3), ("s", 1e9))  # an ``*_ns`` parameter given to the CLI in these units


def _click_command(result: Result):
    """The words and the click command of the ``tracekit`` command that made ``result`` ("waves_calc" is
    ``waves calc``; a group's sub-command is the one its ``kind`` or ``action`` parameter names, else the only one
    that takes the result's inputs as arguments), or (the command's words, None)."""
    words = result.command.replace("_", " ").split()
    try:
        import typer.main

        from ..cli import app
    except ImportError:  # pragma: no cover - the CLI's dependencies are part of tracekit
        return words, None
    cmd = typer.main.get_command(app)
    for part in words:
        cmd = getattr(cmd, "commands", {}).get(part)
        if cmd is None:
            return words, None
    subs = getattr(cmd, "commands", None)
    if subs:
        named = [result.params.get(k) for k in ("kind", "action") if result.params.get(k) in subs]
        takes = [n for n, c in subs.items()
                 if any(getattr(p, "param_type_name", "") == "argument" for p in c.params) == bool(result.inputs)]
        pick = named[0] if named else takes[0] if len(takes) == 1 else None
        if pick is None:
            return words, None
        words, cmd = [*words, pick], subs[pick]
    return words, cmd


def _option_args(opt, value) -> list[str]:
    """``value`` written as the CLI option ``opt`` takes it (repeated for a list or a TYPE=VALUE mapping)."""
    flag = min(opt.opts, key=len) if any(not o.startswith("--") for o in opt.opts) else opt.opts[0]
    if opt.is_flag:
        return [flag] if value else []
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in (flag, f"{k}={v}")]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in (flag, str(v))] if opt.multiple else [flag, ",".join(map(str, value))]
    return [flag, str(value)]


def command_args(result: Result, rel=None) -> list[str]:
    """The command line that computes this result again, from the CLI's own options: each parameter the command has
    an option for (by its name, ``PARAM_OPTIONS``, or an ``*_ns`` parameter given in ms by ``--*-ms``), those left at
    the option's default left out; the inputs that no option took are the arguments. ``rel`` shows a path."""
    rel = rel or (lambda x: x)
    words, cmd = _click_command(result)
    names = [str(i.get("path") or i.get("label")) for i in result.inputs if i.get("path") or i.get("label")]
    if cmd is None:
        return ["tracekit", *words, *map(rel, names)]
    # typer carries its own copy of click: options and arguments told apart by what they say they are
    opts = {p.name: p for p in cmd.params if getattr(p, "param_type_name", "") == "option"}
    args, used = [], set()
    for k, v in result.params.items():
        name = PARAM_OPTIONS.get(k, k)
        if name not in opts and name.replace("_", "") in opts:  # q_len -> --qlen
            name = name.replace("_", "")
        unit = next((u for u, _ in NS_UNITS if f"{k[:-3]}_{u}" in opts), None) if k.endswith("_ns") else None
        if name not in opts and unit is not None and _num(v) is not None:  # min_step_ns -> --min-step-ms
            name, v = f"{k[:-3]}_{unit}", float(v) / dict(NS_UNITS)[unit]
            v = int(v) if float(v).is_integer() else v
            if v == 0:
                continue
        opt = opts.get(name)
        if opt is None:
            continue
        default = getattr(opt.default, "value", opt.default)  # an enum choice's default by its value
        if v in (None, "", [], {}) or v == default or (opt.is_flag and not v):
            continue
        if isinstance(v, str) and v in names:
            used.add(v)
            v = rel(v)
        args += _option_args(opt, v)
    positional = [n for n in names if n not in used]
    n_args = sum(p.nargs if p.nargs > 0 else len(positional) for p in cmd.params
                 if getattr(p, "param_type_name", "") == "argument")
    return ["tracekit", *words, *map(rel, positional[:n_args]), *args]


def _command_line(result: Result, rel=None) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in command_args(result, rel))


def _relative(path: str) -> str:
    """``path`` as seen from where the command ran (the current directory); a path on another drive by its name."""
    import os

    if not os.path.isabs(path):
        return path
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return os.path.basename(path)


def _path_fixes(result: Result) -> list[tuple[str, str]]:
    """(text, replacement) pairs that make the page's paths relative to the current directory: every absolute path
    among the inputs and the parameters (raw and as HTML-escaped), then the current directory and the home folder
    as prefixes, longest first."""
    import os

    paths = {str(i.get("path")) for i in result.inputs if i.get("path")}
    paths |= {v for v in result.params.values() if isinstance(v, str) and os.path.isabs(v)}
    fixes = {p: _relative(p) for p in paths if os.path.isabs(p)}
    cwd = os.getcwd()
    if cwd not in ("/", ""):
        fixes[cwd.rstrip(os.sep) + os.sep] = ""
    home = os.path.expanduser("~")
    if home not in ("/", "", "~"):
        fixes[home.rstrip(os.sep) + os.sep] = "~" + os.sep
    out = []
    for k, v in sorted(fixes.items(), key=lambda kv: -len(kv[0])):
        out.append((k, v))
        if esc(k) != k:
            out.append((esc(k), esc(v)))
    return out


def relative_paths(text: str, fixes: list[tuple[str, str]]) -> str:
    """``text`` with each absolute path of ``fixes`` replaced, in one pass (a replacement is never replaced again)
    and only where the path starts (not inside a longer relative path that ends with it)."""
    keys = [k for k, _ in fixes if k in text]
    if not keys:
        return text
    table = dict(fixes)
    pat = re.compile(r"(?<![\w.~/-])(?:" + "|".join(re.escape(k) for k in keys) + ")")
    return pat.sub(lambda m: table[m.group(0)], text)


def _names_title(result: Result) -> tuple[list[str], str]:
    """The inputs' names (relative to the current directory), and the page's title (the command and the first input's
    file name)."""
    names = [_relative(str(i.get("path") or i.get("label"))) for i in result.inputs if i.get("path") or i.get("label")]
    return names, f"tracekit {result.command}" + (f" · {names[0].rsplit('/', 1)[-1]}" if names else "")


def headline_html(result: Result) -> str:
    """One sentence from the summary: the median step, what it is made of, and the top finding."""
    s = result.summary
    wall = _num(s.get("median_wall_ns"))
    if wall is None:
        return ""
    parts = [f"Median step {value_text('median_wall_ns', wall)}"
             + (f" over {int(s['steps']):,} step{'s' if int(s['steps']) != 1 else ''}" if _num(s.get("steps")) else "")]
    shares = [(k, _num(s.get(f"median_{k}_ns"))) for k in ("busy", "ag_only", "idle")]
    words = {"busy": "busy", "ag_only": "only AllGather copies", "idle": "idle"}
    shares = [f"{v / wall * 100:.0f} % {words[k]}" for k, v in shares if v is not None and v > 0 and wall > 0]
    if shares:
        parts.append(", ".join(shares))
    one = result.tables.get("one_step")
    if one is not None and len(one) and {"step", "group_by", "name", "wall_pct"} <= set(one.columns):
        cat = one[(one["step"] == s.get("timeline_step", one["step"].min())) & (one["group_by"] == "category")
                  & (one["name"] != "idle")]  # idle time is a row of the table, not a kernel category
        if len(cat):
            top = cat.sort_values("wall_pct", ascending=False).iloc[0]
            parts.append(f"the costliest kernel category is {top['name']} ({float(top['wall_pct']):.0f} % of the "
                         "wall)")
    lead = "; ".join(parts) + "."
    if s.get("top_finding"):
        lead += f" Top finding: {s['top_finding']}."
    return f'<p class="lead headline">{esc(lead)}</p>'


def sections(result: Result, *, rows: int = MAX_ROWS, more: str | None = None, page: bool = True) -> list[str]:
    """The parts of a result's HTML, in order (the page and the notebook display share them): the headline and the
    one-step picture first, then the findings (the minor ones collapsed), the ranks' waits, the layers, the summary,
    the other pictures, warnings, health, tables and how the numbers were obtained. Paths are shown relative to the
    current directory (where the command ran)."""
    fixes = _path_fixes(result)
    names, title = _names_title(result)
    parts = [f"<h1>{esc(title)}</h1>",
             f'<p class="sub">{esc(", ".join(names))} · tracekit {esc(__version__)} · schema {esc(result.schema)}</p>',
             headline_html(result)]
    one = one_step_picture(result)
    if one is not None:
        parts.append(f"<h2>{esc(one[0])}</h2>{one[1]}" + (f'<p class="note">{esc(one[2])}</p>' if one[2] else ""))
    f = result.tables.get("findings")
    if f is not None and len(f) and {"rank", "title"} <= set(f.columns):
        parts.append("<h2>Findings</h2>" + '<p class="note">ranked by gain; gains overlap, so they do not add up</p>'
                     + findings_html(f))
    waits = rank_step_waits(result)  # every rank of a run: who waits when, first after the findings
    if waits is not None:
        wtitle, whtml, wnote = waits
        parts.append(f"<h2>{esc(wtitle)}</h2>{whtml}" + (f'<p class="note">{esc(wnote)}</p>' if wnote else ""))
    lay = layer_section(result)
    if lay is not None:
        parts.append(f"<h2>{esc(lay[0])}</h2>{lay[1]}" + (f'<p class="note">{esc(lay[2])}</p>' if lay[2] else ""))
    parts.append("<h2>Summary</h2>" + summary_html(result))
    for ptitle, svg, note in pictures(result, page=page):
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
        parts.append(f"<details{' open' if name in ('wall', 'one_step', 'matched') else ''}>"
                     f"<summary>{esc(name)} ({len(df):,} rows)</summary>"
                     f"{table_html(name, df, origin, rows=rows, more=more)}</details>")
    tl = result.tables.get("timeline")
    if tl is not None and len(tl) and "lane" in tl.columns:
        parts.append(f'<p class="note">the timeline table ({len(tl):,} intervals) is in '
                     f'{"the JSON sidecar" if page else "result.frames()"}</p>')
    if page:
        params = json.dumps(result.params, ensure_ascii=False, default=str, indent=1)
        parts.append('<h2>How these numbers were obtained</h2><div class="prov">'
                     f'<p>Command (run from the folder the paths are relative to): <code class="cmd">'
                     f"{esc(_command_line(result, _relative))}</code></p>"
                     f"<p>tracekit {esc(__version__)}, result schema <code>{esc(result.schema)}</code>; "
                     "every number above is in the JSON sidecar (the <code>-f json</code> document).</p>"
                     f"<p>Inputs:</p><ul>{''.join(f'<li><code>{esc(json.dumps(shown_obj(i), default=str, ensure_ascii=False))}</code></li>' for i in result.inputs)}</ul>"
                     f"<details><summary>Parameters</summary><pre>{esc(params)}</pre></details></div>")
    return [relative_paths(p, fixes) for p in parts if p]


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
            f"<script>{SORT_JS}{TIMELINE_JS}</script></body></html>\n")  # valid UTF-8 whatever the names
