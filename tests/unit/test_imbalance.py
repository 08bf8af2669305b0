"""Rank imbalance on hand-built two-rank traces where the answer is obvious."""
from __future__ import annotations

import pytest

from tracekit.sweeps import imbalance
from tracekit.errors import MissingDataError
from tests.conftest import kernel, write_trace

DISPATCH = "void deep_ep::internode_ll::dispatch<true, 3, 10, 7168>"
COMBINE = "void deep_ep::internode_ll::combine<3, 10, 7168, 9>"


def rank_trace(attn_us: list[float], wait_us: float) -> list:
    """One step: per layer, attention kernels for attn_us, a dispatch (two halves), combine of wait_us."""
    ev = [{"ph": "X", "cat": "gpu_user_annotation", "name": "scheduler.run_batch", "pid": 0, "tid": 7,
           "ts": 0.0, "dur": 20_000.0}]
    t = 0.0
    for a in attn_us:
        ev.append(kernel("attn", t, a))
        t += a
        ev.append(kernel(DISPATCH, t, 5.0, stream=24))
        ev.append(kernel(DISPATCH, t + 5.0, 5.0, stream=24))  # the recv half: the same layer
        t += 10.0
        ev.append(kernel("experts", t, 50.0))
        t += 50.0
        ev.append(kernel(COMBINE, t, wait_us, stream=24))
        t += wait_us
    return ev


def test_slowest_rank_per_layer(tmp_path):
    write_trace(tmp_path / "run-TP-0.trace.json", rank_trace([100.0, 100.0], 30.0))
    write_trace(tmp_path / "run-TP-1.trace.json", rank_trace([100.0, 140.0], 10.0))
    r = imbalance(tmp_path, min_step_ns=0)
    pl = r.tables["per_layer"].set_index("layer")
    assert pl.loc[0, "max_attention_ns"] == 100_000 and pl.loc[1, "max_attention_ns"] == 140_000
    assert pl.loc[1, "slowest_rank"] == "TP-1"
    assert pl.loc[1, "imbalance"] == pytest.approx(140 / 120)
    assert pl.loc[0, "max_wait_ns"] == 40_000  # rank 0: dispatch 10 + combine 30
    lay = r.tables["layers"].set_index(["rank", "layer"])
    assert lay.loc[("TP-0", 1), "dispatch_ns"] == 10_000 and lay.loc[("TP-0", 1), "combine_ns"] == 30_000
    assert r.summary["ranks"] == 2 and r.summary["layers_per_step"] == 2


def test_needs_several_ranks_and_dispatch(tmp_path):
    write_trace(tmp_path / "run-TP-0.trace.json", rank_trace([100.0], 10.0))
    with pytest.raises(MissingDataError, match="several ranks"):
        imbalance(tmp_path, min_step_ns=0)
    ev = [{"ph": "X", "cat": "gpu_user_annotation", "name": "scheduler.run_batch", "pid": 0, "tid": 7,
           "ts": 0.0, "dur": 1000.0}, kernel("attn", 0.0, 10.0)]
    write_trace(tmp_path / "run-TP-1.trace.json", ev)
    with pytest.raises(MissingDataError, match="no MoE dispatch"):
        imbalance(tmp_path, min_step_ns=0)


def test_refuses_what_is_not_the_ranks_of_one_run(tmp_path):
    """A sweep of batch sizes once gave 'median imbalance 1.25'; untagged copies of one file are no ranks either."""
    for bs in (4, 8):
        (tmp_path / "sweep" / f"d_bs{bs}_100k").mkdir(parents=True)
        write_trace(tmp_path / "sweep" / f"d_bs{bs}_100k" / "run-TP-0.trace.json", rank_trace([100.0], 10.0))
    with pytest.raises(MissingDataError, match="2 operating points"):
        imbalance(tmp_path / "sweep", min_step_ns=0)
    (tmp_path / "copies").mkdir()
    write_trace(tmp_path / "copies" / "a.trace.json", rank_trace([100.0], 10.0))
    write_trace(tmp_path / "copies" / "b.trace.json", rank_trace([120.0], 10.0))
    with pytest.raises(MissingDataError, match="not distinct ranks of one run"):
        imbalance(tmp_path / "copies", min_step_ns=0)
