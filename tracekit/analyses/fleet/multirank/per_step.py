"""Per step, then summary (issue 40): what a run's steps lost to imbalance, step by step, before any median.

A median over steps hides the stragglers that cost most (two steps of four losing 12 ms each have a median near 0),
so the summary gives the mean over the steps recorded whole, the worst of them, and who was last in the steps that
cost — one rank, or a straggler that rotates. A partial step (a rank's file started or ended inside it) is flagged
and kept out of every claim: its last rank may be one whose file ended before the real straggler arrived.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

WORST_STEPS = 3  # the summary lists at most this many worst steps
COSTLY_SHARE = 0.5  # a step "costs" when its imbalance is at least this share of the mean: who was last there counts


def complete_steps(by_step: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``by_step`` recorded whole on every rank (column ``partial`` false) and whose imbalance no clock
    step left uncertain (column ``clock_uncertain``, where there is one, false); all rows when none is."""
    keep = ~by_step["partial"].astype(bool)
    if "clock_uncertain" in by_step:
        keep &= ~by_step["clock_uncertain"].astype(bool)
    whole = by_step[keep]
    return whole if len(whole) else by_step


def per_step_summary(by_step: pd.DataFrame) -> dict:
    """The summary keys of the per-step view of ``by_step`` (columns step, imbalance_ns, straggler, partial):

    ``imbalance_ns_mean_per_step`` — the mean over the complete steps (integer ns, rounded down; null with none);
    ``worst_steps`` — up to 3 complete steps at or above that mean, largest first: step, imbalance_ns, straggler;
    ``stragglers`` — who was last in the complete steps that cost (imbalance ≥ half the mean): rank and its steps,
    the rank of most steps first; ``straggler_rotates`` — two ranks or more there, none in more than half of them."""
    done = complete_steps(by_step)
    if not len(done):
        return {"imbalance_ns_mean_per_step": None, "worst_steps": [], "straggler_rotates": False, "stragglers": []}
    imb = done["imbalance_ns"].to_numpy(np.int64)
    mean = int(imb.sum() // len(imb))
    order = done.assign(_neg=-imb).sort_values(["_neg", "step"], kind="stable")
    worst = order[order["imbalance_ns"] >= mean].head(WORST_STEPS)
    costly = done[(imb >= COSTLY_SHARE * mean) & done["straggler"].notna().to_numpy(bool)].sort_values("step")
    groups: dict[int, list[int]] = {}
    for g, r in zip(costly["step"].tolist(), costly["straggler"].tolist()):  # one per step: a handful
        groups.setdefault(int(r), []).append(int(g))
    most = max((len(v) for v in groups.values()), default=0)
    return {
        "imbalance_ns_mean_per_step": mean,
        "worst_steps": [
            {"step": int(g), "imbalance_ns": int(v), "straggler": None if pd.isna(r) else int(r)}
            for g, v, r in zip(worst["step"], worst["imbalance_ns"], worst["straggler"])
        ],
        "straggler_rotates": len(groups) >= 2 and 2 * most <= len(costly),
        "stragglers": [
            {"rank": r, "steps": v} for r, v in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        ],
    }


def steps_text(steps: list[int]) -> str:
    """Step ids as a person writes them: ``1–3, 5`` (a run of consecutive steps joined by a dash)."""
    out, run = [], []
    for g in sorted(steps):
        if run and g == run[-1] + 1:
            run.append(g)
            continue
        if run:
            out.append(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [g]
    if run:
        out.append(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)
