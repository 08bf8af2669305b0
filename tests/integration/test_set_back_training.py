"""A clock set back on a training-shaped run (issue 40, "A clock set back"): ``nccl_train4`` has long steps, a host
that waits in ``cudaStreamSynchronize`` at the end of each and few collectives per step, so the set-back falls while
the host's sync runs: no launch starts before the launch ahead of it, only before the sync ended, and the step
markers cross. Against the generator's truth (fixtures/synthlib/multirank.py ``clock_step``; the truth computed
from the schedule, sharing no code with tracekit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.synthlib.multirank import write_run
from tests.integration.test_multirank_truth import check_against_truth
from tracekit.fan_out import imbalance

pytestmark = pytest.mark.slow  # whole-deployment runs

DAMAGED = ("not trustworthy", "damaged timestamps", "overlap the next one", "matched no instance", "widened")


def _run(tmp_path: Path, preset: str, rank: int, size: int):
    knobs = {"clock_step": {rank: (2, size)}}
    if preset.startswith("dp"):
        knobs.update(gpus_per_node=4, node_offset_ns=3_700_000, drift_ppm=4.0)
    write_run(preset, tmp_path / "run", truth_path=tmp_path / "truth.json", **knobs)
    res = imbalance(tmp_path / "run", jobs=1, cache=False, gpus_per_node=knobs.get("gpus_per_node"))
    return res, json.loads((tmp_path / "truth.json").read_text())


@pytest.mark.parametrize("size", [-3_000_000, -1_000_000])
def test_a_training_run_set_back_is_undone_and_said_once(tmp_path, size):
    # was (-3 ms): 2 partial steps, 3 unmatched kernels, straggler "of 8" (16), rank 1 two steps (4) and a total
    # wait of 15,014,245 ns (19,565,848); at -1 ms exact but "steps not trustworthy ... damaged timestamps"
    res, truth = _run(tmp_path, "nccl_train4", 1, size)
    check_against_truth(res, truth)  # global steps, every wait, each step's straggler and imbalance: exact
    s, ts = res.summary, truth["summary"]
    assert s["straggler"] == ts["straggler"] and s["partial_steps"] == 0 and s["unmatched"] == 0
    r1 = res.tables["ranks"].set_index("rank").loc[1]
    t1 = {r["rank"]: r for r in truth["ranks"]}[1]
    assert r1["steps"] == 4 and r1["total_wait_ns"] == pytest.approx(t1["total_wait_ns"], abs=2_000)
    (got,) = s["clock_ranks"]["stepped"][0]["steps"]
    (want,) = t1["clock_steps"]
    assert abs(got["size_ns"] - size) <= 2_000 and abs(got["at_ns"] - want["at_ns"]) <= got["within_ns"]
    assert not [w for w in res.warnings if any(d in w for d in DAMAGED)]
    said = [w for w in res.warnings if "set back, found from the order of its own events and undone" in w]
    assert len(said) == 1 and said[0].startswith(f"rank 1: its clock stepped by {size / 1e3:+,.1f} µs")
    assert not any("began while its clock stepped" in w for w in res.warnings)


def test_a_dp_run_set_back_on_a_reference_node_rank_is_exact(tmp_path):
    res, truth = _run(tmp_path, "dp_attn_deepep8", 1, -3_000_000)
    check_against_truth(res, truth)
    assert [s["rank"] for s in res.summary["clock_ranks"]["stepped"]] == [1]
    assert not [w for w in res.warnings if any(d in w for d in DAMAGED)]
