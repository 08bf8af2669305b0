"""Every rank of a run on the page (``imbalance``): who waits when, as a rank × step picture of waits with the
straggler of each step ringed, a scale in ms and the run's sentence above it (after a line naming the ranks without
a trace, when some are); ``report RUN_DIR``: the run's ranks in words (:func:`run_ranks_part`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...result import Result, shown_path
from ..colors import color_of
from ..ranks_text import missing_line, ranks_sentence, ranks_title
from .svg import CHART_W
from .tables import esc, num

MAX_CELLS = 64 * 200  # cells of the rank × step picture: 64 ranks × 200 steps, or more ranks and fewer steps
MAX_STEP_COLS = 200  # global steps drawn at most; beyond, evenly sampled (the first and the last among them)
MIN_STEP_COLS = 50  # steps drawn at least (when there are as many), however many ranks
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
    imb = num(summary.get("imbalance_ns_per_step"))
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


@dataclass
class _Grid:
    """What the picture draws, chosen from the tables: every step and rank of the run, the steps (columns) and ranks
    (rows) drawn with their positions, the drawn rank-steps (``cells``) with their waits (``wait_ns``, NaN where not
    recorded whole), the longest wait drawn (``top``, the scale's end), and each drawn step's straggler with its batch
    size, the median batch size and the step's imbalance."""

    all_steps: np.ndarray
    all_ranks: np.ndarray
    col_steps: np.ndarray
    row_ranks: np.ndarray
    col_of: dict[int, int]
    row_of: dict[int, int]
    cells: pd.DataFrame
    wait_ns: np.ndarray
    top: float
    stragglers: dict[int, int]
    strag_info: dict[int, tuple]


@dataclass(frozen=True)
class _Layout:
    """Where the parts go: the rank labels' width on the left, the grid of ``cw`` × ``ch`` cells below ``top_pad``,
    the step axis and the scale below it, the whole picture ``h`` high."""

    cw: float
    ch: float
    grid_w: float
    grid_h: float
    h: int
    label_w: int = 70
    top_pad: int = 8
    axis_h: int = 22


def _steps_and_ranks(
    steps: pd.DataFrame, by_step: pd.DataFrame | None, ranks: pd.DataFrame | None
) -> tuple[np.ndarray, np.ndarray]:
    """Every global step (of the steps table and of ``by_step``) and every rank (of the steps and ranks tables)."""
    all_steps = np.unique(
        np.concatenate(
            [pd.to_numeric(steps["step"]).to_numpy(np.int64)]
            + ([pd.to_numeric(by_step["step"]).to_numpy(np.int64)] if by_step is not None else [])
        )
    )
    rank_ids = [int(x) for x in steps["rank"].tolist()]
    if ranks is not None and "rank" in ranks.columns:
        rank_ids += [int(x) for x in ranks["rank"].tolist()]
    return all_steps, np.unique(np.asarray(rank_ids, dtype=np.int64))


def _rows_drawn(all_ranks: np.ndarray, by_step: pd.DataFrame | None) -> np.ndarray:
    """Every rank up to ``MAX_RANK_ROWS``; beyond, the ranks most often a step's straggler (a quarter), then the others
    evenly sampled."""
    if len(all_ranks) <= MAX_RANK_ROWS:
        return all_ranks
    often = (
        by_step["straggler"].dropna().astype(np.int64).value_counts().index.tolist()[: MAX_RANK_ROWS // 4]
        if by_step is not None
        else []
    )
    rest = np.setdiff1d(all_ranks, np.asarray(often, dtype=np.int64))
    pick = rest[_even_idx(len(rest), MAX_RANK_ROWS - len(often))]
    return np.union1d(np.asarray(often, dtype=np.int64), pick)


def _grid(result: Result, steps: pd.DataFrame) -> _Grid:
    """The ranks and steps drawn (at most ``MAX_CELLS`` cells, at least ``MIN_STEP_COLS`` steps where there are as
    many), their waits and the stragglers of the steps drawn."""
    by_step = result.tables.get("by_step")
    if by_step is None or not len(by_step) or not {"step", "straggler"} <= set(by_step.columns):
        by_step = None
    all_steps, all_ranks = _steps_and_ranks(steps, by_step, result.tables.get("ranks"))
    row_ranks = _rows_drawn(all_ranks, by_step)
    n_cols = min(MAX_STEP_COLS, max(MIN_STEP_COLS, MAX_CELLS // max(len(row_ranks), 1)))
    col_steps = all_steps[_even_idx(len(all_steps), n_cols)]
    stragglers: dict[int, int] = {}
    strag_info: dict[int, tuple] = {}
    if by_step is not None:
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
    return _Grid(all_steps, all_ranks, col_steps, row_ranks, col_of, row_of, d, ns, top, stragglers, strag_info)


def _layout(n_cols: int, n_rows: int) -> _Layout:
    """Cells at most 40 wide and between 2 and 18 high (the grid about 520 high at most)."""
    label_w, right, top_pad, axis_h, legend_h = 70, 12, 8, 22, 46
    plot_w = CHART_W - label_w - right
    cw = min(plot_w / max(n_cols, 1), 40.0)
    ch = max(2.0, min(18.0, 520.0 / max(n_rows, 1)))
    grid_w, grid_h = cw * n_cols, ch * n_rows
    return _Layout(cw, ch, grid_w, grid_h, int(top_pad + grid_h + axis_h + legend_h), label_w, top_pad, axis_h)


def _rank_labels(g: _Grid, lay: _Layout, names: dict[int, str]) -> list[str]:
    """A label per rank row where there is room (every row when rows are 11 high, else every few and the
    stragglers'), its file(s) on hover."""
    out = []
    label_every = max(1, math.ceil(11.0 / lay.ch))
    for r, i in g.row_of.items():
        if i % label_every == 0 or r in g.stragglers.values():
            if i % label_every and lay.ch < 11:
                continue
            y = lay.top_pad + i * lay.ch + lay.ch / 2 + 4
            who = names.get(r)
            out.append(
                f'<text x="{lay.label_w - 5}" y="{y:.1f}" text-anchor="end">rank {r}'
                + (f"<title>rank {r}: {esc(who)}</title>" if who else "")
                + "</text>"
            )
    return out


def _wait_cells(g: _Grid, lay: _Layout) -> str:
    """A cell per drawn rank-step, coloured by its wait (white: not recorded whole), with its numbers on hover."""
    cells = []
    d, cw, ch = g.cells, lay.cw, lay.ch
    phase = d["phase"].tolist() if "phase" in d.columns else [None] * len(d)
    bs = d["bs"].tolist() if "bs" in d.columns else [None] * len(d)
    for st, rk, w, ph, b in zip(d["step"].tolist(), d["rank"].tolist(), g.wait_ns.tolist(), phase, bs):
        x = lay.label_w + g.col_of[int(st)] * cw
        y = lay.top_pad + g.row_of[int(rk)] * ch
        ok = math.isfinite(w)
        fill = wait_color(w / g.top) if ok else "#fff"
        bs_txt = f"bs {int(b)}" if num(b) is not None else "bs n/a"
        cells.append(
            f'<rect class="cell" x="{x:.2f}" y="{y:.2f}" width="{cw:.2f}" height="{ch:.2f}" fill="{fill}">'
            f"<title>rank {int(rk)} · step {int(st)} · {bs_txt}"
            + (f" · {esc(ph)}" if isinstance(ph, str) and ph else "")
            + f" · wait {(_ms(w) if ok else 'n/a')}</title></rect>"
        )
    return f'<g stroke="#fff" stroke-width="{0.5 if cw >= 8 and ch >= 8 else 0}">' + "".join(cells) + "</g>"


def _straggler_rings(g: _Grid, lay: _Layout) -> list[str]:
    """A ring on each drawn step's straggler, its batch size against the median and the step's imbalance on hover."""
    out = []
    rad = max(1.2, min(lay.cw, lay.ch) * 0.28)
    for st, rk in g.stragglers.items():
        if rk not in g.row_of:
            continue
        cx = lay.label_w + g.col_of[st] * lay.cw + lay.cw / 2
        cy = lay.top_pad + g.row_of[rk] * lay.ch + lay.ch / 2
        sbs, mbs, imb = g.strag_info[st]
        detail = (
            f" (bs {int(sbs)}, median bs {int(mbs)})" if num(sbs) is not None and num(mbs) is not None else ""
        ) + (f"; imbalance {_ms(float(imb))}" if num(imb) is not None else "")
        out.append(
            f'<circle class="straggler" cx="{cx:.2f}" cy="{cy:.2f}" r="{rad:.2f}" fill="#fff" stroke="#000" '
            f'stroke-width="{1 if rad > 2 else 0.6}"><title>step {st}: straggler rank {rk}{esc(detail)}'
            "</title></circle>"
        )
    return out


def _step_axis(g: _Grid, lay: _Layout) -> list[str]:
    """The global step under about 12 columns (always the last), and the axis' name."""
    out = []
    ay = lay.top_pad + lay.grid_h + 14
    tick_every = max(1, math.ceil(len(g.col_steps) / 12))
    last = len(g.col_steps) - 1
    for i, s in enumerate(g.col_steps.tolist()):
        if (i % tick_every == 0 and last - i >= tick_every / 2) or i == last:
            out.append(
                f'<text x="{lay.label_w + i * lay.cw + lay.cw / 2:.1f}" y="{ay:.1f}" text-anchor="middle">{s}</text>'
            )
    out.append(f'<text x="{lay.label_w - 5}" y="{ay:.1f}" text-anchor="end">step</text>')
    return out


def _wait_scale(top: float, lay: _Layout) -> str:
    """The key under the grid, closing the picture: the colour scale from 0 to ``top`` in ms, the straggler's ring
    and the white of a rank-step not recorded whole."""
    label_w = lay.label_w
    ly = lay.top_pad + lay.grid_h + lay.axis_h + 6
    lw = 240
    stops = "".join(f'<stop offset="{k / 10:.1f}" stop-color="{wait_color(k / 10)}"/>' for k in range(11))
    out = [
        f'<defs><linearGradient id="tk-wait-scale">{stops}</linearGradient></defs>'
        f'<text x="{label_w - 5}" y="{ly + 10:.1f}" text-anchor="end">wait</text>'
        f'<rect x="{label_w}" y="{ly:.1f}" width="{lw}" height="12" fill="url(#tk-wait-scale)" stroke="#ccc"/>'
    ]
    for k in range(5):
        out.append(
            f'<text x="{label_w + lw * k / 4:.1f}" y="{ly + 25:.1f}" text-anchor="middle">'
            f"{top * k / 4 / 1e6:,.2f}</text>"
        )
    out.append(
        f'<text x="{label_w + lw + 22}" y="{ly + 25:.1f}">ms</text>'
        f'<circle cx="{label_w + lw + 50}" cy="{ly + 6:.1f}" r="5" fill="#fff" stroke="#000"/>'
        f'<text x="{label_w + lw + 60}" y="{ly + 10:.1f}">the step\'s straggler (last most often)</text>'
        f'<rect x="{label_w + lw + 290}" y="{ly:.1f}" width="12" height="12" fill="#fff" stroke="#ccc"/>'
        f'<text x="{label_w + lw + 308}" y="{ly + 10:.1f}">not recorded whole</text></svg>'
    )
    return "".join(out)


def _title_and_note(g: _Grid) -> tuple[str, str]:
    """The picture's title (saying what was sampled) and its note (how to read it)."""
    sampled = []
    if len(g.col_steps) < len(g.all_steps):
        sampled.append(f"{len(g.col_steps):,} of {len(g.all_steps):,} steps")
    if len(g.row_ranks) < len(g.all_ranks):
        sampled.append(f"{len(g.row_ranks):,} of {len(g.all_ranks):,} ranks")
    title = "Waits per rank and step" + (f" ({', '.join(sampled)}, sampled)" if sampled else "")
    notes = []
    if sampled:
        notes.append(
            f"sampled: {' and '.join(sampled)} drawn, evenly spaced from the first to the last"
            + (
                f" (the ranks most often a step's straggler first, up to {MAX_RANK_ROWS // 4})"
                if len(g.row_ranks) < len(g.all_ranks)
                else ""
            )
            + "; the tables below and the JSON sidecar hold every one"
        )
    notes.append(
        "a cell is a rank's wait in a global step (Σ over its collectives of last arrival − own arrival), "
        f"darker = longer, the scale from 0 to the longest drawn ({_ms(g.top if len(g.wait_ns) else 0)}); "
        "white: the rank did not record the step whole; a ring marks the step's straggler; hover a cell for "
        "its numbers"
    )
    return title, "; ".join(notes)


def _lead(s: dict) -> str:
    """The run's sentence above the picture, with how many collectives tied (no last rank)."""
    ties = ""
    st = s.get("straggler") if isinstance(s.get("straggler"), dict) else None
    if num(s.get("collectives")) is not None and st and num(st.get("of")) is not None:
        nt = int(s["collectives"]) - int(st["of"])
        ties = (
            f' <span class="note">({nt:,} of {int(s["collectives"]):,} collectives tied: no last rank)</span>'
            if nt > 0
            else ""
        )
    return _missing_html(s) + f'<p class="lead">{esc(imbalance_sentence(s))}{ties}</p>'


def _missing_html(r: dict) -> str:
    """The line naming the ranks without a trace (``ranks_text.missing_line``), as a warning paragraph; "" when
    none is missing."""
    line = missing_line(r)
    return "" if line is None else f'<p class="warn missing-ranks">{esc(line)}</p>'


def run_ranks_part(result: Result) -> tuple[str, str] | None:
    """(title, html) of the ranks of a run in ``report RUN_DIR`` (``summary.ranks``): the line naming its ranks
    without a trace, when some are, then the run's sentence — the terminal section's words; its tables are among
    the page's tables. None for any other result."""
    r = result.summary.get("ranks")
    if result.command != "report" or not isinstance(r, dict):
        return None
    title = ranks_title(r)
    return title[:1].upper() + title[1:], _missing_html(r) + f'<p class="lead">{esc(ranks_sentence(r))}</p>'


def rank_step_waits(result: Result) -> tuple[str, str, str] | None:
    """(title, html, note) of the rank × step picture of an ``imbalance`` result: a row per rank, a column per global
    step, each cell coloured by the rank's wait in that step (``tables.steps.wait_ns``; no cell where the rank-step
    was not recorded whole), the straggler of each step (``tables.by_step.straggler``) marked with a ring, a scale in
    ms, a hover title on every cell and the summary's sentence above it. At most ``MAX_RANK_ROWS`` ×
    ``MAX_STEP_COLS`` cells: beyond, steps (and ranks) are sampled evenly and the title and note say so."""
    steps = result.tables.get("steps")
    if steps is None or not len(steps) or not {"step", "rank", "wait_ns"} <= set(steps.columns):
        return None
    g = _grid(result, steps)
    lay = _layout(len(g.col_steps), len(g.row_ranks))
    out = [
        f'<svg class="rank-step-waits" viewBox="0 0 {CHART_W} {lay.h}" width="{CHART_W}" height="{lay.h}" role="img">',
        f'<rect x="{lay.label_w}" y="{lay.top_pad}" width="{lay.grid_w:.2f}" height="{lay.grid_h:.2f}" fill="#fff" '
        'stroke="#ccc"/>',
        *_rank_labels(g, lay, _rank_names(result.tables.get("ranks"))),
        _wait_cells(g, lay),
        *_straggler_rings(g, lay),
        *_step_axis(g, lay),
        _wait_scale(g.top, lay),
    ]
    title, note = _title_and_note(g)
    return title, _lead(result.summary) + "".join(out), note
