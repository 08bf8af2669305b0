"""Global steps where step starts cannot say, and a clock set back by more than the gap between two collective ends
(issue 40), against the generator's truth (fixtures/synthlib/multirank.py: ``gather_steps`` — every rank all-gathers
once more at the end of those steps, so their collectives differ from the others' —, ``late_start``,
``node_offset_ns``, ``clock_step`` with a negative size; the truth computed from the schedule, sharing no code with
tracekit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.synthlib.multirank import write_run
from tests.integration.test_multirank_truth import check_against_truth
from tracekit.fan_out import imbalance

pytestmark = pytest.mark.slow  # whole-deployment runs

ALIKE = dict(big={}, idle=[], prefill=[], hot_factor=1.0, steps=7)  # every step as long as the next


def _run(tmp_path: Path, gpus_per_node: int, **knobs):
    paths, tp = write_run(
        "dp_attn_deepep8", tmp_path / "run", truth_path=tmp_path / "truth.json", gpus_per_node=gpus_per_node, **knobs
    )
    res = imbalance(tmp_path / "run", jobs=1, gpus_per_node=gpus_per_node, cache=False)
    return res, json.loads(tp.read_text())


def _pattern_said(res, rank: int, shift_ms: float) -> None:
    said = [w for w in res.warnings if "fit a clock" in w]
    assert len(said) == 1 and said[0].startswith(f"rank {rank}: its step starts fit a clock {shift_ms:,.3f} ms or")
    assert "the pattern of its collectives in each step (their kinds, order and kernels) matches the other ranks'"
    f" only at {shift_ms:,.3f} ms" in said[0]


def test_a_whole_late_node_lands_on_its_steps_by_their_collectives(tmp_path):
    # node 1 (ranks 4-7) is 9.25 ms behind and starts three steps late: no node-mate knows better; steps 2 and 4
    # end with one more all-gather, and that pattern says which global steps ranks 4-7 recorded (was: a step off,
    # ranks 4-7 "stepped" by -8.3 µs, rank 0 the straggler)
    knobs = dict(ALIKE, late_start={r: 3 for r in range(4, 8)}, node_offset_ns=-9_250_000, gather_steps=[2, 4])
    res, truth = _run(tmp_path, 4, **knobs)
    check_against_truth(res, truth)  # global steps, every wait, each step's straggler and imbalance: exact
    assert res.summary["clock"] == "aligned" and res.summary["clock_ranks"] == {"stepped": [], "suspect": []}
    _pattern_said(res, 4, -9.250)


def test_a_late_rank_alone_on_its_node_lands_on_its_steps(tmp_path):
    # one GPU per node, each node 1.3 ms further behind: rank 6 (7.8 ms, six step periods) starts three steps late;
    # rank 3 is the straggler (bs 64) and step 4 gathers once more
    knobs = dict(late_start={6: 3}, steps=7, prefill=[], idle=[], node_offset_ns=-1_300_000, gather_steps=[4])
    res, truth = _run(tmp_path, 1, **knobs)
    check_against_truth(res, truth)
    assert res.summary["straggler"]["rank"] == truth["summary"]["straggler"]["rank"] == 3
    assert res.summary["clock"] == "aligned"  # was: rank 6 a step off and "suspect"
    _pattern_said(res, 6, truth["ranks"][6]["clock_offset_ns"] / 1e6)


def test_steps_alike_throughout_are_an_ambiguity_said_never_a_silent_choice(tmp_path):
    knobs = dict(ALIKE, late_start={6: 3}, node_offset_ns=-1_300_000)
    res, truth = _run(tmp_path, 1, **knobs)
    said = [w for w in res.warnings if "fit a clock" in w]
    assert len(said) == 1 and said[0].startswith("rank 6:") and "may be off by a step" in said[0]
    assert "do not tell the steps apart either" in said[0] and "ProfilerStep#N" in said[0]


def test_a_clock_set_back_3_ms_is_repaired_and_told_with_its_negative_size(tmp_path):
    # rank 6's clock set back by 3 ms between steps 1 and 2: collectives end every ~0.1-0.3 ms, steps last ~1.2 ms,
    # so 3 ms of its local time is recorded twice (was: step windows overlapping, a step lost, waits wrong)
    res, truth = _run(tmp_path, 4, clock_step={6: (2, -3_000_000)}, node_offset_ns=3_700_000, drift_ppm=4.0)
    check_against_truth(res, truth)  # global steps, every wait, each step's straggler and imbalance: exact
    (want,) = truth["ranks"][6]["clock_steps"]
    st = res.summary["clock_ranks"]
    assert res.summary["clock"] == "stepped" and st["suspect"] == []
    assert [s["rank"] for s in st["stepped"]] == [6]
    (got,) = st["stepped"][0]["steps"]
    assert abs(got["size_ns"] - want["size_ns"]) <= 2_000 and got["size_ns"] < 0
    assert abs(got["at_ns"] - want["at_ns"]) <= got["within_ns"] < 1_000_000
    assert any(w.startswith("rank 6: its clock stepped by -3,000.0 µs") for w in res.warnings)
    assert not any("began while its clock stepped" in w for w in res.warnings)  # every end's side is known


def test_a_whole_node_set_back_is_its_own_not_the_references(tmp_path):
    # ranks 4-7 (node 1) set back together: half the ranks stepping at once is what the reference's own step looks
    # like, but each of them found the set-back in its own trace, so it stays theirs
    knobs = dict(clock_step={6: (2, -3_000_000, "node")}, node_offset_ns=3_700_000, drift_ppm=4.0)
    res, truth = _run(tmp_path, 4, **knobs)
    check_against_truth(res, truth)
    st = res.summary["clock_ranks"]["stepped"]
    assert [s["rank"] for s in st] == [4, 5, 6, 7]
    assert all(abs(s["steps"][0]["size_ns"] + 3_000_000) <= 2_000 for s in st)
