"""The terminal report reads on one screen (issue 29): at COLUMNS=80, `report` on every fixture trace fits 50 lines,
with and without the annotation that ships for it; no line is wider than the terminal; the numbers it prints are
whole (each one-step number is the JSON's, rounded as shown); kernel names are shortened into distinct names at 120
columns and whole with --wide; annotations wrap their reasons instead of cutting them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SYN = ROOT / "fixtures" / "synthetic"
SHIPPED = {"dp16": "k3_dp16", "dp2dcp8": "k3_dp2_dcp8", "dsv3": "deepseek_v3"}
TRACES = sorted(SYN.glob("*.trace.json.gz"))


def _annotation(trace: Path) -> str:
    return SHIPPED[trace.name.split("_")[0]]


@pytest.mark.slow
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name.split(".")[0])
@pytest.mark.parametrize("annotated", [False, True])
def test_report_fits_an_80_by_50_screen(cli, monkeypatch, trace, annotated):
    monkeypatch.setenv("COLUMNS", "80")
    args = ["report", trace, *(["-a", _annotation(trace)] if annotated else [])]
    code, out, err = cli(*args)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) <= 50, (len(lines), out)
    assert all(len(ln) <= 80 for ln in lines), [ln for ln in lines if len(ln) > 80]
    doc = json.loads(cli(*args, "--format", "json")[1])
    step = doc["summary"]["timeline_step"]
    rows = [r for r in doc["tables"]["one_step"] if r["step"] == step and r["group_by"] == "category"]
    top = max(rows, key=lambda r: r["wall_ns"])
    # the costliest category comes first, its wall time whole as the JSON has it (ms, 3 decimals)
    first = next(ln for ln in lines if re.match(r"\S+\s+\d", ln) and top["name"] in ln.split()[0])
    assert f"{top['wall_ns'] / 1e6:,.3f}" in first.split()
    by_name = {ln.split()[0]: ln.split() for ln in lines if len(ln.split()) == 4 and ln.split()[1][0].isdigit()}
    shown = [r for r in rows if r["name"] in by_name]
    assert len(shown) >= min(5, len(rows))
    for r in shown:  # every number printed is the JSON's, whole (ms to 3 decimals, % to 1)
        assert by_name[r["name"]][1:3] == [f"{r['wall_ns'] / 1e6:,.3f}", f"{r['wall_pct']:,.1f}"], (
            r,
            by_name[r["name"]],
        )
    assert "--all shows every table" in out and "findings" in out
    full = cli(*args, "--all")[1]
    assert len(full.splitlines()) > len(lines)


def test_kernel_names_short_distinct_and_whole_with_wide(cli, monkeypatch):
    trace = SYN / "dsv3_bs32.trace.json.gz"
    doc = json.loads(cli("kernels", trace, "--format", "json")[1])
    names = [r["name"] for r in doc["tables"]["kernels"]]
    monkeypatch.setenv("COLUMNS", "120")
    out = cli("--all", "kernels", trace)[1]
    from tracekit.names import distinct_names

    shown = distinct_names(names)
    assert len(set(shown)) == len(names) > 1  # different rows read differently…
    flat_out = "".join(out.split())
    missing = [s for s in shown if "".join(s.split())[:20] not in flat_out]
    assert not missing, missing  # …and that is what the table prints (folded over lines)
    assert "void " not in out and all(len(ln) <= 120 for ln in out.splitlines())
    monkeypatch.setenv("COLUMNS", "80")
    out80 = cli("kernels", trace)[1]
    first = next(ln for ln in out80.splitlines() if re.match(r"^\S.*\s\d[\d,]*\s+\d", ln))
    assert len(first.split("  ")[0].strip()) > 8  # not cut to 8 characters
    wide = cli("--wide", "--all", "kernels", trace)[1]
    assert "void " in wide and len(wide.splitlines()) > len(cli("--all", "kernels", trace)[1].splitlines())
    assert cli("kernels", trace, "--all", "--wide")[1] == wide  # a global flag, anywhere on the line like --all


def test_names_rules():
    from tracekit.names import distinct_names, short_name

    assert (
        short_name(
            "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, "
            "std::array<char*, 3ul> >(int, at::native::MulFunctor<float>, std::array<char*, 3ul>)"
        )
        == "vectorized_elementwise_kernel<MulFunctor>"
    )
    assert (
        short_name(
            "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, "
            "cutlass::half_t, Flash_kernel_traits<128, 64, 64, 4, cutlass::half_t> >, false>(Flash_fwd_params)"
        )
        == "flash_fwd_kernel<hdim128>"
    )
    assert (
        short_name(
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
            "segment_k_off_kernel__5x_cublas"
        )
        == "sm90_xmma_gemm<128x128x64>"
    )
    assert (
        short_name(
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align1>"
            "(cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align1::Params)"
        )
        == "cutlass tensorop_s1688gemm<128x128_16x4_nt>"
    )
    assert (
        short_name(
            "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_"
            "transOut_schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f"
        )
        == "bmm_Bfloat16_MxE2m1MxE4m3_Fp32<128x16x256>"
    )
    assert (
        short_name("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext")
        == "fmhaSm100aKernel<hdim64, Causal>"
    )
    assert short_name("gemm") == "gemm" and short_name("scheduler.run_batch") == "scheduler.run_batch"
    a = "void at::native::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(float*)"
    b = "void at::native::CatArrayBatchedCopy<float, unsigned int, 3, 64, 64>(float*)"
    da, db = distinct_names([a, b])
    assert da != db and "1, 128, 1" in da and "3, 64, 64" in db


def test_annotations_wrap_their_reasons(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    trace = SYN / "dsv3_bs32.trace.json.gz"
    doc = json.loads(cli("annotations", trace, "--format", "json")[1])
    reasons = [r["reason"] for r in doc["tables"]["annotations"] if r.get("reason")]
    assert reasons
    out = cli("--all", "annotations", trace)[1]
    flat = " ".join(out.split())
    for reason in reasons:  # wrapped, not cut: its last words are printed (other columns may share its lines)
        assert " ".join(reason.split()[-2:]) in flat, reason
    assert not re.search(r"\S…", out)  # nothing cut at its end (a path may lose its start: "…/name.json")
    assert all(len(ln) <= 80 for ln in out.splitlines())
