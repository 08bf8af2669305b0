"""The real vLLM FULL-graph decode pair (corpus: tracelens/tests/traces/inference/vllm_decode_full: a replay trace,
its capture_traces/ and TraceLens's own answer in perf_csvs/): the replayed kernels attributed from the capture,
checked against TraceLens's CSVs, read here independently with the csv module (issue 38)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

import tracekit
from tracekit.analyses.hardware.shapes import kernel_shapes

PAIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "tracelens" / "tests" / "traces" / "inference"
PAIR = PAIR if PAIR.is_dir() else Path("/work/shared/corpus/tracelens/tests/traces/inference")
VLLM = PAIR / "vllm_decode_full"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (VLLM / "perf_csvs").is_dir(), reason="the tracelens corpus (vllm_decode_full) is absent"),
]


@pytest.fixture(scope="module")
def trace():
    return tracekit.load(VLLM / "graph_execution.json.gz", cache=False)


def _csv(name):
    with open(VLLM / "perf_csvs" / name, newline="") as fh:
        return list(csv.DictReader(fh))


def test_at_least_95_pct_of_replayed_kernel_time_is_attributed(trace):
    s = tracekit.replay_summary(trace).summary
    assert s["replayed_kernels"] == 421 and s["attributed_pct"] >= 95.0
    assert s["by_source"]["capture"] == s["attributed_kernels"]


def test_every_gemm_has_2mnk_flops_of_its_attributed_shapes(trace):
    t = kernel_shapes(trace).table
    g = t[(t["model"] == "gemm") & t["carries"]]
    assert len(g) == 73  # 72 replayed addmm (24 layers x 3) + the eager lm-head mm
    assert np.array_equal(g["flops"].to_numpy(), 2.0 * g["m"] * g["n"] * g["k"])
    ours = {(str(o), int(m), int(n), int(k)) for o, m, n, k in g[["op", "m", "n", "k"]].itertuples(index=False)}
    # TraceLens lists each GEMM under aten::addmm/mm and again under its vLLM wrapper op; tracekit names the
    # innermost op that launched the kernel (aten::*), so the aten rows are the ones to compare
    theirs = {(r["name"], int(r["param: M"]), int(r["param: N"]), int(r["param: K"])) for r in _csv("GEMM.csv")}
    assert ours == {x for x in theirs if x[0].startswith("aten::")}


def test_per_op_kernel_time_agrees_with_tracelens(trace):
    t = kernel_shapes(trace).table
    dur = trace.events["dur_ns"].to_numpy()[t["row"].to_numpy()]
    ours = {}
    for op, d in zip(t["op"].astype(object), dur):
        ours[op] = ours.get(op, 0) + int(d)
    for r in _csv("ops_summary.csv"):
        if r["name"] == "aten::copy_":
            continue  # TraceLens counts its 9 memcpys as the op's kernel time; tracekit's kernel table holds kernels
        # TraceLens sums float µs: equal to tracekit's int ns within its rounding (0.01 µs per kernel)
        assert abs(ours[r["name"]] / 1e3 - float(r["total_direct_kernel_time_sum"])) <= 0.01 * int(r["Count"]), r


def test_roofline_without_captures_says_what_to_record(tmp_path):
    sg = PAIR / "sglang_decode" / "sglang_Qwen3-8B_decode.json.gz"
    if not sg.is_file():
        pytest.skip("the sglang decode trace is absent")
    t = tracekit.load(sg, cache=False)
    res = tracekit.roofline(t)
    assert any("--enable-profile-cuda-graph" in w and "SGLANG_GRAPH_BATCH_CAPTURE=1" in w for w in res.warnings)
