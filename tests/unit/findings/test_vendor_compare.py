"""`findings --compare` across vendors: ops matched by what they computed (op and shapes, else category and layer
position), not by kernel name; sides named by their GPU; a per-category table."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tracekit
from tests.conftest import CORPUS, cpu_ann, gpu_ann, kernel, launch, load_events, op

pytestmark = pytest.mark.slow  # two traces loaded and compared per test (0.5 to 1.8 s each)

BF16 = "c10::BFloat16"
H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9, "computeMinor": 0}]
MI300 = [{"id": 0, "name": "AMD Instinct MI300X VF", "numSms": 304, "computeMajor": 9, "computeMinor": 4}]
# per layer: a GEMM (one kernel on H100, two on MI300: a split-K GEMM and its reduction), attention, a mul
GEMM = {
    "H100": [("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 40.0)],
    "MI300X": [("Cijk_Alik_Bljk_BBS_BH_MT256x128x64_MI16x16x1_SN", 50.0), ("Cijk_Alik_Bljk_PostGSU_kernel", 10.0)],
}
ATTN = {
    "H100": ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", 30.0),
    "MI300X": ("attn_fwd", 45.0),
}
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float>>"


def _events(gpu: str, layers: int = 2, with_ops: bool = True) -> list:
    ev = [cpu_ann("ProfilerStep#1", 0.0, 2000.0, ext=9), gpu_ann("ProfilerStep#1", 5.0, 1900.0, ext=9)]
    t, corr = 10.0, 1

    def one(name: str, dur: float, op_ev: dict | None):
        nonlocal t, corr
        if op_ev is not None and with_ops:
            ev.append(op_ev)
        ev.append(launch("hipLaunchKernel" if gpu == "MI300X" else "cudaLaunchKernel", t + 1.0, corr))
        ev.append(kernel(name, t + 2.0, dur, corr=corr))
        corr += 1
        t += dur + 5.0

    for _ in range(layers):
        mm = op("aten::mm", t, 70.0, [[64, 1024], [1024, 4096]], [BF16, BF16])
        for i, (name, dur) in enumerate(GEMM[gpu]):
            one(name, dur, mm if i == 0 else None)
        one(*ATTN[gpu], op("aten::_flash_attention_forward", t, 50.0, [[1, 64, 8, 64]] * 3, [BF16] * 3))
        one(MUL, 8.0, op("aten::mul", t, 10.0, [[64, 4096], [64, 4096]], [BF16, BF16]))
    return ev


def _pair(tmp_path, **kw):
    (tmp_path / "h100").mkdir()
    (tmp_path / "mi300").mkdir()
    a = load_events(tmp_path / "h100", _events("H100", **kw), "Qwen_Qwen1.5-0.5B.json", deviceProperties=H100)
    b = load_events(tmp_path / "mi300", _events("MI300X", **kw), "Qwen_Qwen1.5-0.5B.json", deviceProperties=MI300)
    return a, b


def test_matched_by_op_and_shapes_with_device_labels(tmp_path):
    a, b = _pair(tmp_path)
    res = tracekit.findings(compare=(a, b))
    s = res.summary
    assert (s["a"], s["b"]) == ("H100", "MI300X")  # not the shared model prefix
    assert s["matched_by"].startswith("op and shapes")
    assert s["vendors"] == ["nvidia", "amd"]
    ops = res.tables["ops"].set_index("op")
    gemm = ops.loc["aten::mm [64,1024]×[1024,4096]"]
    # one call per layer; MI300's call is both its kernels: 60 µs against 40 µs
    assert gemm["calls_per_step_a"] == gemm["calls_per_step_b"] == 2
    assert gemm["mean_ns_a"] == 40_000 and gemm["mean_ns_b"] == 60_000
    assert gemm["kernel"].startswith("sm90_xmma") and gemm["kernel_b"].startswith("Cijk_Alik_Bljk_BBS")
    attn = ops.loc["aten::_flash_attention_forward [1,64,8,64]×[1,64,8,64]×[1,64,8,64]"]
    assert attn["mean_ns_a"] == 30_000 and attn["mean_ns_b"] == 45_000
    titles = " | ".join(res.tables["findings"]["title"])
    assert "aten::mm" in titles and "aten::_flash_attention_forward" in titles and "slower per call in MI300X" in titles
    cats = res.tables["categories"].set_index("category")
    assert cats.loc["gemm", "per_step_ns_a"] == 80_000 and cats.loc["gemm", "per_step_ns_b"] == 120_000
    assert cats.loc["gemm", "diff_ns"] == -40_000


def test_without_ops_matches_category_and_layer_position(tmp_path):
    a, b = _pair(tmp_path, layers=3, with_ops=False)
    res = tracekit.findings(compare=(a, b))
    ops = res.tables["ops"].set_index("op")
    # 3 attention kernels per step = 3 layers; H100 runs 1 GEMM kernel per layer, MI300 2
    assert "gemm · layer position 0" in ops.index
    assert ops.loc["gemm · layer position 0", "calls_per_step_a"] == 3
    assert ops.loc["gemm · layer position 0", "mean_ns_b"] == 50_000
    assert ops.loc["attention_prefill · layer position 0", "mean_ns_a"] == 30_000


def test_same_vendor_still_by_kernel_name(tmp_path):
    (tmp_path / "x").mkdir()
    a = load_events(tmp_path, _events("H100"), "a.json", deviceProperties=H100)
    b = load_events(tmp_path / "x", _events("H100"), "b.json", deviceProperties=H100)
    assert tracekit.findings(compare=(a, b)).summary["matched_by"] == "kernel name"


def test_text_at_80_columns(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    a, b = _pair(tmp_path)
    code, out, _ = cli("findings", "--compare", a.path, b.path)
    assert code == 0
    assert "MI300X" in out and "Qwen_Qwen1" not in out.split("findings —")[0]
    assert "categories" in out
    assert max(len(line) for line in out.splitlines()) <= 80


# the shared corpus, or directories named by TRACEKIT_CORPUS laid out like it (as tests/integration/test_shapes_corpus)
CORPORA = [CORPUS] + [Path(p) for p in os.environ.get("TRACEKIT_CORPUS", "").split(":") if p]


def _real(rel: str) -> Path:
    return next((c / rel for c in CORPORA if (c / rel).is_file()), CORPUS / rel)


H100_REAL = _real("tracelens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
MI300_REAL = _real("tracelens/tests/traces/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")


@pytest.mark.skipif(
    not (H100_REAL.exists() and MI300_REAL.exists()),
    reason="TraceLens's H100/MI300 Qwen1.5 pair is in neither ../shared/corpus/tracelens nor TRACEKIT_CORPUS",
)
def test_real_h100_mi300_pair():
    res = tracekit.findings(compare=(tracekit.load(H100_REAL), tracekit.load(MI300_REAL)))
    assert (res.summary["a"], res.summary["b"]) == ("H100", "MI300X")
    ops = res.tables["ops"]
    gemm = ops[ops["category"] == "gemm"]
    assert len(gemm) >= 3 and (gemm["kernel"] != gemm["kernel_b"]).all()
    assert (ops["category"].astype(str).str.startswith("attention")).any()
    assert {"gemm", "elementwise"} <= set(res.tables["categories"]["category"])
    mm = ops.set_index("op").loc["aten::mm [8944,1024]×[1024,2816]"]  # the same GEMM, 48 calls on each side
    assert mm["calls_per_step_a"] == mm["calls_per_step_b"] == 48
    assert mm["mean_ns_b"] > mm["mean_ns_a"]  # slower on MI300X in this pair
    titles = " | ".join(res.tables["findings"]["title"])
    assert "aten::mm" in titles and "aten::_flash_attention_forward" in titles
