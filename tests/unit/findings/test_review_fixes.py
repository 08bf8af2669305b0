"""The reviewer's defects of `tracekit findings` (issue 39), one test each on small hand-built inputs: fused kernels
told to fuse, graph-replayed kernels called eager, a tail-wave finding mixing two grids, a total gain above the step,
a time under one kernel launch, source counts that disagree with the list, e-notation, a GiB total of 0."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import cpu_ann, gpu_ann, gemm_trace, kernel, launch, load_events
from tracekit.analyses.findings.kernel_sources import _wave_fields
from tracekit.analyses.findings.rules import (
    distinct_labels,
    finding_rules,
    is_fused,
    launch_floor_ns,
    ms_text,
    rank_findings,
)
from tracekit.analyses.findings.trace_findings import capped, findings, listed_counts
from tracekit.analyses.categories import kernel_owner
from tracekit.gpu_specs import as_profile

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]
ATEN_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"  # noqa: E501
CK_ADD_RMSNORM = "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_29Rmsnorm2dFwdPipelineProblemIDF16bfffDF16bfvvNS_15Generic2dBlockShapeINS_8sequenceIJLi1ELi3072EEEELb1ELb0ELb1ELNS_17Rmsnorm2dFusedAddEnumE1ELNS_19Rmsnorm2dFusedQuantEnumE0EEEEENS_21DefaultPolicyEEEEEJNS1_5KargsEEEEvDpT0_"  # noqa: E501


def _step_of(names: list[str], how: str = "cudaLaunchKernel", each_us: float = 40.0):
    """One 100 µs ProfilerStep whose kernels (``names``, one after the other, ``each_us`` each) are launched by
    ``how`` (cudaLaunchKernel: eager; cudaGraphLaunch: a CUDA-graph replay)."""
    ev = [cpu_ann("ProfilerStep#1", 0.0, 110.0, ext=9), gpu_ann("ProfilerStep#1", 5.0, 100.0, ext=9)]
    for i, n in enumerate(names):
        ev += [launch(how, 1.0 + i, 10 + i), kernel(n, 6.0 + i * (each_us + 1), each_us, corr=10 + i)]
    return ev


# 1. fused kernels are not told to fuse; graph-replayed kernels are not "eager"


@pytest.mark.parametrize(
    "name, fused",
    [
        ("triton_poi_fused_add_cos_sin_0", True),
        ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0", True),
        ("triton_red_fused_native_layer_norm_0", True),
        (CK_ADD_RMSNORM, True),
        ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, int)", True),
        ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>(c10::BFloat16*)", True),
        (ATEN_ADD, False),
        ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*)", False),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float)", False),
    ],
)
def test_fused_kernels_are_known_by_name_and_owner(name, fused):
    assert is_fused(name, kernel_owner(name)) is fused


@pytest.mark.slow
def test_an_inductor_kernel_is_not_eager_work_to_fuse(tmp_path):
    """The triton_example defect: Inductor's triton_poi_fused_add_cos_sin_0 was "Eager rope kernels take 100 %"."""
    fused = findings(load_events(tmp_path, _step_of(["triton_poi_fused_add_cos_sin_0"] * 2), "f.json"), hw="h100")
    assert "dominant_eager" not in set(fused.tables["findings"]["kind"])
    assert not fused.tables["findings"]["suggestion"].str.contains("torch.compile").any()
    eager = findings(load_events(tmp_path, _step_of([ATEN_ADD] * 2), "e.json"), hw="h100")
    row = eager.tables["findings"].set_index("kind").loc["dominant_eager"]
    assert row["title"].startswith("Eager ") and "CUDA graphs remove the launch cost" in row["suggestion"]


def test_graph_replayed_kernels_are_not_called_eager(tmp_path):
    """Kernels replayed from a CUDA graph: the finding says what still helps (their HBM traffic), not 'eager' and
    not 'use CUDA graphs'."""
    got = findings(load_events(tmp_path, _step_of([ATEN_ADD] * 2, how="cudaGraphLaunch"), "g.json"), hw="h100")
    row = got.tables["findings"].set_index("kind").loc["dominant_eager"]
    assert not row["title"].startswith("Eager") and "replayed from CUDA graphs" in row["how"]
    assert "already run from CUDA graphs" in row["suggestion"]
    assert "CUDA graphs remove" not in row["suggestion"]


def test_the_variant_words_are_in_the_rules_file():
    kinds = finding_rules()["kinds"]
    for kind, variants in {
        "dominant_eager": ("graph",),
        "kernel_roofline_library": ("fused", "graph"),
        "wave_quantization_library": ("fused",),
    }.items():
        for v in variants:
            assert "fuse them (torch.compile)" not in kinds[kind][f"suggestion_{v}"]


# 2. a tail-wave finding's words are of one grid; two kernels of one short name have two titles


def _wave_row(**over) -> pd.Series:
    r = {
        "name": "k",
        "count": 125,
        "ctas": 256,
        "capacity_lo": 240,
        "capacity_hi": 240,
        "waves_lo": 2,
        "waves_hi": 2,
        "ctas_per_sm_lo": 3,
        "ctas_per_sm_hi": 3,
        "limited_by": "registers",
        "ctas_per_sm_from": "launch configuration",
        "lost_lo_ns": 5.68e6,
        "lost_hi_ns": 5.68e6,
        "lost_pct_lo": 27.5,
        "lost_pct_hi": 27.5,
        "wave_efficiency_lo": 0.725,
        "wave_efficiency_hi": 0.725,
        "total_ns": 20.6e6,
        "grids": 3,
        "ctas_min": 256,
        "ctas_max": 1024,
    }
    return pd.Series({**r, **over})


def test_a_tail_wave_finding_does_not_mix_grids():
    """256 CTAs on 240 slots is 2 waves at 53 %: the name's time-weighted 72 % over its three grids was printed
    beside that grid; now the grid's own efficiency is, and the mix is said as such."""
    grid = pd.Series({"count": 60, "wave_efficiency_lo": 256 / 480, "wave_efficiency_hi": 256 / 480})
    f = _wave_fields(_wave_row(), grid)
    assert f["eff"] == "53%"
    assert "most common launch, 60 of 125" in f["grids_note"] and "3 grids" in f["grids_note"]
    assert "72%" in f["grids_note"]
    one = _wave_fields(_wave_row(grids=1, wave_efficiency_lo=256 / 480, wave_efficiency_hi=256 / 480), grid)
    assert one["eff"] == "53%" and one["grids_note"] == ""
    assert "{grids_note}" in finding_rules()["kinds"]["wave_quantization"]["how"]


def test_two_kernels_of_one_short_name_get_two_titles():
    a = "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, cudnnTensorStruct)"
    b = "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>(float, float, cudnnTensorStruct)"
    la, lb, lc = distinct_labels([a, b, "void other_kernel<1>(int)"])
    assert la != lb and "128" in la and "32" in lb
    assert lc == distinct_labels(["void other_kernel<1>(int)"])[0]  # a name read once keeps its short label


# 3. the total gain is never above the step


def test_the_total_gain_is_capped_at_the_step():
    assert capped(0.004, 0.002) == 0.002
    assert capped(0.001, 0.002) == 0.001
    assert capped(None, 0.002) is None and capped(3.0, None) == 3.0


def test_the_summary_total_of_overlapping_findings_is_at_most_the_step(tmp_path):
    got = findings(load_events(tmp_path, _step_of([ATEN_ADD] * 2), "e.json"), hw="h100")
    t = got.tables["findings"]["gain_ms_per_step"].dropna()
    assert got.summary["total_gain_ms"] <= got.summary["step_ms"] + 1e-12
    assert got.summary["total_gain_ms"] == pytest.approx(min(float(t.sum()), got.summary["step_ms"]))


# 4. no time at the roofline is under one kernel launch


def test_the_launch_floor_is_data_per_vendor():
    floors = finding_rules()["launch_floor_us"]
    assert launch_floor_ns(as_profile("mi300x")) == 1e3 * floors["amd"]
    assert launch_floor_ns(as_profile("h100")) == 1e3 * floors["nvidia"]
    assert launch_floor_ns(None) == 1e3 * floors["default"]
    assert all(1.0 <= v <= 10.0 for k, v in floors.items() if not k.startswith("_"))


def test_no_kernel_target_is_below_the_launch_floor(tmp_path):
    """gemm_trace's copy kernels move 6 kB (about 2 ns at H100 bandwidth): their time at the roofline is the floor,
    and the shapes source files no gain a launch cannot lose."""
    from tracekit.analyses.findings.context import Context
    from tracekit.analyses.findings.kernel_arrays import kernel_arrays
    from tracekit.analyses.options import AllGatherOptions
    from tracekit.analyses.steps.resolve import find_steps

    t = gemm_trace(tmp_path)
    hw = as_profile("h100")
    ctx = Context(
        trace=t, ann=None, steps=find_steps(t), step_ns=380e3, hw=hw, log=None, ag=AllGatherOptions(), sms=None
    )
    ka = kernel_arrays(ctx)
    tgt = ka["target"][ka["shaped"]]
    assert tgt.size and (tgt >= launch_floor_ns(hw)).all()
    assert np.isclose(tgt.min(), launch_floor_ns(hw))


def test_a_gemm_under_the_floor_is_called_launch_bound():
    adv = finding_rules()["gemm_advice"]
    assert "launch" in adv["launch_bound"] and "batch more tokens" not in adv["launch_bound"]
    for kind in ("kernel_roofline", "op_roofline", "roofline_gap"):
        assert "{floor_us}" in finding_rules()["kinds"][kind]["how"]


# 5. the sources table counts what the list holds


def test_the_sources_count_what_the_list_holds():
    rows = [
        {"kind": "idle_host", "title": "a", "gain_ms_per_step": 0.6, "gain_gib": None, "source": "idle"},
        {"kind": "idle_short", "title": "b", "gain_ms_per_step": 0.0002, "gain_gib": None, "source": "idle"},
    ]
    for r in rows:
        r.update(gain_pct=None, gain_tokens=None, basis="measured", evidence="", command="", suggestion="", how="")
    table = rank_findings(rows, min_ms=0.02, min_gib=0.25, min_pct=1.0)
    status = listed_counts([{"source": "idle", "ran": True, "findings": 2, "reason": None}], table)
    assert len(table) == 1 and status[0]["findings"] == 1
    assert "1 more" in status[0]["reason"] and "left out" in status[0]["reason"]
    kept = listed_counts([{"source": "waves", "ran": False, "findings": 0, "reason": "why"}], table)
    assert kept[0] == {"source": "waves", "ran": False, "findings": 0, "reason": "why"}


# 7. numbers for people, never e-notation


@pytest.mark.parametrize(
    "ns, text",
    [(1.0889e10, "10,889 ms"), (4.031e9, "4,031 ms"), (13.7e6, "13.7 ms"), (471e3, "471 µs"), (80, "80 ns")],
)
def test_durations_never_print_e_notation(ns, text):
    assert ms_text(ns) == text


# 8. no memory finding: the GiB total is unknown, not 0


@pytest.mark.slow
def test_the_gib_total_is_a_dash_without_a_memory_finding(tmp_path, cli):
    path = tmp_path / "e.json"
    load_events(tmp_path, _step_of([ATEN_ADD] * 2), "e.json")
    code, out, _ = cli("findings", path, "--hw", "h100")
    assert code == 0
    line = next(x for x in out.splitlines() if "memory gains at most" in x)
    assert "0.000" not in line and "–" in line
    assert (
        findings(load_events(tmp_path, _step_of([ATEN_ADD] * 2), "e2.json"), hw="h100").summary["total_gain_gib"]
        is None
    )
