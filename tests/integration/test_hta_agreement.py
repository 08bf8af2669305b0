"""tracekit's temporal breakdown against HolisticTraceAnalysis 0.5.0 on the real HTA traces.

HTA's numbers are stored in tests/data/hta_oracle/hta_050.json (regenerate with the command in its
"command" field; see tests/data/hta_oracle/README.md). We compare with HTA's *unfiltered* variant run
with HTA_DISABLE_NS_ROUNDING=1, where its definitions coincide with ours:

* HTA's default TraceAnalysis drops the last ProfilerStep and GPU rows without a CPU correlation;
  tracekit drops nothing, so the default ("filtered_default") numbers are not comparable.
* Without HTA_DISABLE_NS_ROUNDING HTA shrinks every float-µs event inward to whole µs (up to 1 µs per
  event), which biases busy time low.
* HTA keeps ts as float64 epoch µs: on ns_resolution_trace (ts ≈ 1.7e15 µs, 0.25 µs float resolution)
  its span and idle are 48 ns off the exact values; tracekit parses the text and is exact.
* HTA calls anything with a stream arg GPU activity (cuda_sync events, Triton CPU ops) and only
  `^nccl.*Kernel` communication; none of these five traces has such events or other comm kernels (the
  oracle records that), so the definitions coincide here. Unit tests cover where they differ.

Agreement required: idle and compute within 0.1 % of the span (the issue's bar); in practice they agree
to within 48 ns, and span/busy equal the exact integer-ns reference computed from the JSON text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracekit
from tracekit.analyses import temporal
from tests.conftest import CORPUS

ORACLE = json.loads((Path(__file__).resolve().parents[1] / "data" / "hta_oracle" / "hta_050.json").read_text())
HTA_DATA = CORPUS / "hta" / "tests" / "data"


@pytest.fixture(scope="module", params=sorted(ORACLE["traces"]))
def case(request):
    rel = request.param
    path = HTA_DATA / rel
    if not path.exists():
        pytest.skip(f"the ../shared corpus is not present ({path} missing); these tests need the real HTA traces")
    return rel, temporal(tracekit.load(path, cache=False)).summary


def test_span_and_busy_equal_exact_reference(case):
    rel, s = case
    exact = ORACLE["exact_reference"][rel]
    assert s["span_ns"] == exact["span_ns"]
    assert s["busy_ns"] == exact["busy_ns"]
    assert s["idle_ns"] == exact["idle_ns"]
    assert s["compute_ns"] == exact["compute_ns"]
    assert s["non_compute_ns"] == exact["non_compute_ns"]


def test_agrees_with_hta_unfiltered_no_rounding(case):
    rel, s = case
    hta = ORACLE["traces"][rel]["unfiltered"]["temporal"][0]
    span = s["span_ns"]
    tol = 0.001 * span
    assert abs(s["span_ns"] - hta["kernel_time_us"] * 1000) <= tol
    assert abs(s["idle_ns"] - hta["idle_us"] * 1000) <= tol
    assert abs(s["compute_ns"] - hta["compute_us"] * 1000) <= tol
    assert abs(s["non_compute_ns"] - hta["non_compute_us"] * 1000) <= tol
    # in fact far tighter: only HTA's float64 epoch-µs resolution separates us (≤ 48 ns here)
    assert abs(s["idle_ns"] - hta["idle_us"] * 1000) <= 50


def test_comm_overlap_agrees_with_hta(case):
    rel, s = case
    hta = ORACLE["traces"][rel]["unfiltered"]["overlap"][0]["comm_comp_overlap_pctg"]
    if hta is None:
        assert s["comm_compute_overlap_pct"] is None
    else:
        assert s["comm_compute_overlap_pct"] == pytest.approx(hta, abs=0.006)  # HTA rounds to 2 decimals
