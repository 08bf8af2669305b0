"""The ranks section of `tracekit report RUN_DIR` for a terminal (issue 28), after the reference rank's report: a
line naming the ranks of the world without a trace when some are (so the imbalance is a lower bound, issue 40), one
sentence — the DP imbalance per step and the straggler (who, how often last, its bs against the median's) — then
the per-rank table (clock offset, steps, times last, total wait), drawn by the same renderer as `tracekit imbalance`
(``terminal.to_text``, passed in). The per-step and instance tables (``rank_by_step``, ``rank_steps``, ``rank_collectives``,
``rank_per_collective``) are left to ``--all``, ``-f json`` and `tracekit imbalance`, and said so."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pandas as pd

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


IMBALANCE_SAID = ("straggler", "worst_steps", "stragglers", "clock_ranks")  # imbalance's summary, said in words


def straggler_first(df: pd.DataFrame) -> pd.DataFrame:
    """A ranks table (``rank, …, times_last, total_wait_ns``) with the straggler first: the ranks most often last
    lead, then the most waited on among equals (the least total wait), then by rank — so that a table cut to a few
    rows keeps the straggler (``tracekit imbalance`` and the report's ranks section alike)."""
    if not {"rank", "times_last"} <= set(df.columns):
        return df
    keys, asc = ["times_last"], [False]
    if "total_wait_ns" in df.columns:
        keys, asc = keys + ["total_wait_ns"], asc + [True]
    out = df.sort_values(keys + ["rank"], ascending=asc + [True], kind="stable").reset_index(drop=True)
    out.attrs = {**df.attrs, "order_by": "times_last"}
    return out


def _us(ns) -> str:
    return "–" if ns is None else f"{ns / 1e3:+,.1f} µs"


def clock_sentences(c: dict | None) -> list[str]:
    """``summary.clock_ranks`` in words: each stepped rank's clock steps (when, by how much) and each suspect rank's
    residual against its bound; nothing when every rank is plainly aligned."""
    out = []
    for x in (c or {}).get("stepped") or []:
        steps = ", ".join(
            f"by {_us(st.get('size_ns'))} at {st.get('at_ns', 0) / 1e6:,.3f} ms (±{(st.get('within_ns') or 0) / 1e3:,.1f} µs)"
            for st in x.get("steps") or []
        )
        out.append(f"Rank {x.get('rank')}'s clock stepped {steps or '(when unknown)'}; repaired.")
    for x in (c or {}).get("suspect") or []:
        res, bound = x.get("residual_ns"), x.get("bound_ns")
        out.append(
            f"Rank {x.get('rank')}'s clock is suspect: its fit misses by {'–' if res is None else f'{res / 1e3:,.1f}'} µs"
            f" (bound {'–' if bound is None else f'{bound / 1e3:,.1f}'} µs)."
        )
    return out


def straggler_sentences(r: dict) -> list[str]:
    """Who is last, in words, from an imbalance summary (or a report's ``summary.ranks``): the straggler — the rank
    last at most collective instances that are no tie, over the steps recorded whole (``straggler``) —, the worst
    steps, and who was last in the steps that cost (``stragglers``), said as rotating where it rotates."""
    out = []
    st = r.get("straggler")
    whole = " (steps recorded whole, as the ranks table counts)" if r.get("partial_steps") else ""
    if st is None:
        out.append("No straggler: every collective instance ties within the alignment's residual.")
    else:
        out.append(
            f"Straggler rank {st['rank']}: last at {st['times_last']} of {st['of']} instances that are no tie{whole}."
        )
    worst = r.get("worst_steps") or []
    if worst:
        out.append(
            "Worst steps: "
            + ", ".join(
                f"step {w['step']} {_ms(w['imbalance_ns'])}"
                + (f" (rank {w['straggler']} last)" if w.get("straggler") is not None else "")
                for w in worst
            )
            + "."
        )
    groups = r.get("stragglers") or []
    if groups:
        said = "; ".join(
            f"rank {g['rank']} in step{'s' if len(g['steps']) > 1 else ''} {', '.join(map(str, g['steps']))}"
            for g in groups
        )
        lead = (
            "The last rank changes from step to step" if r.get("straggler_rotates") else "Last in the steps that cost"
        )
        out.append(f"{lead}: {said}.")
    return out


def imbalance_part(result: Result, width: int) -> tuple[Result, list[str]]:
    """(``result`` without the summary entries said in words, those words) for `tracekit imbalance`: its ranks table
    with the straggler first (:func:`straggler_first`); the straggler, the worst steps, who was last where it cost
    and the clocks that stepped or fit badly as sentences with units, not dicts."""
    tables = dict(result.tables)
    if "ranks" in tables and len(tables["ranks"]):
        tables["ranks"] = straggler_first(tables["ranks"])
    s = result.summary
    if not any(k in s for k in IMBALANCE_SAID):
        return replace(result, tables=tables), []
    lines = [
        ln
        for t in straggler_sentences(s) + clock_sentences(s.get("clock_ranks"))
        for ln in wrap_prose(safe_text(t), width)
    ]
    summary = {k: v for k, v in s.items() if k not in IMBALANCE_SAID}
    return replace(result, summary=summary, tables=tables), lines


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
    whole = " (steps recorded whole, as the ranks table counts)" if r.get("partial_steps") else ""
    costly = [g for g in r.get("stragglers") or [] if g["rank"] != st["rank"]]
    other = (r.get("stragglers") or [{}])[0].get("rank") if r.get("stragglers") else None
    also = (
        f" Last in the steps that cost: rank {other} (step{'s' if len(costly[0]['steps']) > 1 else ''}"
        f" {', '.join(map(str, costly[0]['steps']))})."
        if other is not None and other != st["rank"] and costly
        else ""
    )
    return (
        head
        + f"; straggler rank {st['rank']}: last at {st['times_last']} of {st['of']} instances that are no tie{whole}"
        f"{bs}.{also}"
    )


def ranks_part(result: Result, width: int, all_rows: bool, draw: Callable[..., str]) -> tuple[Result, list[str]]:
    """(``result`` without what the section draws, the section's lines) for a report of a run's ranks; any other
    result comes back as it is, with no lines. ``draw`` is the terminal renderer (``terminal.to_text``, which calls
    this: passed in, so that the two modules do not import each other)."""
    if result.command == "imbalance":  # tracekit imbalance (and the ranks section's own tables, drawn through it)
        return imbalance_part(result, width)
    r = result.summary.get("ranks")
    if result.command != "report" or not isinstance(r, dict):
        return result, []
    shown = {n: result.tables[n] for n in SHOWN if n in result.tables}
    if "ranks" in shown:  # most important first: the straggler leads, so that a cut table keeps it
        shown["ranks"] = straggler_first(shown["ranks"])
    by = shown.get("rank_by_step")
    if by is not None and "clock_uncertain" in by.columns:  # 80 columns: said only where a step has one (issue 40)
        unsure = by["clock_uncertain"].astype(bool).any()
        by = by.rename(columns={"clock_uncertain": "stepped"}) if unsure else by.drop(columns="clock_uncertain")
        shown["rank_by_step"] = by
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
