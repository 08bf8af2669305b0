"""Shapes from the trace (issue 29): kernels linked to their launching op, the op models, roofline / hbm without an
annotation, and the findings built on them — on hand-built traces where every number is obvious."""

from __future__ import annotations

import pytest

from tracekit.analyses.findings.trace_findings import findings
from tracekit.analyses.hardware.hbm import hbm_bytes
from tracekit.analyses.hardware.roofline import roofline
from tracekit.analyses.hardware.shapes import evaluate, kernel_shapes, launching_ops
from tracekit.errors import MissingDataError, UsageError
from tracekit.gpu_specs import load_profile

from conftest import BF16, cpu_ann, gemm_trace, gpu_ann, kernel, launch, load_events, op

H100 = load_profile("h100")
H100_BW = H100.hbm_bytes_per_s
H100_BF16 = H100.peak_flops("bf16")


def test_each_kernel_is_linked_to_the_innermost_op_that_launched_it(tmp_path):
    t = gemm_trace(tmp_path)
    krow, launch_row, oprow = launching_ops(t)
    names = t.events["name"].astype(str).to_numpy()
    got = {names[k]: (names[o] if o >= 0 else None) for k, o in zip(krow, oprow)}
    assert got == {
        "mul_kernel": "aten::mul",
        "gemm_kernel": "aten::addmm",
        "copy_long": "aten::copy_",
        "copy_short": "aten::copy_",
        "orphan": None,
        "replayed": None,
    }
    assert (launch_row >= 0).all()


def test_the_models_count_2mnk_and_the_operands_bytes():
    g = evaluate("aten::addmm", [[4096], [64, 1024], [1024, 4096], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"], [])
    assert g["flops"] == 2 * 64 * 4096 * 1024 and g["family"] == "gemm" and g["dtype"] == "bf16"
    assert g["bytes"] == 2 * (64 * 1024 + 1024 * 4096 + 64 * 4096 + 4096)
    lin = evaluate("aten::linear", [[2, 3, 1024], [512, 1024], []], [BF16, BF16, ""], [])
    assert lin["flops"] == 2 * 6 * 512 * 1024 and lin["m"] == 6
    assert lin["bytes"] == 2 * (6 * 1024 + 512 * 1024 + 6 * 512)
    bmm = evaluate("aten::bmm", [[8, 16, 32], [8, 32, 64]], ["float", "float"], [])
    assert bmm["flops"] == 2 * 8 * 16 * 64 * 32 and bmm["bytes"] == 4 * (8 * 16 * 32 + 8 * 32 * 64 + 8 * 16 * 64)
    mv = evaluate("aten::matmul", [[1, 2880], [2880, 25136]], [BF16, BF16], [])
    assert mv["flops"] == 2 * 1 * 25136 * 2880
    assert evaluate("aten::mm", [[4, 8], [9, 4]], [BF16, BF16], []) is None  # K does not match: no shape
    fp8 = evaluate(
        "aten::_scaled_mm",
        [[128, 256], [256, 512], [], [], []],
        ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", ""],
        [],
    )
    assert fp8["dtype"] == "fp8" and fp8["bytes"] == 128 * 256 + 256 * 512 + 2 * 128 * 512


def test_attention_elementwise_and_copies():
    q = [1, 141, 8, 64]
    full = evaluate(
        "aten::_flash_attention_forward", [q, q, q] + [[]] * 12, [BF16] * 3 + [""] * 12, [""] * 8 + ["False"] + [""] * 6
    )
    assert full["flops"] == 2 * 1 * 8 * 141 * 141 * (64 + 64) and full["family"] == "attention"
    assert full["bytes"] == 4 * 141 * 8 * 64 * 2
    causal = evaluate(
        "aten::_flash_attention_forward", [q, q, q] + [[]] * 12, [BF16] * 3 + [""] * 12, [""] * 8 + ["True"] + [""] * 6
    )
    assert causal["flops"] == 2 * 8 * (141 * 142 / 2) * 128
    sdpa = evaluate(
        "aten::_scaled_dot_product_flash_attention",
        [[2, 4, 10, 64], [2, 4, 30, 64], [2, 4, 30, 64]],
        [BF16] * 3,
        ["", "", "", "0.", "False"],
    )
    assert sdpa["flops"] == 2 * 2 * 4 * 10 * 30 * 128
    add = evaluate("aten::add", [[64, 1024], [1024], []], [BF16, BF16, "Scalar"], [])
    assert add["bytes"] == 2 * (64 * 1024 + 1024 + 64 * 1024) and add["flops"] is None
    cp = evaluate("aten::copy_", [[1000], [1000], []], [BF16, "float", "Scalar"], [])
    assert cp["bytes"] == 1000 * 2 + 1000 * 4 and cp["family"] == "copy"
    assert evaluate("aten::fill_", [[10, 10], []], ["float", "Scalar"], [])["bytes"] == 400
    assert evaluate("aten::native_layer_norm", [[4, 8], [], [8], [8], []], [BF16, "", BF16, BF16, "Scalar"], [])[
        "bytes"
    ] == 2 * (32 + 8 + 8 + 32)
    emb = evaluate(
        "aten::embedding",
        [[151936, 1024], [16, 559], [], [], []],
        [BF16, "long int", "Scalar", "Scalar", "Scalar"],
        ["", "", "-1"],
    )
    assert emb["bytes"] == 2 * 16 * 559 * 1024 * 2 + 16 * 559 * 8  # rows read + written, the indices
    sel = evaluate("aten::index_select", [[151936, 1024], [], [8944]], [BF16, "Scalar", "long int"], ["", "0", ""])
    assert sel["bytes"] == 2 * 8944 * 1024 * 2 + 8944 * 8
    cache = evaluate(
        "_C_cache_ops::reshape_and_cache_flash",
        [[888, 1, 64], [888, 1, 64], [4213816, 16, 1, 64], [4213816, 16, 1, 64], [888], [], [], []],
        [BF16, BF16, "unsigned char", "unsigned char", "long int", "", "float", "float"],
        [],
    )
    assert cache["bytes"] == 2 * 888 * 64 * 2 + 888 * 8 + 2 * 888 * 64 * 1  # k, v read; written at their rows only
    assert cache["family"] == "copy"
    norm = evaluate("_C::fused_add_rms_norm", [[888, 2880], [888, 2880], [2880], []], [BF16, BF16, BF16, "Scalar"], [])
    assert norm["bytes"] == 2 * (2 * 888 * 2880 + 2880) + 2 * (2 * 888 * 2880) and norm["family"] == "reduction"
    assert evaluate("aten::mystery_op", [[1]], [BF16], []) is None
    assert evaluate("aten::mm", [[4, 8], [8, 4]], ["c10::Unknown", BF16], []) is None


def test_roofline_without_an_annotation_uses_the_recorded_shapes(tmp_path):
    t = gemm_trace(tmp_path)
    r = roofline(t, None, "h100")
    pk = r.tables["per_kernel"]
    assert list(pk.columns[:13]) == [
        "name",
        "op",
        "category",
        "calls",
        "shaped_calls",
        "mean_ns",
        "flops",
        "bytes",
        "dtype",
        "mfu",
        "mbu",
        "bound",
        "source",
    ]
    g = pk.set_index("name")
    assert g.loc["gemm_kernel", "op"] == "aten::addmm" and g.loc["gemm_kernel", "source"] == "shapes"
    assert g.loc["gemm_kernel", "flops"] == 2 * 64 * 4096 * 1024 and g.loc["gemm_kernel", "mean_ns"] == 20_000
    assert g.loc["gemm_kernel", "mfu"] == pytest.approx(2 * 64 * 4096 * 1024 / 20e-6 / H100_BF16)
    nbytes = 2 * (64 * 1024 + 1024 * 4096 + 64 * 4096 + 4096)
    assert g.loc["gemm_kernel", "bytes"] == nbytes
    assert g.loc["gemm_kernel", "mbu"] == pytest.approx(nbytes / 20e-6 / H100_BW)
    assert g.loc["gemm_kernel", "bound"] == "memory"  # intensity 2·64·N·K / bytes ≈ 60 FLOP/B, ridge ≈ 295
    # the copy op's work goes to its longer kernel only
    assert g.loc["copy_long", "bytes"] == 6000 and g.loc["copy_long", "shaped_calls"] == 1
    assert g.loc["copy_short", "shaped_calls"] == 0 and g.loc["copy_short", "op"] == "aten::copy_"
    assert g.loc["orphan", "op"] is None and g.loc["replayed", "shaped_calls"] == 0
    shaped_ns = 2_000 + 20_000 + 3_000
    assert r.summary["shaped_pct"] == pytest.approx(100 * shaped_ns / (shaped_ns + 1_000 + 5_000 + 50_000))
    assert r.summary["graph_kernels"] == 1 and any("CUDA graphs" in w for w in r.warnings)
    h = hbm_bytes(t, None, "h100")
    rows = h.tables["per_row"].set_index("row")
    assert rows["bytes"].sum() == h.summary["total_bytes_per_step"] == nbytes + 6000 + 2 * 3 * 64 * 1024
    assert set(h.tables["per_row"]["rule"]) == {"shapes"}


def test_no_shapes_says_how_to_get_them(tmp_path):
    ev = [gpu_ann("ProfilerStep#1", 0.0, 100.0, ext=1), kernel("k", 0.0, 10.0)]
    t = load_events(tmp_path, ev, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}])
    with pytest.raises(MissingDataError, match=r"-a ANN.*record_shapes"):
        roofline(t, None, "h100")
    with pytest.raises(MissingDataError, match="record_shapes"):
        hbm_bytes(t, None, "h100")
    assert kernel_shapes(t).shaped == 0


def _eager_trace(tmp_path, n=40):
    """One 1000 µs step: n eager adds of 10 µs each (40 % of the step) and one 100 µs GEMM at low MFU."""
    ev = [cpu_ann("ProfilerStep#1", 0.0, 1000.0, ext=9), gpu_ann("ProfilerStep#1", 0.0, 1000.0, ext=9)]
    for i in range(n):
        ts = 1.0 + 20 * i
        ev += [
            op("aten::add", ts, 5.0, [[1024, 1024], [1024, 1024], []], [BF16, BF16, "Scalar"]),
            launch("cudaLaunchKernel", ts + 1, 10 + i),
            kernel(
                "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
                ts + 5,
                10.0,
                corr=10 + i,
            ),
        ]
    ev += [
        op("aten::mm", 900.0, 5.0, [[64, 4096], [4096, 4096]], [BF16, BF16]),
        launch("cudaLaunchKernel", 901.0, 1),
        kernel("gemm_small_m", 900.0, 99.0, corr=1),
    ]
    return load_events(
        tmp_path, ev, "e.json", deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]
    )


@pytest.mark.slow
def test_what_dominates_the_step_and_kernels_below_the_roofline(tmp_path):
    res = findings(_eager_trace(tmp_path), min_ms=0)
    f = res.tables["findings"]
    eager = f[f["kind"] == "dominant_eager"].iloc[0]
    assert eager["gain_ms_per_step"] == pytest.approx(0.4) and eager["gain_pct"] == pytest.approx(40.0)
    assert "torch.compile" in eager["suggestion"] and "CUDA graphs" in eager["suggestion"]
    assert eager["basis"] == "estimated" and eager["command"].startswith("tracekit kernels")
    gemm = f[f["kind"] == "kernel_roofline"].iloc[0]
    assert "gemm_small_m" in gemm["title"] and "M×N×K 64×4,096×4,096" in gemm["how"]
    assert "small" in gemm["suggestion"]
    # the GEMM at 4096²·64·2 B·… bytes and 2·64·4096² FLOP: time at 80 % of 3.35 TB/s
    nbytes = 2 * (64 * 4096 + 4096 * 4096 + 64 * 4096)
    target = max(nbytes / (0.8 * H100_BW), 2 * 64 * 4096 * 4096 / (0.7 * H100_BF16)) * 1e9
    assert gemm["gain_ms_per_step"] == pytest.approx((99_000 - target) / 1e6)
    # PyTorch's own add kernel: grouped per category, never one finding per library kernel
    assert not f["title"].str.contains("vectorized_elementwise").any()
    src = res.tables["sources"].set_index("source")
    assert bool(src.loc["dominance", "ran"]) and bool(src.loc["shapes", "ran"])


@pytest.mark.slow
def test_major_needs_the_share_of_the_step_and_the_floor(tmp_path):
    t = _eager_trace(tmp_path)
    f = findings(t, min_ms=0).tables["findings"]
    timed = f[f["gain_pct"].notna()]
    assert (timed.loc[~timed["minor"], "gain_pct"] >= 1.0).all()
    assert (timed.loc[timed["gain_pct"] < 1.0, "minor"]).all()
    f50 = findings(t, min_ms=0, min_pct=60).tables["findings"]
    assert f50.loc[f50["gain_pct"].notna(), "minor"].all()  # the largest is half of the step
    f_floor = findings(t, min_ms=0.6).tables["findings"]  # the absolute floor still rules
    assert f_floor.loc[f_floor["gain_pct"].notna(), "minor"].all()
    assert (f["gain_ms_per_step"].dropna() >= 0.001).all()  # nothing that rounds to zero is listed
    with pytest.raises(UsageError, match="min-pct"):
        findings(t, min_pct=-1)


def test_kernel_names_in_titles_read_like_what_they_are():
    from tracekit.analyses.findings.rules import kernel_label

    mul = (
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
        "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(at::"
        "TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)"
    )
    assert kernel_label(mul) == "elementwise_kernel<MulFunctor>"
    assert (
        kernel_label(
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<"
            "float, float, float, float>, unsigned int, c10::BFloat16, 4> >(...)"
        )
        == "reduce_kernel<MeanOps>"
    )
    assert (
        kernel_label(
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_"
            "128x32_8x5_nn_align1::Params)"
        )
        == "cutlass simt_sgemm<128x32_8x5_nn>"
    )
    assert (
        kernel_label(
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
            "namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(...)"
        )
        == "CatArrayBatchedCopy"
    )
    from tracekit.names import short_name  # titles and terminal tables shorten a name the same way

    assert kernel_label(mul) == short_name(mul)
    assert (
        kernel_label("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
        == "ncclDevKernel_AllGather_RING_LL"
    )
    assert kernel_label("gemm_small_m") == "gemm_small_m"


@pytest.mark.slow
def test_tail_waves_of_library_kernels_are_one_finding_and_full_waves_none(tmp_path):
    props = [{"id": 0, "name": "NVIDIA B200", "numSms": 100, "totalGlobalMem": 191_000_000_000}]
    launch_cfg = {"registers per thread": 64, "shared memory": 150_528}  # 1 CTA per SM on a B200
    lib = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(int)"
    ev = [
        cpu_ann("ProfilerStep#1", 0.0, 2000.0, ext=1),
        gpu_ann("ProfilerStep#1", 0.0, 2000.0, ext=1),
        kernel(lib, 0.0, 400.0, grid=[150, 1, 1], block=[128, 1, 1], **launch_cfg),  # 2 waves at 75 %
        kernel(
            lib.replace("MulFunctor", "AddFunctor"), 400.0, 400.0, grid=[150, 1, 1], block=[128, 1, 1], **launch_cfg
        ),
        kernel("mine", 800.0, 400.0, grid=[150, 1, 1], block=[128, 1, 1], **launch_cfg),
        kernel("nearly_full", 1200.0, 400.0, grid=[199, 1, 1], block=[128, 1, 1], **launch_cfg),
    ]  # 99.5 %
    t = load_events(tmp_path, ev, "w.json", deviceProperties=props)
    f = findings(t, min_ms=0).tables["findings"]
    w = f[f["kind"].str.startswith("wave_quantization")]
    assert sorted(w["kind"]) == ["wave_quantization", "wave_quantization_library"]
    grouped = w[w["kind"] == "wave_quantization_library"].iloc[0]
    assert grouped["gain_ms_per_step"] == pytest.approx(2 * 0.400 * 0.25) and "2 name(s)" in grouped["title"]
    assert "vectorized_elementwise_kernel<MulFunctor>" in grouped["how"] and "torch.compile" in grouped["suggestion"]
    assert "mine" in w[w["kind"] == "wave_quantization"].iloc[0]["title"]
    assert not f["title"].str.contains("nearly_full").any()
