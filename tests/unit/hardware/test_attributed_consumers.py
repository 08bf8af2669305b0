"""Everything downstream of the attribution of graph-replayed kernels (issue 38): ``kernels --by op|module``, the
report's shapes line, the export's kernels table, ``info``/``steps``' note, the op models of vLLM's custom ops; on the
generator's graph fixtures (their truth written independently, fixtures/README.md) and hand-built traces."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.analyses.hardware.shapes import evaluate
from tracekit.analyses.report.trace_report import shapes_part
from tracekit.exporters.parquet import kernel_table
from tracekit.analyses.steps.resolve import find_steps, graph_replay_note
from tracekit.ingest.captures import RECORD_HINT

GRAPH = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic" / "graph"


def _truth(case: str) -> dict:
    return json.loads((GRAPH / case / "replay.replay_truth.json").read_text())


def _rows(tbl: dict) -> list[dict]:
    return [dict(zip(tbl["columns"], r)) for r in tbl["rows"]]


@pytest.mark.slow
def test_kernels_by_op_and_module_match_the_truth():
    """Per op and per module path: the replayed kernels' count and time the generator wrote, and the eager kernels'
    op from their own launch."""
    truth = _truth("full_nodeid")
    t = tracekit.load(GRAPH / "full_nodeid" / "replay.trace.json.gz", cache=False)
    want_n, want_ns, mod_ns = defaultdict(int), defaultdict(int), defaultdict(int)
    for r in _rows(truth["replayed"]):
        if r["kind"] == "kernel":
            want_n[r["op"]] += 1
            want_ns[r["op"]] += r["dur_ns"]
            mod_ns["/".join(m.removeprefix("nn.Module: ") for m in r["module_scopes"])] += r["dur_ns"]
    for r in truth["eager"]:
        want_n[r["op"]] += 1
    res = tracekit.kernel_stats(t, by="op")
    got = res.tables["kernels"].set_index("op")
    for op, n in want_n.items():
        assert int(got.loc[op, "count"]) == n, op
    assert "(no op)" not in got.index
    assert res.summary["attributed_pct"] == pytest.approx(100.0)
    mods = tracekit.kernel_stats(t, by="module").tables["kernels"].set_index("module")
    for m, ns in mod_ns.items():
        assert int(mods.loc[m, "total_ns"]) == ns, m


def test_kernels_by_op_without_captures_names_what_to_record(tmp_path):
    """A replay with no capture beside it: its replayed kernels are one group without an op, and a warning says what
    to record."""
    shutil.copy(GRAPH / "full_nodeid" / "replay.trace.json.gz", tmp_path / "replay.trace.json.gz")
    t = tracekit.load(tmp_path / "replay.trace.json.gz", cache=False)
    res = tracekit.kernel_stats(t, by="op")
    tbl = res.tables["kernels"].set_index("op")
    assert int(tbl.loc["(no op)", "count"]) == _truth("full_nodeid")["summary"]["replayed_kernels"]
    assert any(RECORD_HINT in w for w in res.warnings)
    assert tracekit.kernel_stats(t).summary == tracekit.kernel_stats(t, by="name").summary  # --by name unchanged


@pytest.mark.slow
def test_report_line_and_export_columns():
    t = tracekit.load(GRAPH / "full_nodeid" / "replay.trace.json.gz", cache=False)
    part = shapes_part(t)
    assert part["capture_traces"] == 1  # the bs-16 capture only: the others are of other batch sizes
    assert part["shapes"].startswith("for ") and part["shapes"].endswith("from 1 capture trace")
    kt = kernel_table(t, find_steps(t))
    truth = {(r["start_ns"], r["name"]): r for r in _rows(_truth("full_nodeid")["replayed"]) if r["kind"] == "kernel"}
    rel = t.meta.get("base_time_ns") or 0
    seen = 0
    for r in kt.itertuples():
        w = truth.get((int(r.start_ns) - rel, r.name)) or truth.get((int(r.start_ns), r.name))
        if w is not None:
            seen += 1
            scopes = "/".join(m.removeprefix("nn.Module: ") for m in w["module_scopes"])
            # this case's kernels carry CUPTI graph node ids: joined to the capture's launches by them, exactly
            assert (r.op, r.module, r.attributed_by) == (w["op"], scopes, "node_id")
    assert seen == len(truth)
    assert {"op", "module", "attributed_by", "category"} <= set(kt.columns)


def test_info_and_steps_say_where_the_captures_are(tmp_path):
    t = tracekit.load(GRAPH / "full_nodeid" / "replay.trace.json.gz", cache=False)
    note = graph_replay_note(t)["graph_replay"]
    assert "capture trace(s) beside it" in note and "roofline" in note
    assert tracekit.trace_info(t).summary["graph_replay"] == note
    shutil.copy(GRAPH / "full_nodeid" / "replay.trace.json.gz", tmp_path / "r.json.gz")
    alone = tracekit.load(tmp_path / "r.json.gz", cache=False)
    assert graph_replay_note(alone)["graph_replay"].endswith(RECORD_HINT)
    assert "record the graph capture" in shapes_part(alone)["shapes"]


def test_eager_trace_has_no_replay_note(tmp_path):
    from conftest import kernel, write_trace

    t = tracekit.load(write_trace(tmp_path / "e.json", [kernel("k", 0, 5)]), cache=False)  # no graph launch
    assert graph_replay_note(t) == {} and shapes_part(t) == {}
    assert "graph_replay" not in tracekit.trace_info(t).summary


BF = "c10::BFloat16"


def test_op_models_of_vllm_custom_ops():
    """Formulas from docs/roofline.md, computed by hand on the vLLM capture's recorded inputs."""
    # aiter's fused add + RMSNorm (out, input, residual_in, residual_out, weight): 3 reads + 2 writes of [32, 2880]
    got = evaluate("aiter::rmsnorm2d_fwd_with_add_ck", [[32, 2880]] * 4 + [[2880], [], []], [BF] * 5 + ["Scalar"] * 2,
                   [""] * 7)  # fmt: skip
    assert got["bytes"] == (2 * 32 * 2880 + 2880 + 2 * 32 * 2880) * 2 and got["flops"] is None
    # an Inductor pointwise kernel: fp32 -> bf16 of 131072 x 64 (xnumel 8388608)
    got = evaluate("triton_poi_fused__to_copy_1", [[131072, 64], [131072, 64], []], ["float", BF, "Scalar"],
                   ["", "", "8388608"])  # fmt: skip
    assert got["bytes"] == 8388608 * (4 + 2)
    assert evaluate("triton_poi_fused_0", [[32], [201088, 2880]], ["int", BF], ["", ""]) is None  # no xnumel: unknown
    # fused MoE and paged attention: their recorded inputs cannot give FLOPs or bytes (null, never 0)
    moe = evaluate("vllm::moe_forward", [[32, 3072], [32, 32], [], []], [BF, BF, "", ""], [""] * 4)
    assert moe["flops"] is None and moe["bytes"] is None and moe["m"] == 32 and moe["model"] == "opaque"
    att = evaluate("vllm::unified_attention_with_output", [[32, 64, 64], [32, 8, 64], [32, 8, 64], [32, 64, 64]],
                   [BF] * 4, [""] * 4)  # fmt: skip
    assert att["flops"] is None and att["bytes"] is None and att["family"] == "attention"


def test_opaque_ops_are_not_shaped(tmp_path):
    """An op whose FLOPs and bytes are unknown does not count in the shaped share, and roofline's sentence names it."""
    from conftest import kernel, write_trace

    def op(name, ts, dims, types):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 10,
                "args": {"Input Dims": dims, "Input type": types}}  # fmt: skip

    def rt(ts, corr):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                "dur": 1, "args": {"correlation": corr}}  # fmt: skip

    ev = [
        op("vllm::moe_forward", 0, [[32, 3072], [32, 32], [], []], [BF, BF, "", ""]),
        rt(1, 1),
        kernel("moe_k", 20, 30, corr=1),
        op("aten::mm", 100, [[32, 64], [64, 128]], [BF, BF]),
        rt(101, 2),
        kernel("gemm_k", 120, 10, corr=2),
    ]
    t = tracekit.load(write_trace(tmp_path / "t.json", ev), cache=False)
    res = tracekit.roofline(t, hw="h100")
    assert res.summary["shaped_pct"] == pytest.approx(25.0)  # 10 of 40 µs: the GEMM
    assert res.summary["unknown_work_pct"] == pytest.approx(75.0)
    assert any(w.startswith("FLOPs and bytes are unknown for vllm::moe_forward (75.0 %") for w in res.warnings)
    row = res.tables["per_kernel"].set_index("name").loc["moe_k"]
    assert row["op"] == "vllm::moe_forward" and row["flops"] is pd.NA or pd.isna(row["flops"])
