"""The reviewer's defects of `tracekit findings` (issue 39) on the corpus traces they were found on: each trace is
read once and every defect found there is checked (slow: they load real traces)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import CORPUS

HTA = CORPUS / "hta" / "tests" / "data"
TL = CORPUS / "tracelens" / "tests"
pytestmark = pytest.mark.slow


def _findings(path, **kw):
    import tracekit
    from tracekit.analyses.findings.trace_findings import findings

    if not path.exists():
        pytest.skip(f"{path} is not in the corpus (../shared/corpus)")
    return findings(tracekit.load(path, cache=False), **kw)


def _counts_match(got) -> None:
    """Defect 5: the sources table counts what the list holds (after the merge and the 1 µs cut)."""
    listed = got.tables["findings"]["source"].value_counts()
    for s in got.tables["sources"].to_dict("records"):
        assert s["findings"] == int(listed.get(s["source"], 0)), s


def test_triton_example_is_not_told_to_fuse_what_inductor_fused():
    got = _findings(HTA / "triton_example" / "triton_example.json.gz")
    t = got.tables["findings"]
    assert not t["title"].str.startswith("Eager").any()  # defect 1: triton_poi_fused_add_cos_sin_0
    assert not t["suggestion"].str.contains(r"fuse them \(torch.compile\)", case=False).any()
    total = got.summary["total_gain_ms"]
    assert total is None or total <= got.summary["step_ms"]  # defect 3
    assert got.summary["total_gain_gib"] is None  # defect 8
    _counts_match(got)


def test_vllm_graph_replay():
    """Defects 1, 4 and 6 on vLLM's full CUDA-graph decode on MI300X."""
    got = _findings(TL / "traces" / "inference" / "vllm_decode_full" / "graph_execution.json.gz")
    t = got.tables["findings"]
    assert not t["title"].str.startswith("Eager").any()
    assert not t["suggestion"].str.contains("Small eager kernels").any()  # every kernel here is replayed
    for _, r in t.iterrows():  # Inductor's and ck_tile's fused kernels are never told to fuse
        if re.search(r"triton_poi_fused|Rmsnorm2dFwd", r["how"]) and "library" in r["kind"]:
            assert "already fused" in r["suggestion"], r["title"]
    # defect 4: the 32×32×2,880 addmm: at least the 3 µs launch floor per call, and no "batch more tokens"
    tiny = t[t["how"].str.contains("32×32×2,880", regex=False)]
    assert len(tiny) == 1
    how = tiny["how"].iloc[0]
    per_call = float(re.search(r"against ([\d.]+) µs", how).group(1))
    assert per_call >= 3.0 and "launch floor" in how
    assert "batch more tokens" not in tiny["suggestion"].iloc[0] and "launch" in tiny["suggestion"].iloc[0]
    # defect 6: the waves reason agrees with `tracekit waves` (1–2 waves over the range)
    waves = got.tables["sources"].set_index("source").loc["waves", "reason"]
    assert "at every CTAs-per-SM count" in waves and "whole range" in waves
    _counts_match(got)


def test_ns_resolution_tail_waves_are_of_one_grid_and_titled_apart():
    """Defect 2: bn_bw_1C11_kernel_new<…128…> and <…32…> had one title, and the second printed 256 CTAs on 240
    slots in 2 waves at 72 % (its three grids' time-weighted figure)."""
    path = next(iter((HTA / "ns_resolution_trace").glob("rank-0*.json.gz")), None) if HTA.exists() else None
    if path is None:
        pytest.skip("the HTA ns_resolution_trace is not in the corpus")
    got = _findings(path)
    w = got.tables["findings"]
    w = w[w["kind"] == "wave_quantization"]
    assert w["title"].is_unique
    for _, r in w.iterrows():
        m = re.search(r"([\d,]+) CTAs on ([\d,]+) slots .*? run in (\d+) waves at (\d+)% efficiency", r["how"], re.S)
        ctas, slots, waves, eff = (int(x.replace(",", "")) for x in m.groups())
        assert waves == -(-ctas // slots)
        assert eff == round(100 * ctas / (waves * slots)), r["title"]  # the words' own arithmetic
    _counts_match(got)


def test_sglang_decode_sources_count_the_list():
    got = _findings(TL / "traces" / "inference" / "sglang_decode" / "sglang_Qwen3-8B_decode.json.gz")
    _counts_match(got)  # defect 5: "idle yes 2" with one idle finding listed


def test_rocprof_report_prints_no_e_notation(cli):
    path = TL / "rocprof" / "908_results.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is not in the corpus")
    code, out, _ = cli("report", path)
    assert code == 0
    assert not re.search(r"\d\.\d+e[+-]\d", out)  # defect 7: 1.09e+04 ms
    assert "10,889 ms per step" in out
