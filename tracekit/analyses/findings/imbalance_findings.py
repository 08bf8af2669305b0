"""Findings of a run's ranks (issue 28): what DP imbalance costs per step and which rank makes the others wait,
read from a ``tracekit imbalance`` result (contract ``tracekit.imbalance/2``). The words are data
(``rank_imbalance``, ``rank_straggler`` and ``rank_advice`` in tracekit/data/findings.json)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...result import Result, shown_text
from .rules import finding, finding_rules, ms_text, rank_findings, words


def _lower_median(values) -> float | None:
    v = np.sort(np.asarray(pd.Series(values).dropna(), dtype=float))
    return float(v[(len(v) - 1) // 2]) if v.size else None


def _num(v) -> str:
    return "–" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:g}"


def straggler_batch(imb: Result) -> tuple[float | None, float | None]:
    """(the straggler's bs, the median rank's bs) of an imbalance result: lower medians over the steps it led and
    over all steps (``tables.by_step``); (None, None) with no straggler."""
    straggler = imb.summary.get("straggler")
    by = imb.tables["by_step"]
    if straggler is None:
        return None, None
    led = by[by["straggler"].astype("Float64") == int(straggler["rank"])]
    return (_lower_median(led["straggler_bs"]) if len(led) else None), _lower_median(by["median_bs"])


def rank_findings_of(imb: Result, *, min_ms: float | None = None, min_pct: float | None = None) -> Result:
    """`tracekit findings RUN_DIR`: the imbalance findings of every rank of one run. ``imb`` is what
    ``tracekit.imbalance(RUN_DIR)`` returned."""
    if getattr(imb, "command", None) != "imbalance":
        raise UsageError("findings(ranks=…) takes the result of tracekit.imbalance(RUN_DIR)")
    rules = finding_rules()
    min_ms = float(rules["min_ms"]) if min_ms is None else float(min_ms)
    min_pct = float(rules["min_pct"]) if min_pct is None else float(min_pct)
    s, t = imb.summary, imb.tables
    paths = [str(i["path"]) for i in imb.inputs]
    run = shown_text(os.path.commonpath(paths)) if len(paths) > 1 else (shown_text(paths[0]) if paths else "RUN_DIR")
    steps, by, per = t["steps"], t["by_step"], t["per_collective"]
    step_ns = _lower_median(steps["wall_ns"]) or 0.0
    rows, why = [], None
    straggler = s.get("straggler")
    if straggler is None:
        why = (
            "every collective instance ties within the clock alignment's residual: no rank makes the others wait"
            if len(per)
            else "no collective ran on two ranks"
        )
    else:
        rank = int(straggler["rank"])
        mine = per[per["last_rank"].astype("Float64") == rank]
        causes = mine["cause"].dropna().astype(str).str.split(":").str[0].str.strip()
        cause = causes.mode().iloc[0] if len(causes) else "unknown"
        advice_of = rules["rank_advice"]
        advice = advice_of.get(cause, advice_of["unknown"])
        bs, median_bs = straggler_batch(imb)
        gain = s.get("imbalance_ns_per_step")
        pct = f"{100.0 * gain / step_ns:.1f} %" if gain is not None and step_ns else "–"
        ev = (
            f"median over {len(by)} step(s) of Σ (last − median arrival): {ms_text(gain or 0)}; median step"
            f" {ms_text(step_ns)}; rank {rank} last at {straggler['times_last']} of {straggler['of']} instances"
            f" that are no tie, its batch {_num(bs)} against a median of {_num(median_bs)}; causes of its lateness:"
            f" {', '.join(f'{c} {n}' for c, n in causes.value_counts().items()) or 'none named'}"
        )
        if gain:  # DP imbalance where the steps say each rank's batch; else (a training run) the ranks' imbalance
            kind = "rank_imbalance" if bs is not None else "rank_imbalance_unbatched"
            rows.append(
                finding(
                    None,
                    kind,
                    "ranks",
                    gain_ns=float(gain),
                    step_ns=step_ns,
                    evidence=ev,
                    words=words(
                        kind,
                        gain=f"{ms_text(gain)} per step",
                        pct=pct,
                        rank=rank,
                        bs=_num(bs),
                        median_bs=_num(median_bs),
                        run=run,
                        advice=advice,
                        times_last=straggler["times_last"],
                        of=straggler["of"],
                        cause=cause,
                    ),
                )
            )
        else:  # no time to give: who is last, and why
            rows.append(
                finding(
                    None,
                    "rank_straggler",
                    "ranks",
                    step_ns=step_ns,
                    evidence=ev,
                    words=words(
                        "rank_straggler",
                        rank=rank,
                        times_last=straggler["times_last"],
                        of=straggler["of"],
                        cause=cause,
                        run=run,
                        advice=advice,
                    ),
                )
            )
    table = rank_findings(rows, min_ms=min_ms, min_gib=float(rules["min_gib"]), min_pct=min_pct)
    major = table[~table["minor"]]
    summary = {
        "step_ms": step_ns / 1e6,
        "findings": int(len(table)),
        "major": int(len(major)),
        "minor": int(table["minor"].sum()),
        "total_gain_ms": float(np.nansum(table["gain_ms_per_step"].to_numpy(dtype=float, na_value=np.nan))),
        "top": str(table["title"].iloc[0]) if len(table) else None,
        "ranks": s.get("ranks"),
        "steps": s.get("steps"),
        "clock": s.get("clock"),
        **{k: s[k] for k in ("world_size", "missing_ranks", "imbalance_is_lower_bound") if k in s},  # issue 40
    }
    status = pd.DataFrame([{"source": "ranks", "ran": True, "findings": len(rows), "reason": why}])
    return Result(
        command="findings",
        inputs=list(imb.inputs),
        params={**imb.params, "min_ms": min_ms, "min_pct": min_pct, "ranks": True},
        summary=summary,
        tables={"findings": table, "sources": status},
        warnings=list(imb.warnings) + ([why] if why else []),
    )
