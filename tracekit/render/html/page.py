"""Any result as one self-contained HTML page (``-f html``): no network — styles, the sorting script and every
picture (plain SVG) are inline, so the file opens offline and from a mail attachment. This module is the page
itself — its styles and scripts, the headline and the order of the sections — and the HTML a notebook shows for a
:class:`~tracekit.result.Result` (``Result._repr_html_``, :func:`notebook_html`: the same sections with the styles
scoped to the cell and each table's first :data:`NOTEBOOK_ROWS` rows). Each part is drawn at its own home in this
package:

* ``tables`` — escaping, the summary grid and the sortable tables;
* ``svg`` — legends, stacked bars, evenly sampled rows, the memory ledger's waterfall;
* ``pictures`` — the pictures a result's tables allow; ``timeline`` — the step timeline with its zoom;
* ``layers`` — the layers of the median step; ``ranks`` — the rank × step picture of waits;
* ``findings`` — the findings' cards; ``command`` — how the numbers were obtained (the CLI command);
* ``paths`` — paths relative to the page's folder (or the file name alone; as given with ``--full-paths``), and
  the title.

What a page holds, in order: the headline and the one-step picture; the findings; for every rank of a run
(``imbalance``) the rank × step picture of waits with the summary's sentence; the layers; the headline numbers; the
pictures its tables allow (the wall decomposition per step, kernel time per block type, the step timeline, the
memory ledger waterfall, step time per concurrency for two deployments, the decomposition per operating point of a
sweep); every table (sortable, the first ``MAX_ROWS`` rows — the JSON sidecar holds all); the warnings and the step
health checks; and how every number was obtained (command, tracekit version, parameters, inputs). Every string is
escaped after control characters are made visible, so a kernel name cannot inject markup or script.
"""

from __future__ import annotations

from ..._version import __version__
from ...result import Result, utf8_text
from .command import provenance_html
from .findings import findings_html
from .layers import layer_section
from .paths import PathView, names_title, path_fixes, relative_paths
from .pictures import one_step_picture, pictures
from .ranks import rank_step_waits, run_ranks_part
from .tables import MAX_ROWS, esc, num, summary_html, table_html
from .timeline import TIMELINE_JS
from ..human import origin_of, value_text
from ..warning_folding import fold_warnings

NOTEBOOK_ROWS = 20  # rows of each table a notebook shows; ``result.frames()`` has every row
NOTEBOOK_SCOPE = ".tracekit-result"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#555;margin:0 0 16px} .kv{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:2px 24px}
.kv div{display:flex;justify-content:space-between;border-bottom:1px dotted #ddd;padding:2px 0}
.record{margin:8px 0} .record caption{text-align:left;font-weight:600} .record th{text-align:left;font-weight:normal;padding-right:24px}
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


def headline_html(result: Result) -> str:
    """One sentence from the summary: the median step, what it is made of, and the top finding."""
    s = result.summary
    wall = num(s.get("median_wall_ns"))
    if wall is None:
        return ""
    parts = [
        f"Median step {value_text('median_wall_ns', wall)}"
        + (f" over {int(s['steps']):,} step{'s' if int(s['steps']) != 1 else ''}" if num(s.get("steps")) else "")
    ]
    shares = [(k, num(s.get(f"median_{k}_ns"))) for k in ("busy", "ag_only", "idle")]
    words = {"busy": "busy", "ag_only": "only AllGather copies", "idle": "idle"}
    shares = [f"{v / wall * 100:.0f} % {words[k]}" for k, v in shares if v is not None and v > 0 and wall > 0]
    if shares:
        parts.append(", ".join(shares))
    one = result.tables.get("one_step")
    if one is not None and len(one) and {"step", "group_by", "name", "wall_pct"} <= set(one.columns):
        cat = one[
            (one["step"] == s.get("timeline_step", one["step"].min()))
            & (one["group_by"] == "category")
            & (one["name"] != "idle")
        ]  # idle time is a row of the table, not a kernel category
        if len(cat):
            top = cat.sort_values("wall_pct", ascending=False).iloc[0]
            parts.append(f"the costliest kernel category is {top['name']} ({float(top['wall_pct']):.0f} % of the wall)")
    lead = "; ".join(parts) + "."
    if s.get("top_finding"):
        lead += f" Top finding: {s['top_finding']}."
    if isinstance(s.get("shapes"), str):  # graph-replayed kernels: how much has its op's shapes, or what to record
        lead += f" Shapes {s['shapes']}." if s["shapes"].startswith("for ") else f" {s['shapes']}."
    return f'<p class="lead headline">{esc(lead)}</p>'


def sections(
    result: Result,
    *,
    rows: int = MAX_ROWS,
    more: str | None = None,
    page: bool = True,
    view: PathView | None = None,
) -> list[str]:
    """The parts of a result's HTML, in order (the page and the notebook display share them): the headline and the
    one-step picture first, then the findings (the minor ones collapsed), the ranks' waits, the layers, the summary,
    the other pictures, warnings, health, tables and how the numbers were obtained. Paths are shown as ``view`` shows
    them (default: relative to the current directory, where the command ran)."""
    view = view or PathView()
    fixes = path_fixes(result, view)
    names, title = names_title(result, view)
    parts = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="sub">{esc(", ".join(names))} · tracekit {esc(__version__)} · schema {esc(result.schema)}</p>',
        headline_html(result),
    ]
    one = one_step_picture(result)
    if one is not None:
        parts.append(f"<h2>{esc(one[0])}</h2>{one[1]}" + (f'<p class="note">{esc(one[2])}</p>' if one[2] else ""))
    f = result.tables.get("findings")
    if f is not None and len(f) and {"rank", "title"} <= set(f.columns):
        parts.append(
            "<h2>Findings</h2>"
            + '<p class="note">ranked by gain; gains overlap, so they do not add up</p>'
            + findings_html(f)
        )
    waits = rank_step_waits(result)  # every rank of a run: who waits when, first after the findings
    if waits is not None:
        wtitle, whtml, wnote = waits
        parts.append(f"<h2>{esc(wtitle)}</h2>{whtml}" + (f'<p class="note">{esc(wnote)}</p>' if wnote else ""))
    run_ranks = run_ranks_part(result)  # report RUN_DIR: its ranks in words, missing ones named (issue 40)
    if run_ranks is not None:
        parts.append(f"<h2>{esc(run_ranks[0])}</h2>{run_ranks[1]}")
    lay = layer_section(result)
    if lay is not None:
        parts.append(f"<h2>{esc(lay[0])}</h2>{lay[1]}" + (f'<p class="note">{esc(lay[2])}</p>' if lay[2] else ""))
    parts.append("<h2>Summary</h2>" + summary_html(result))
    for ptitle, svg, note in pictures(result, page=page):
        parts.append(f"<h2>{esc(ptitle)}</h2>{svg}" + (f'<p class="note">{esc(note)}</p>' if note else ""))
    if result.warnings:
        parts.append(
            "<h2>Warnings</h2><ul>"
            + "".join(
                f'<li class="warn">{esc(w.text)}'
                + (f' <span class="note">{esc(w.more_text)}</span>' if w.more else "")
                + "</li>"
                for w in fold_warnings(result.warnings)
            )
            + "</ul>"
        )
    origin = origin_of(result)
    health = result.tables.get("health")
    if health is not None and len(health) and {"check", "ok"} <= set(health.columns):
        bad = int((~health["ok"].astype(bool)).sum()) if "ok" in health else 0
        parts.append(
            f"<h2>Trace health</h2><p>{len(health):,} checks, {bad:,} failed</p>"
            + table_html("health", health, origin, rows=rows, more=more)
        )
    parts.append("<h2>Tables</h2>")
    if origin is not None:
        parts.append(f'<p class="note">{esc(origin.note())}</p>')
    for name, df in result.tables.items():
        if not len(df) or (name == "health" and "check" in df.columns) or (name == "timeline" and "lane" in df.columns):
            continue
        parts.append(
            f"<details{' open' if name in ('wall', 'one_step', 'matched') else ''}>"
            f"<summary>{esc(name)} ({len(df):,} rows)</summary>"
            f"{table_html(name, df, origin, rows=rows, more=more)}</details>"
        )
    tl = result.tables.get("timeline")
    if tl is not None and len(tl) and "lane" in tl.columns:
        parts.append(
            f'<p class="note">the timeline table ({len(tl):,} intervals) is in '
            f"{'the JSON sidecar' if page else 'result.frames()'}</p>"
        )
    if page:
        parts.append(provenance_html(result, view))
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


def to_html(result: Result, *, base: str | None = None, full_paths: bool = False) -> str:
    """The whole page, its paths relative to the folder ``base`` (where it is written; default: the current
    directory), or as given with ``full_paths``."""
    view = PathView(base, full_paths)
    title = names_title(result, view)[1]
    return utf8_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>{''.join(sections(result, view=view))}</main>"
        f"<script>{SORT_JS}{TIMELINE_JS}</script></body></html>\n"
    )  # valid UTF-8 whatever the names


def notebook_html(result: Result, *, rows: int = NOTEBOOK_ROWS) -> str:
    """The HTML a notebook shows for ``result`` (``Result._repr_html_``): the page's sections but how the numbers
    were obtained, its styles scoped to the cell, each table's first ``rows`` rows."""
    parts = sections(result, rows=rows, page=False, more="<code>result.frames()[NAME]</code> has every row")
    return f'<div class="tracekit-result"><style>{scoped_css(NOTEBOOK_SCOPE)}</style>{"".join(parts)}</div>'
