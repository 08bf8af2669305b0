"""``report`` in a terminal: one screen (80 × 50 at the least) that reads — the headline, one step by cost, the top
findings — and a line naming what ``--all`` adds. json, csv, md, html and ``--all`` hold every table.

The step shown is the report's ``timeline_step`` (the median step), its time charged to categories (then to block or
layer types when the report has them), most costly first.
"""

from __future__ import annotations

import pandas as pd

from ..result import Result, plain_value, utf8_text
from .findings_text import findings_lines, is_findings
from .human import label_of, origin_of, safe_text, value_text, wrap_prose
from .table_layout import _draw, _heights, _summary_lines, _table_block, _title, terminal_width

SCREEN_LINES = 50  # the report fits this many lines by default
HEADLINE = (
    "steps",
    "marker",
    "phases",
    "trustworthy",
    "median_wall_ns",
    "median_busy_ns",
    "median_idle_ns",
    "median_exposed_ns_per_step",
    "layers_from",
    "fitting_annotation",
    "shapes",
)
STEP_COLUMNS = ("name", "wall_ns", "wall_pct", "overlapped_ns")
STEP_UNITS = {"wall_ns": "ms", "overlapped_ns": "ms"}  # every step table of every report in one unit
SECOND_GROUPS = ("block_type", "layer_type")  # after the categories, when the report charges the step to these
FIRST_ROWS = 12  # categories shown (the rest: --all)
SECOND_ROWS = 6


def _one_step(result: Result) -> tuple[int | None, list[tuple[str, pd.DataFrame]]]:
    """The step shown and its tables (one per grouping, most costly first)."""
    df = result.tables.get("one_step")
    if df is None or not len(df) or not {"step", "group_by", *STEP_COLUMNS} <= set(df.columns):
        return None, []
    step = plain_value(result.summary.get("timeline_step"))
    steps = df["step"].tolist()
    if step not in steps:
        step = steps[0]
    mine = df[df["step"] == step]
    out = []
    for group in ("category", *SECOND_GROUPS):
        g = mine[mine["group_by"] == group]
        if len(g):
            g = g.sort_values("wall_ns", ascending=False, kind="stable")[list(STEP_COLUMNS)].reset_index(drop=True)
            out.append((group, g.rename(columns={"name": group})))
    return int(step), out


def report_text(
    result: Result, width: int | None = None, *, wide: bool = False, lines: int = SCREEN_LINES
) -> str | None:
    """The report on one screen of ``lines`` lines (see the module's docstring); None without a one-step table
    (``terminal.to_text`` then draws the usual tables, held to the same number of lines)."""
    width = max(20, width or terminal_width())
    step, groups = _one_step(result)
    if step is None:
        return None
    origin = origin_of(result)
    items = [
        (label_of(k, result.summary), value_text(k, result.summary[k], origin))
        for k in HEADLINE
        if k in result.summary and plain_value(result.summary[k]) is not None
    ]
    head, notes = _summary_lines(items, width)
    out = [_title(result), *head, *notes]
    finding_lines: list[str] = []
    for name, df in result.tables.items():
        if len(df) and is_findings(df):
            finding_lines += findings_lines(name, df, width, False, detailed=False, wide=wide)
    shown = {"one_step", *(n for n, df in result.tables.items() if len(df) and is_findings(df))}
    rest = [n for n, df in result.tables.items() if n not in shown and len(df)]
    tail = (
        wrap_prose(
            f"--all shows every table ({', '.join(safe_text(n) for n in rest)}); -f html draws the timeline", width
        )
        if rest
        else []
    )
    budget = lines - len(out) - len(finding_lines) - len(tail)
    for k, (group, df) in enumerate(groups):
        title = f"step {step} by {group.replace('_', ' ')}"
        block = _table_block(title, df, None, width, None, wide, units=STEP_UNITS)
        base, per_row = _heights(block, width)
        room = budget - base - (1 if len(groups) > k + 1 else 0)  # a line kept for the next title
        room = min(room, FIRST_ROWS if k == 0 else SECOND_ROWS)
        n = 0
        while n < len(per_row) and sum(per_row[: n + 1]) <= room:
            n += 1
        if n == 0:
            break
        block.shown = n
        block.order = " by wall ms"
        drawn = _draw(block, block.rows[:n], width)
        out += drawn
        budget -= len(drawn)
    return utf8_text("\n".join([*out, *finding_lines, *tail]) + "\n")
