"""`tracekit imbalance` as text (issue 40, review of the run commands): the ranks table leads with the straggler
(times last, then the least total wait) in every ranks table, and the summary's straggler, worst steps, stragglers
and clock steps are sentences with units, never dicts dumped as ``key: value``."""

from __future__ import annotations

import pandas as pd

from tracekit.render.ranks_text import straggler_first
from tracekit.render.terminal import to_text
from tracekit.result import Result


def _imbalance() -> Result:
    n = 8
    ranks = pd.DataFrame(
        {
            "rank": range(n),
            "file": [f"worker{r}.json.gz" for r in range(n)],
            "node": range(n),
            "clock_offset_ns": [0, 1530, -500, 1040, -2580, -1000, -1000, -1000],  # largest offsets: not the straggler
            "residual_ns": pd.array([2280, 1710, 3100, 2160, 1740, 2000, 3600, 1300], dtype="Int64"),
            "steps": [1] * n,
            "times_last": [0, 0, 0, 0, 1, 2, 0, 5],
            "total_wait_ns": [5_586_000, 11_127_000, 3_282_000, 9_564_000, 6_373_000, 6_039_000, 3_340_000, 1_532_000],
        }
    )
    summary = {
        "ranks": n,
        "reference_rank": 0,
        "clock": "stepped",
        "steps": 3,
        "partial_steps": 1,
        "straggler": {"rank": 7, "times_last": 5, "of": 8},
        "clock_ranks": {
            "stepped": [{"rank": 1, "steps": [{"at_ns": 1_029_036_707, "within_ns": 5_400, "size_ns": 1_000_000}]}],
            "suspect": [{"rank": 3, "residual_ns": 120_000, "bound_ns": 50_000}],
        },
        "imbalance_ns_mean_per_step": 3_000_000,
        "worst_steps": [{"step": 2, "imbalance_ns": 4_993_337, "straggler": 7}],
        "straggler_rotates": False,
        "stragglers": [{"rank": 7, "steps": [0, 2]}],
    }
    return Result(command="imbalance", inputs=[], params={}, summary=summary, tables={"ranks": ranks})


def test_the_straggler_leads_the_ranks_table_and_the_summary_is_sentences():
    out = to_text(_imbalance(), 80, max_lines=22)  # the ranks table cut: its rows chosen by times last
    assert max(len(ln) for ln in out.splitlines()) <= 80
    assert "by times last" in out and "by clock offset" not in out
    rows = [ln.split()[0] for ln in out.splitlines() if "worker" in ln]
    assert rows[:2] == ["7", "5"] and len(rows) < 8  # the straggler first, then by times last, in a cut table
    for dump in ("at_ns:", "within_ns:", "imbalance_ns:", "times_last:", "rank: 7", "steps: 0"):
        assert dump not in out, dump
    text = " ".join(out.split())
    assert "Straggler rank 7: last at 5 of 8 instances that are no tie (steps recorded whole" in text
    assert "Worst steps: step 2 4.993 ms (rank 7 last)." in text
    assert "Last in the steps that cost: rank 7 in steps 0, 2." in text
    assert "Rank 1's clock stepped by +1,000.0 µs at 1,029.037 ms (±5.4 µs); repaired." in text
    assert "Rank 3's clock is suspect: its fit misses by 120.0 µs (bound 50.0 µs)." in text


def test_among_ranks_last_equally_often_the_least_waiting_leads():
    df = pd.DataFrame({"rank": [0, 1, 2], "times_last": [2, 2, 0], "total_wait_ns": [900, 100, 5]})
    assert straggler_first(df)["rank"].tolist() == [1, 0, 2]
