"""Roofline (A9) and the HBM table: formulas, the study's kda_qkv_proj MBU, and hand-built traces."""

from __future__ import annotations

import json

import pytest

import tracekit
from tracekit.analyses.hardware.hbm import hbm_bytes
from tracekit.analyses.hardware.roofline import (
    eval_formula,
    formula_env,
    gemm_traffic,
    op_traffic,
    parse_vars,
    roofline,
    roofline_point,
)
from tracekit.annotation import load_annotation
from tracekit.annotation.spec import parse_annotation
from tracekit.errors import DataFileError, InputError, MissingDataError
from tracekit.gpu_specs import load_profile, with_hbm
from tests.conftest import kernel, write_trace

B200 = load_profile("b200")
QKV_WEIGHT = 36864 * 7168  # the study's 264 MB FP8 weight


def test_eval_formula():
    env = {"bs": 16, "q_len": 5, "heads": 96}
    assert eval_formula("bs*q_len", env, "x") == 80
    assert eval_formula("2 * bs * heads * 128 ** 2 * 4", env, "x") == 2 * 16 * 96 * 65536
    assert (
        eval_formula("min(bs, 8) + max(1, 2) - ceil(1.5) + floor(2.5) + bs // 3 + bs % 3 + -1", env, "x")
        == 8 + 2 - 2 + 2 + 5 + 1 - 1
    )
    assert eval_formula(42, env, "x") == 42
    with pytest.raises(DataFileError, match=r"f\.json: \$\.m.*'ctx'.*--var ctx="):
        eval_formula("bs*ctx", env, "f.json: $.m")
    for bad in ("bs.real", "__import__('os')", "bs if 1 else 2", "[bs]", "'a'"):
        with pytest.raises(DataFileError):
            eval_formula(bad, env, "x")
    with pytest.raises(DataFileError, match="not a formula"):
        eval_formula("bs *", env, "x")
    with pytest.raises(DataFileError, match="zero"):
        eval_formula("bs / 0", env, "x")


def test_parse_vars():
    assert parse_vars(["context=200000", "dcp = 8"]) == {"context": 200000.0, "dcp": 8.0}
    assert parse_vars(None) == {}
    for bad in ("context", "1x=2", "a=b"):
        with pytest.raises(InputError):
            parse_vars([bad])


def test_study_kda_qkv_proj_bytes_and_mbu():
    """DP16 kda_qkv_proj: M = 16 requests x 5 = 80 against the full 36864 x 7168 FP8 weight, 67.2 µs."""
    ann = load_annotation("k3_dp16")
    env = formula_env(ann, bs=16, q_len=None)  # q_len 5 from the annotation's constants
    tr = op_traffic(ann, "kda_qkv_proj", env)
    assert (tr["m"], tr["n"], tr["k"]) == (80, 36864, 7168)
    assert QKV_WEIGHT == 264_241_152  # "264 MB"
    assert tr["bytes"] == 80 * 7168 + QKV_WEIGHT + 80 * 36864 * 2 == 270_712_832
    assert tr["flops"] == 2 * 80 * 36864 * 7168
    # the weight alone against the marketed 8 TB/s: the 0.49 of the issue
    assert QKV_WEIGHT / 67.2e-6 / 8e12 == pytest.approx(0.4915, abs=1e-4)
    datasheet = roofline_point(tr["bytes"], tr["flops"], 67_200, B200, "fp8")
    assert datasheet["mbu"] == pytest.approx(0.5036, abs=1e-4)
    # the study's 52 %: all operand bytes against the bus-derived B200 peak (7680-bit x 3996 MHz x 2)
    bus = roofline_point(tr["bytes"], tr["flops"], 67_200, with_hbm(B200, "bus"), "fp8")
    assert bus["mbu"] == pytest.approx(0.52, abs=0.006)
    assert bus["bound"] == "memory" and datasheet["intensity"] < datasheet["ridge"] == 562.5
    assert datasheet["mfu"] == pytest.approx(tr["flops"] / 67.2e-6 / 4.5e15)
    assert datasheet["achieved_tbps"] == pytest.approx(4.028, abs=1e-3)


def test_state_bytes_are_conserved_between_layouts():
    """KDA state: 16 requests x 96 heads (DP16) and 128 x 12 (DP2 x DCP8) move the same bytes per layer."""
    dp16, dp2 = load_annotation("k3_dp16"), load_annotation("k3_dp2_dcp8")
    a = op_traffic(dp16, "kda_state", formula_env(dp16, bs=16, q_len=5))
    b = op_traffic(dp2, "kda_state", formula_env(dp2, bs=128, q_len=5))
    assert a["bytes"] == b["bytes"] == 2 * 16 * 96 * 128 * 128 * 4
    assert a["flops"] is None and a["source"] == "formula"
    assert roofline_point(a["bytes"], None, 124_000, B200, "fp32")["bound"] is None


def test_compute_bound_gemm_and_dtype_peaks():
    big = parse_annotation(
        json.dumps({"name": "g", "op_shapes": {"x": {"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16"}}}).encode(),
        "g.json",
    )
    tr = gemm_traffic(big.op_shapes["x"], {}, "g")
    pt = roofline_point(tr["bytes"], tr["flops"], 1_000_000, B200, "bf16")
    assert pt["bound"] == "compute" and pt["peak_tflops"] == 2250
    w4 = parse_annotation(b'{"name": "g", "op_shapes": {"x": {"m": 1, "n": 10, "k": 10, "w_dtype": "fp4"}}}', "g")
    assert gemm_traffic(w4.op_shapes["x"], {}, "g")["bytes"] == 10 * 1 + 100 * 0.5 + 10 * 2
    bad = parse_annotation(b'{"name": "g", "op_shapes": {"x": {"m": 1, "n": 1, "k": 1, "dtype": "fp9"}}}', "g")
    with pytest.raises(DataFileError, match="fp9"):
        gemm_traffic(bad.op_shapes["x"], {}, "g")


# -- analyses over a hand-built trace -----------------------------------------------------------------

TOY = {
    "name": "toy",
    "step": {"name": "scheduler.run_batch", "min_ms": 0},
    "blocks": {"boundary": ["^norm$"], "types": [{"type": "L", "contains": "^state$"}]},
    "op_tags": [
        {"tag": "qkv", "pattern": "^gemm$", "block_type": "L", "ordinal": 1},
        {"tag": "st", "pattern": "^state$"},
    ],
    "op_shapes": {"qkv": {"m": "bs*q_len", "n": 36864, "k": 7168}},
    "op_traffic": {"st": {"bytes": "2 * bs * heads * state", "dtype": "fp32"}},
    "constants": {"q_len": 5, "heads": 96, "state": 65536},
    "hbm": [
        {"name": "state", "tags": ["st"]},
        {"name": "kv", "bytes": "bs * 1000"},
        {"name": "gemm at 50 %", "tags": ["qkv"], "mbu": 0.5},
    ],
}


def toy_trace(tmp_path, name="bs16"):
    ev = [
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "scheduler.run_batch",
            "pid": 0,
            "tid": 7,
            "ts": 0.0,
            "dur": 1000.0,
        }
    ]
    t = 1.0
    for _ in range(2):  # two layers: norm, gemm 67.2 µs, state 124 µs
        for kname, dur in (("norm", 1.0), ("gemm", 67.2), ("state", 124.0)):
            ev.append(kernel(kname, t, dur, grid=[148, 1, 1]))
            t += dur + 1.0
    path = write_trace(
        tmp_path / f"{name}.json", ev, deviceProperties=[{"id": 0, "name": "NVIDIA B200", "numSms": 148}]
    )
    return tracekit.load(path, cache=False)


def toy_ann(**over):
    return parse_annotation(json.dumps({**TOY, **over}).encode(), "toy.json")


def test_roofline_on_a_hand_built_trace(tmp_path):
    r = roofline(toy_trace(tmp_path), toy_ann(), B200, bs=16)
    pt = r.tables["per_tag"].set_index("op_tag")
    assert list(r.tables["per_tag"].columns[:7]) == ["op_tag", "mean_ns", "bytes", "flops", "mbu", "mfu", "bound"]
    assert pt.loc["qkv", "mean_ns"] == 67_200 and pt.loc["qkv", "count"] == 2 and pt.loc["qkv", "m"] == 80
    assert pt.loc["qkv", "bytes"] == 270_712_832 and pt.loc["qkv", "bound"] == "memory"
    assert pt.loc["qkv", "mbu"] == pytest.approx(0.5036, abs=1e-4)
    assert pt.loc["st", "bytes"] == 2 * 16 * 96 * 65536
    assert pt.loc["st", "mbu"] == pytest.approx(2 * 16 * 96 * 65536 / 124e-6 / 8e12)
    assert r.summary["hw"] == "b200" and r.summary["bs_from"] == "option" and r.summary["q_len"] == 5


def test_roofline_needs_shapes_and_batch_size(tmp_path):
    tr = toy_trace(tmp_path)
    with pytest.raises(MissingDataError, match="op_shapes"):
        roofline(tr, toy_ann(op_shapes={}, op_traffic={}), B200, bs=16)
    with pytest.raises(InputError, match="--bs"):
        roofline(tr, toy_ann(), B200)
    r = roofline(tr, toy_ann(constants={**TOY["constants"], "bs": 8}), B200)  # the annotation's default
    assert r.summary["bs_from"] == "annotation constant"
    r = roofline(tr, toy_ann(op_shapes={**TOY["op_shapes"], "ghost": {"m": 1, "n": 1, "k": 1}}), B200, bs=16)
    assert any("ghost" in w for w in r.warnings)


def test_hbm_rows_on_a_hand_built_trace(tmp_path):
    r = hbm_bytes(toy_trace(tmp_path), toy_ann(), B200, bs=16)
    rows = r.tables["per_row"].set_index("row")
    assert rows.loc["state", "bytes"] == 2 * 2 * 16 * 96 * 65536 and rows.loc["state", "rule"] == "tags"
    assert rows.loc["kv", "bytes"] == 16_000
    assert (
        rows.loc["gemm at 50 %", "bytes"] == round(2 * 67.2e-6 * 0.5 * 8e12)
        and rows.loc["gemm at 50 %", "rule"] == "tags×mbu"
    )
    assert r.summary["total_bytes_per_step"] == rows["bytes"].sum()
    assert r.summary["time_at_peak_ns"] == round(rows["bytes"].sum() / 8e12 * 1e9)
    assert rows["share_pct"].sum() == pytest.approx(100)
    assert list(r.tables["per_step"].columns) == ["step", "row", "rule", "bytes"]


def test_hbm_row_validation(tmp_path):
    tr = toy_trace(tmp_path)
    with pytest.raises(MissingDataError, match="hbm"):
        hbm_bytes(tr, toy_ann(hbm=[]), B200, bs=16)
    with pytest.raises(DataFileError, match=r"\$\.hbm\[0\].*exactly one"):
        hbm_bytes(tr, toy_ann(hbm=[{"name": "x", "bytes": 1, "tags": ["st"]}]), B200, bs=16)
    with pytest.raises(DataFileError, match="mbu"):
        hbm_bytes(tr, toy_ann(hbm=[{"name": "x", "bytes": 1, "mbu": 0.5}]), B200, bs=16)
    with pytest.raises(DataFileError, match="no op_shapes"):
        hbm_bytes(tr, toy_ann(hbm=[{"name": "x", "tags": ["norm"]}]), B200, bs=16)
    r = hbm_bytes(tr, toy_ann(hbm=[{"name": "x", "tags": ["nothing"], "mbu": 0.5}]), B200, bs=16)
    assert any("matched nothing" in w for w in r.warnings)


def test_a_grouped_expert_gemm_reads_the_weights_of_the_experts_it_touches():
    from tracekit.analyses.hardware.roofline import gemm_traffic
    from tracekit.annotation.spec import OpShape

    # 80 tokens, top-8 of 448 experts, 28 on this rank (EP16): 40 rows here; P(expert hit) = 1 − (447/448)^640
    s = OpShape(m="bs*q_len", n=4096, k=7168, dtype="fp8", out_dtype="bf16", experts=448, local_experts=28, top_k=8)
    t = gemm_traffic(s, {"bs": 16, "q_len": 5}, "test")
    touched = 28 * (1 - (1 - 1 / 448) ** 640)
    assert t["source"] == "grouped_gemm" and t["m"] == pytest.approx(80 * 8 * 28 / 448)
    assert t["experts_touched"] == pytest.approx(touched)
    assert t["bytes"] == pytest.approx(40 * 7168 * 1 + touched * 4096 * 7168 * 1 + 40 * 4096 * 2)
    assert t["flops"] == pytest.approx(2 * 40 * 4096 * 7168)
    # one token, top-1: one expert's weight at most, on average local/experts of one
    one = gemm_traffic(OpShape(m=1, n=10, k=10, experts=4, top_k=1), {}, "t")
    assert one["experts_touched"] == pytest.approx(1.0) and one["m"] == pytest.approx(1.0)
    with pytest.raises(Exception, match="top_k"):
        gemm_traffic(OpShape(m=1, n=1, k=1, experts=4, top_k=9), {}, "t")


def test_the_annotation_s_shapes_win_in_the_per_kernel_table(tmp_path):
    """issue 29: with an annotation, per_tag is unchanged and per_kernel takes the tags' shapes (source annotation);
    the toy trace records no shapes of its own."""
    r = roofline(toy_trace(tmp_path), toy_ann(), B200, bs=16)
    pk = r.tables["per_kernel"].set_index("name")
    pt = r.tables["per_tag"].set_index("op_tag")
    assert pk.loc["gemm", "source"] == "annotation" and pk.loc["gemm", "op"] == "qkv"
    assert pk.loc["gemm", "bytes"] == pt.loc["qkv", "bytes"] and pk.loc["gemm", "flops"] == pt.loc["qkv", "flops"]
    assert pk.loc["gemm", "mbu"] == pytest.approx(pt.loc["qkv", "mbu"])
    assert pk.loc["norm", "shaped_calls"] == 0 and pk.loc["norm", "source"] is None
    assert 0 < r.summary["shaped_pct"] < 100
