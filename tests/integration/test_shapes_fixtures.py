"""Issue 29's "prove it" on a generated trace recorded with shapes (the benchmark generator, benchmarks/make_trace.py,
writes ``Input Dims`` / ``Input type`` on some ops, in Kineto's multi-line layout and one record a line): every
GEMM kernel's FLOPs equal 2·M·N·K of its launching op's Input Dims (computed independently from the raw JSON by
tests/integration/test_shapes_corpus.py's plain scan) and the shaped share is reported. MFU and MBU within [0, 1] is
checked on the corpus's real recordings (test_shapes_corpus.py) only: the generator draws durations and shapes
independently (it even puts GEMM-like dims on an ``aten::mul``), so its MBU can exceed 1 — here they are finite and
non-negative."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.analyses.hardware.roofline import roofline
from tracekit.analyses.hardware.shapes import kernel_shapes

from test_shapes_corpus import _independent_flops

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("layout", ["oneline", "kineto"])
def test_generated_trace_gemm_flops_are_2mnk(tmp_path, layout):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from make_trace import make_trace
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    plain = tmp_path / "t.json"
    make_trace(plain, mb=4, events_min=8000, seed=3, gz_path=tmp_path / "t.json.gz", layout=layout)
    t = tracekit.load(tmp_path / "t.json.gz", cache=False)
    want = _independent_flops(tmp_path / "t.json.gz")
    assert len(want) > 50  # the generator's GEMMs
    ks = kernel_shapes(t).table
    eid = t.events["event_id"].to_numpy()[ks["row"].to_numpy()]
    got = dict(zip(eid.tolist(), ks["flops"].tolist()))
    for ki, flops in want.items():
        assert got[ki] == pytest.approx(flops, rel=1e-12), ki
    gemm = set(eid[(ks["family"] == "gemm").to_numpy() & ks["carries"].to_numpy(dtype=bool)].tolist())
    assert set(want) <= gemm
    r = roofline(t, None, None)
    sh = r.tables["per_kernel"]
    sh = sh[sh["shaped_calls"] > 0]
    assert len(sh)
    for c in ("mfu", "mbu"):
        v = sh[c].dropna().astype(float)
        assert len(v) and (v >= 0).all() and v.map(math.isfinite).all(), c
    gemm_rows = sh[sh["op"].isin(["aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::bmm"])]
    assert len(gemm_rows) and gemm_rows["flops"].notna().all()
    assert 0 < r.summary["shaped_pct"] <= 100 and r.summary["shaped_kernels"] >= len(want)
