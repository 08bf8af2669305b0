"""The ranks section of `tracekit report RUN_DIR` for a terminal (issue 28), after the reference rank's report: a
line naming the ranks of the world without a trace when some are (so the imbalance is a lower bound, issue 40), one
sentence — the DP imbalance per step and the straggler (who, how often last, its bs against the median's) — then
the per-rank table (clock offset, steps, times last, total wait), drawn by the same renderer as `tracekit imbalance`
(``terminal.to_text``, passed in). The per-step and instance tables (``rank_by_step``, ``rank_steps``, ``rank_collectives``,
``rank_per_collective``) are left to ``--all``, ``-f json`` and `tracekit imbalance`, and said so."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..result import Result, shown_ranks
from .human import fit, safe_text, wrap_prose

SHOWN = ("ranks", "rank_by_step")  # drawn in the section: the ranks, then the per-step stragglers
DETAIL = ("rank_steps", "rank_collectives", "rank_per_collective")  # --all or -f json
BY_STEP_SHOWN = 8  # more steps than this: the per-step table is cut by imbalance (the worst steps, and says so)
SECTION_LINES = 30  # the section's own budget of lines (the report is one screen: report_text.SCREEN_LINES)
CLOCK_WORDS = {  # summary.clock (issue 40: a clock that stepped, or fits badly, is said)
    "aligned": "One clock (aligned)",
    "stepped": "One clock (aligned; a rank's clock stepped and was repaired)",
    "suspect": "One clock (aligned; a rank's clock is suspect)",
}


def _ms(ns) -> str:
    return "–" if ns is None else f"{ns / 1e6:,.3f} ms"


def _bs(v) -> str:
    return "–" if v is None else f"{v:g}"


def _imbalance_word(r: dict) -> str:
    """DP imbalance where the steps give the ranks' batches (serving under DP attention); else, a training run's say,
    the ranks' imbalance."""
    st = r.get("straggler") or {}
    return "DP imbalance" if st.get("bs") is not None or st.get("median_bs") is not None else "Imbalance"


def ranks_title(r: dict) -> str:
    """The section's title: the rank this report's trace is of (``analysed_rank``: ``--device N`` on an export of
    several processes names another than the reference rank, the clocks' reference)."""
    ref, mine = r.get("reference_rank"), r.get("analysed_rank", r.get("reference_rank"))
    if mine == ref:
        return f"ranks of the run — {r.get('ranks')} ranks, reference rank {ref} (this report's trace)"
    return f"ranks of the run — {r.get('ranks')} ranks; this report's trace: rank {mine} (reference rank {ref})"


def missing_line(r: dict) -> str | None:
    """The ranks of the run's world that have no trace, and that the imbalance is therefore a lower bound, in one
    line (``summary.ranks`` of a report, or an imbalance summary: ``missing_ranks``, ``world_size``,
    ``world_size_from``); None when no rank is missing. The terminal, Markdown and HTML reports all print it."""
    miss = [int(x) for x in (r.get("missing_ranks") or [])]
    if not miss:
        return None
    many = len(miss) > 1
    return (
        f"Missing: rank{'s' if many else ''} {shown_ranks(miss)} of the world of {r.get('world_size')}"
        f" ({r.get('world_size_from') or 'unknown'}) {'have' if many else 'has'} no trace, so the imbalance is a lower bound."
    )


def ranks_sentence(r: dict) -> str:
    """``summary.ranks`` of a report in words."""
    head = (
        f"{CLOCK_WORDS.get(r.get('clock'), 'Clocks as recorded (not aligned)')};"
        f" {r.get('steps')} global steps ({r.get('partial_steps')} not recorded whole, left out of the claims),"
        f" {r.get('collectives')} collective instances ({r.get('unmatched')} unmatched). {_imbalance_word(r)}"
        f" per step (Σ last − median arrival): mean {_ms(r.get('imbalance_ns_mean_per_step'))}, median"
        f" {_ms(r.get('imbalance_ns_per_step'))}"
    )
    worst = r.get("worst_steps") or []
    if worst:
        head += "; worst " + ", ".join(
            f"step {w['step']} {_ms(w['imbalance_ns'])}"
            + (f" (rank {w['straggler']})" if w["straggler"] is not None else "")
            for w in worst
        )
    st = r.get("straggler")
    if st is None:
        return head + "; no straggler: every collective instance ties within the alignment's residual."
    if r.get("straggler_rotates"):
        groups = "; ".join(
            f"rank {g['rank']} in step{'s' if len(g['steps']) > 1 else ''} {', '.join(map(str, g['steps']))}"
            for g in r.get("stragglers") or []
        )
        return head + f". The last rank changes from step to step: {groups} (the per-step table)."
    bs = (
        ""
        if st.get("bs") is None and st.get("median_bs") is None  # no step marker says a batch size
        else f", its bs {_bs(st.get('bs'))} against a median of {_bs(st.get('median_bs'))}"
    )
    return (
        head + f"; straggler rank {st['rank']}: last at {st['times_last']} of {st['of']} instances that are no tie{bs}."
    )


def ranks_part(result: Result, width: int, all_rows: bool, draw: Callable[..., str]) -> tuple[Result, list[str]]:
    """(``result`` without what the section draws, the section's lines) for a report of a run's ranks; any other
    result comes back as it is, with no lines. ``draw`` is the terminal renderer (``terminal.to_text``, which calls
    this: passed in, so that the two modules do not import each other)."""
    r = result.summary.get("ranks")
    if result.command != "report" or not isinstance(r, dict):
        return result, []
    shown = {n: result.tables[n] for n in SHOWN if n in result.tables}
    if not all_rows and "ranks" in shown and {"rank", "times_last"} <= set(shown["ranks"].columns):
        # most important first: the ranks most often last lead, so that a cut table keeps the straggler
        shown["ranks"] = (
            shown["ranks"]
            .sort_values(["times_last", "rank"], ascending=[False, True], kind="stable")
            .reset_index(drop=True)
        )
        shown["ranks"].attrs["order_by"] = "times_last"
    if not all_rows and len(shown.get("rank_by_step", ())) > BY_STEP_SHOWN:  # the worst steps, said as a cut table
        by = shown["rank_by_step"].copy()
        by.attrs["order_by"] = "imbalance_ns"
        shown["rank_by_step"] = by
    sub = Result(command="imbalance", inputs=[], params={}, summary={}, tables=shown)
    lines = [fit(safe_text(ranks_title(r)), width)]
    missing = missing_line(r)
    if missing is not None:  # its own line, before the numbers it bounds (issue 40)
        lines += wrap_prose(safe_text(missing), width)
    lines += wrap_prose(safe_text(ranks_sentence(r)), width)
    drawn = draw(sub, width, all_rows=all_rows, max_lines=SECTION_LINES).splitlines()[1:]  # not its title
    lines += [ln for ln in drawn if ln.strip()]
    hide = set(SHOWN) | (set() if all_rows else set(DETAIL))
    left = [n for n in DETAIL if n in result.tables and not all_rows and len(result.tables[n])]
    if left:
        lines += wrap_prose(
            "not shown: "
            + ", ".join(f"{n} ({len(result.tables[n]):,} rows)" for n in left)
            + " — --all, -f json or tracekit imbalance RUN_DIR has them",
            width,
        )
    summary = {k: v for k, v in result.summary.items() if k != "ranks"}
    tables = {k: v for k, v in result.tables.items() if k not in hide}
    return replace(result, summary=summary, tables=tables), lines
