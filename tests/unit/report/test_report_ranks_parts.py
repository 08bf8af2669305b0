"""The pieces of `report RUN_DIR` (issue 28) that need no trace: two findings tables merged in the findings' order,
and the ranks sentence with and without a straggler."""

from __future__ import annotations

import pandas as pd

from tracekit.analyses.findings.rules import FINDING_COLUMNS
from tracekit.analyses.report.ranks_part import merge_findings
from tracekit.render.ranks_text import ranks_sentence


def _rows(*specs):
    rows = []
    for kind, ms, gib, minor in specs:
        r = {c: None for c in FINDING_COLUMNS}
        r.update(kind=kind, title=f"{kind} title", gain_ms_per_step=ms, gain_gib=gib, minor=minor, basis="measured")
        rows.append(r)
    df = pd.DataFrame(rows, columns=FINDING_COLUMNS)
    df["rank"] = range(1, len(df) + 1)
    for c in ("gain_ms_per_step", "gain_gib"):
        df[c] = pd.array(df[c].tolist(), dtype="Float64")
    return df


def test_merged_findings_keep_the_findings_order():
    trace = _rows(("gemm", 2.0, None, False), ("gaps", 0.1, None, True), ("kv", None, 3.0, False))
    ranks = _rows(("rank_imbalance", 5.0, None, False))
    m = merge_findings(trace, ranks)
    # time by gain, then memory by GiB, minor ones last; ranks renumbered from 1
    assert m["kind"].tolist() == ["rank_imbalance", "gemm", "kv", "gaps"]
    assert m["rank"].tolist() == [1, 2, 3, 4]
    assert merge_findings(trace, ranks.iloc[:0]) is trace and merge_findings(trace.iloc[:0], ranks) is ranks


def test_a_minor_rank_finding_goes_after_the_major_ones():
    m = merge_findings(_rows(("gemm", 2.0, None, False)), _rows(("rank_imbalance", 0.3, None, True)))
    assert m["kind"].tolist() == ["gemm", "rank_imbalance"]


def test_the_ranks_sentence():
    base = {
        "ranks": 8,
        "reference_rank": 0,
        "clock": "aligned",
        "steps": 4,
        "partial_steps": 1,
        "collectives": 32,
        "unmatched": 0,
        "imbalance_ns_per_step": 356_222,
    }
    s = ranks_sentence({**base, "straggler": {"rank": 3, "times_last": 12, "of": 24, "bs": 64.0, "median_bs": 16.0}})
    # per step, then summary (issue 40): the mean beside the median; the mean unknown here reads as such
    assert "DP imbalance per step" in s and "median 0.356 ms" in s and "(1 not recorded whole" in s
    assert (
        "straggler rank 3: last at 12 of 24 instances that are no tie (steps recorded whole, as the ranks table"
        " counts), its bs 64 against a median of 16." in s
    )
    worst = {
        "imbalance_ns_mean_per_step": 1_017_093,
        "worst_steps": [{"step": 2, "imbalance_ns": 2_431_506, "straggler": 2}],
    }
    s = ranks_sentence(
        {**base, **worst, "straggler": {"rank": 3, "times_last": 8, "of": 16, "bs": 64.0, "median_bs": 16.0}}
    )
    assert "mean 1.017 ms, median 0.356 ms; worst step 2 2.432 ms (rank 2)" in s
    rot = {"straggler_rotates": True, "stragglers": [{"rank": 3, "steps": [0, 3]}, {"rank": 5, "steps": [1]}]}
    s = ranks_sentence({**base, **rot, "straggler": {"rank": 5, "times_last": 12, "of": 24, "bs": 64.0}})
    assert "The last rank changes from step to step: rank 3 in steps 0, 3; rank 5 in step 1" in s
    assert "straggler rank 5" not in s  # a rotating straggler is not one rank
    tie = ranks_sentence({**base, "clock": "as recorded", "straggler": None})
    assert tie.startswith("Clocks as recorded") and "no straggler" in tie


def test_the_ranks_sentence_says_no_batch_size_it_does_not_have():
    """A training run's markers carry no bs: the sentence read 'its bs – against a median of –'."""
    base = {
        "ranks": 2,
        "reference_rank": 0,
        "clock": "aligned",
        "steps": 2,
        "partial_steps": 0,
        "collectives": 10,
        "unmatched": 0,
        "imbalance_ns_per_step": 201_094_000,
    }
    s = ranks_sentence({**base, "straggler": {"rank": 1, "times_last": 2, "of": 3, "bs": None, "median_bs": None}})
    assert s.endswith("straggler rank 1: last at 2 of 3 instances that are no tie.") and "bs" not in s
