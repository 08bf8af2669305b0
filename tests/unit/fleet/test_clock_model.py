"""The clock model of a run's ranks (issue 40; tracekit/analyses/fleet/multirank/clock_model.py, align.py) on small
series whose answer is worked out by hand: a clock step found as a change point and repaired, a drift not cut into
steps, a wandering clock left whole (suspect), the statuses' bound from the node-mates, the step starts' shift taken
from the node-mates where several fit, and an ambiguity said."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analyses.fleet.multirank import clock_model
from tracekit.analyses.fleet.multirank.align import coarse_steps, fine_clock, robust_fit


def _series(n=40, step_at=None, size=0, drift_ppb=0, wander=0, gap=50_000):
    """n ends every ``gap`` ns of true time on a clock 1 ms ahead, stepping by ``size`` from end ``step_at``."""
    T = np.arange(n, dtype=np.float64) * gap
    d = 1_000_000 + drift_ppb * T / 1e9 + wander * np.sin(T / 157_000)
    if step_at is not None:
        d[step_at:] += size
    return T, d, T + d


@pytest.mark.parametrize("size", [3_000_000, 50_000, -200_000, 6_000])
def test_a_step_is_found_where_it_is_with_its_size(size):
    T, d, local = _series(step_at=23, size=size)
    seg = clock_model.fit_segments(T, d, local, robust_fit)
    assert seg.first.tolist() == [0, 23]
    (st,) = seg.steps
    assert st["size_ns"] == pytest.approx(size, abs=1)
    # between the 23rd and 24th ends (true 1.10 and 1.15 ms): at their midpoint, within half their gap
    assert st["at_ns"] == pytest.approx(1_125_000) and st["within_ns"] == pytest.approx(25_000)
    # each local time back to true time by its own segment, but where either segment fits it (between the ends the
    # step fell between, each moved by the step: for a clock set back, the times it recorded twice)
    sure = (local <= st["local_lo"] + size) | (local >= st["local_hi"] - size)
    assert (~sure).sum() == (8 if size == -200_000 else 0)  # the last 4 ends before it and the first 4 after
    assert np.abs(seg.to_true(local[sure]) - T[sure]).max() < 1e-6
    assert seg.residual < 1


def test_a_drift_or_noise_is_not_a_step():
    T, d, local = _series(n=200, drift_ppb=4_000)
    d = d + np.random.default_rng(0).normal(0, 300, len(d))
    seg = clock_model.fit_segments(T, d, local, robust_fit)
    assert seg.steps == [] and len(seg.first) == 1


def test_a_wandering_clock_is_not_cut_into_steps():
    T, d, local = _series(n=80, wander=67_000, gap=30_000)
    seg = clock_model.fit_segments(T, d, local, robust_fit)
    assert seg.steps == [] and seg.residual > 30_000


def test_two_steps_are_two_segments():
    T, d, local = _series(n=60, step_at=20, size=1_000_000)
    d[45:] -= 200_000
    local = T + d
    seg = clock_model.fit_segments(T, d, local, robust_fit)
    assert seg.first.tolist() == [0, 20, 45]
    assert [round(s["size_ns"]) for s in seg.steps] == [1_000_000, -200_000]


def test_statuses_hold_each_rank_to_its_node_mates():
    # node 0: ranks 0 (reference), 1, 2 at 0.7 µs and rank 3 at 67 µs; node 1: rank 4 at 40 µs alone, rank 5 at 9 µs
    residual = {0: 700, 1: 700, 2: 700, 3: 67_000, 4: 40_000, 5: 9_000, 6: None}
    nodes = {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1}
    st, bounds, said = clock_model.statuses(residual, {5: [{"at_ns": 1}]}, nodes, 0)
    assert st == {0: "aligned", 1: "aligned", 2: "aligned", 3: "suspect", 4: "aligned", 5: "stepped", 6: "aligned"}
    assert bounds[3] == 10_000 and bounds[4] == 90_000  # the floor; ten times rank 5's 9 µs
    assert len(said) == 1 and said[0].startswith("rank 3: its clock fits its collective ends only within 67.0 µs")
    assert "its node-mates' within 0.7 µs" in said[0]


def test_fine_clock_repairs_a_stepped_rank_and_keeps_its_node_mates():
    # three ranks of one node, 20 instances 1 ms apart; rank 2's clock steps +3 ms after instance 11
    rows = []
    for inst in range(20):
        for r in range(3):
            rows.append(
                {"rank": r, "inst": inst, "end_ns": 1_000_000 * (inst + 1) + (3_000_000 if r == 2 and inst > 11 else 0)}
            )
    clock = fine_clock(pd.DataFrame(rows), {0: 0.0, 1: 0.0, 2: 0.0}, 0, 0, {0: 0, 1: 0, 2: 0})
    assert clock.status == {0: "aligned", 1: "aligned", 2: "stepped"}
    assert [clock.offset_ns(r) for r in (0, 1, 2)] == [0, 0, 0] and clock.residual[2] == 0
    (st,) = clock.steps_of(2)
    assert st == {"at_ns": 12_500_000, "within_ns": 500_000, "size_ns": 3_000_000}
    assert not any("disagree" in w for w in clock.warnings)  # a step is not a node that disagrees
    # times either side of the step back on the reference's clock
    assert clock.to_ref(2, np.array([5_000_000, 16_000_000])).tolist() == [5_000_000, 13_000_000]
    assert clock.to_ref(np.array([2, 1]), np.array([16_000_000, 16_000_000])).tolist() == [13_000_000, 16_000_000]
    assert clock.summary() == "stepped" and clock.ranks_summary()["stepped"][0]["rank"] == 2


def test_the_step_starts_of_a_late_rank_take_its_node_mates_shift():
    # steps of 1 ms all alike; node 1 (ranks 1, 2) 9.25 ms behind; rank 2 started 3 steps late
    ref = np.arange(12) * 1_000_000.0
    starts = {0: ref, 1: ref - 9_250_000, 2: ref[3:] - 9_250_000}
    off, per, centres, tol, warn = coarse_steps(starts, 0, {0: 0, 1: 1, 2: 1})
    assert off[2] == pytest.approx(-9_250_000) and warn == [] and len(centres) == 12
    # without the node: four shifts fit equally, the smallest is taken, and that is said
    off, _, _, _, warn = coarse_steps({0: ref, 2: ref[3:] - 9_250_000}, 0, {0: 0, 2: 1})
    assert off[2] == pytest.approx(-6_250_000)
    assert len(warn) == 1 and warn[0].startswith("rank 2: its step starts fit a clock -6.250 ms or -7.250 ms off")


def test_step_starts_after_a_clock_step_keep_their_global_steps():
    # rank 1's clock steps +2.4 ms before its 7th step (steps of 1 ms): those starts land near other steps' starts
    ref = np.arange(10) * 1_000_000.0 + np.r_[0, 30, 0, 70, 0, 10, 0, 50, 0, 20] * 1_000
    s1 = ref + 5_000 + np.where(np.arange(10) >= 6, 2_400_000, 0)
    off, per, centres, tol, _ = coarse_steps({0: ref, 1: s1}, 0, {0: 0, 1: 0})
    assert len(centres) == 10
    assert per[1][:6] == pytest.approx([5_000] * 6) and per[1][6:] == pytest.approx([2_405_000] * 4)
