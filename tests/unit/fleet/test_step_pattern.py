"""Global steps from the pattern of collectives (issue 40): each step's pattern, the global steps' patterns and the
choice among shifts that step starts leave tied, on small hand-built cases."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyses.fleet.multirank import step_pattern
from tracekit.analyses.fleet.multirank.align import coarse_steps

PERIOD = 1_000_000  # steps of 1 ms, all of one length


def _rank(kinds_per_step: list[list[str]], t0: int = 0) -> dict:
    """A rank's steps table and collectives: step i starts at t0 + i ms and runs ``kinds_per_step[i]`` in order."""
    steps = pd.DataFrame(
        {
            "local_step": np.arange(len(kinds_per_step), dtype=np.int64),
            "start_ns": t0 + np.arange(len(kinds_per_step), dtype=np.int64) * PERIOD,
        }
    )
    rows = [
        (i, k, t0 + i * PERIOD + 10_000 * (j + 1), 1 + (k == "dispatch2"))
        for i, ks in enumerate(kinds_per_step)
        for j, k in enumerate(ks)
    ]
    coll = pd.DataFrame(rows, columns=["local_step", "kind", "start_ns", "kernels"])
    coll["kind"] = coll["kind"].str.replace("dispatch2", "dispatch")
    return {"steps": steps, "collectives": coll}


def test_equal_patterns_share_an_integer_and_order_and_kernels_count():
    dc = ["dispatch", "combine"]
    a = _rank([dc, dc, ["combine", "dispatch"], dc + ["allgather"], ["dispatch2", "combine"], []])
    b = _rank([dc, dc + ["allgather"]], t0=5)
    knames = pd.Index(["allgather", "combine", "dispatch"])
    sig = step_pattern.step_signatures({0: a, 1: b}, knames)
    s0, s1 = sig[0], sig[1]
    assert s0[0] == s0[1] == s1[0]  # the same kinds in the same order
    assert len({s0[0], s0[2], s0[3], s0[4]}) == 4  # order, an extra collective, a notify + dispatch: each differs
    assert s0[3] == s1[1]
    assert s0[5] == 0  # a step with no collective


def test_pool_patterns_take_the_most_common_near_each_step():
    pool = np.array([0.0, 1e6, 2e6])
    points = np.array([10.0, -5.0, 20.0, 1e6 + 3, 1e6 - 7, 5e6])
    sigs = np.array([4, 4, 9, 7, 7, 1])
    got = step_pattern.pool_patterns(points, sigs, pool, 300_000.0)
    assert got.tolist() == [4, 7, step_pattern.UNKNOWN]


def test_choose_takes_the_only_best_match_and_none_on_a_tie():
    pool_sig = np.array([1, 1, 2, 1, 1])
    sig = np.array([2, 1])
    cands = [np.array([0, 1]), np.array([1, 2]), np.array([2, 3])]  # the rank's two steps at 0-1, 1-2, 2-3
    assert step_pattern.choose(sig, cands, pool_sig) == 2
    assert step_pattern.choose(np.array([1, 1]), [np.array([0, 1]), np.array([3, 4])], pool_sig) is None
    assert step_pattern.choose(None, cands, pool_sig) is None


def _late_run(gather_at: set) -> tuple[dict, dict]:
    """Rank 0: 10 steps; rank 1 (its own node, a clock 4.5 steps behind): steps 4-9 only. Step starts alone fit
    shifts a whole step apart equally (−4.5 to −0.5 ms), and the smallest is wrong."""
    ks = [["dispatch", "combine"] + (["allgather"] if i in gather_at else []) for i in range(10)]
    ref = _rank(ks)
    late = _rank(ks[4:], t0=4 * PERIOD - 4_500_000)
    return {0: ref, 1: late}, {0: 0, 1: 1}


def _coarse(per_rank: dict, nodes: dict):
    knames = pd.Index(["allgather", "combine", "dispatch"])
    starts = {r: d["steps"]["start_ns"].to_numpy(np.int64) for r, d in per_rank.items()}
    return coarse_steps(starts, 0, nodes, step_pattern.step_signatures(per_rank, knames))


def test_a_late_rank_lands_on_its_steps_by_its_collectives():
    per_rank, nodes = _late_run({6})
    off, _, _, _, warnings = _coarse(per_rank, nodes)
    assert abs(off[1] + 4_500_000) < 1_000  # not −0.5 ms: the step with one more all-gather says which
    (said,) = warnings
    assert said.startswith("rank 1: its step starts fit a clock -4.500 ms or ")
    assert "the pattern of its collectives" in said and "matches the other ranks' only at -4.500 ms" in said


def test_steps_alike_throughout_are_said_ambiguous_with_what_would_tell():
    per_rank, nodes = _late_run(set())
    off, _, _, _, warnings = _coarse(per_rank, nodes)
    (said,) = warnings
    assert "may be off by a step" in said and "do not tell the steps apart" in said and "ProfilerStep" in said
    assert abs(off[1] + 500_000) < 1_000 and "smaller shift (-0.500 ms)" in said  # wrong, and said so


def test_node_mates_decide_silently_where_the_pattern_cannot():
    per_rank, _ = _late_run(set())
    per_rank[2] = _rank([["dispatch", "combine"]] * 10, t0=-4_500_000)
    starts = {r: d["steps"]["start_ns"].to_numpy(np.int64) for r, d in per_rank.items()}
    sig = step_pattern.step_signatures(per_rank, pd.Index(["combine", "dispatch"]))
    off, _, _, _, warnings = coarse_steps(starts, 0, {0: 0, 1: 1, 2: 1}, sig)
    assert abs(off[1] + 4_500_000) < 1_000 and warnings == []
