"""The expert share of a late arrival is null where no rank of the run ran an expert GEMM (a dense model, DLRM): a
share that cannot exist is unknown, not 0; the other three shares still add up to the arrival difference (review
of issue 40)."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.analyses.fleet.multirank.attribute import shares
from tracekit.render.human import column
from tests.conftest import CORPUS

DLRM = CORPUS / "param" / "et_replay" / "tests" / "inputs" / "dlrm_kineto"


def _rows(seg, own, idle, expert) -> dict:
    seg = np.asarray(seg, dtype=np.int64)
    own, idle, expert = (np.asarray(v, dtype=np.float64) for v in (own, idle, expert))
    return {"seg": seg, "known": np.ones(len(seg), bool), "own": own, "idle": idle, "expert": expert}


def test_no_experts_anywhere_is_null_and_the_rest_adds_up():
    last, med = _rows([100, 50], [30, 10], [5, 0], [0, 0]), _rows([90, 50], [20, 10], [1, 3], [0, 0])
    got = shares(last, med, experts=False)
    assert np.isnan(got[3]).all()
    arrival = lambda r: r["seg"] + r["own"] + r["idle"] + r["expert"]  # noqa: E731
    assert np.array_equal(np.nansum(got, axis=0), arrival(last) - arrival(med))


def test_with_experts_a_zero_difference_is_a_zero():
    last, med = _rows([100], [30], [5], [7]), _rows([90], [20], [1], [7])
    got = shares(last, med, experts=True)
    assert got[3].tolist() == [0.0] and got.sum(axis=0).tolist() == [24.0]


def test_a_column_unknown_in_every_row_reads_as_a_measure():
    c = column("expert_ns", [None, None])
    assert c.numeric and c.header == "expert" and c.fmt(None) == "–"


@pytest.mark.slow
@pytest.mark.skipif(not DLRM.exists(), reason="the PARAM DLRM Kineto traces are not in ../shared/corpus")
def test_dlrm_imbalance_has_no_expert_zero():
    import tracekit

    r = tracekit.imbalance(tracekit.load_run(DLRM))
    per = r.tables["per_collective"]
    assert per["expert_ns"].isna().all()
    clear = per[~per["tie"]]
    assert clear[["started_late_ns", "own_work_ns", "idle_ns"]].notna().any(axis=None)
