"""Shapes from the trace on real profiles recorded with record_shapes=True (issue 29).

For every GEMM kernel the FLOPs tracekit reports equal 2·M·N·K of its launching op's ``Input Dims``, computed here
independently from the raw JSON (correlation → runtime launch → the innermost cpu_op on the launch's thread, found by
a plain scan); MFU and MBU lie in [0, 1]; the share of GPU time with a shape is reported. Findings on the same traces:
no "major" finding under 1 % of the step, and a "what dominates" finding where one group exceeds its threshold.

The traces come from the shared corpus (or directories named by TRACEKIT_CORPUS, laid out like it); a trace that is
in none of them is skipped.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.analyses.findings.trace_findings import findings
from tracekit.analyses.hardware.roofline import roofline
from tracekit.analyses.hardware.shapes import kernel_shapes

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

ROOT = Path(__file__).resolve().parents[2]
CORPORA = [ROOT.parent / "shared" / "corpus"] + [Path(p) for p in os.environ.get("TRACEKIT_CORPUS", "").split(":") if p]
T = "tracelens/tests/traces/"
TRACES = [
    T + "h100/gaunernst_bert-small-uncased__1016001.json.gz",
    T + "b200/eager_trace.json.gz",
    T + "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    T + "inference/vllm_decode_full/graph_execution.json.gz",
    T + "h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    T + "mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
]
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm"}


def _find(rel: str) -> Path:
    for c in CORPORA:
        p = c / rel
        if p.is_file() and p.stat().st_size > 0:
            return p
    pytest.skip(f"{rel} is in none of {', '.join(map(str, CORPORA))} (the shared corpus, or TRACEKIT_CORPUS)")


def _two_mnk(name: str, dims: list) -> float | None:
    """2·M·N·K of a GEMM op from its Input Dims, written out per op (not through tracekit's models)."""
    if name == "aten::linear":
        x, w = dims[0], dims[1]
        m = 1
        for v in x[:-1]:
            m *= v
        return 2.0 * m * w[0] * w[1]
    a, b = (dims[1], dims[2]) if name in ("aten::addmm", "aten::baddbmm") else (dims[0], dims[1])
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    batch = 1
    for v in a[:-2] if len(a) >= len(b) else b[:-2]:
        batch *= v
    return 2.0 * batch * a[-2] * b[-1] * a[-1]


def _independent_flops(path: Path) -> dict[int, float]:
    """Kernel record index → 2·M·N·K of its launching op, for every kernel whose launching op is a GEMM and which
    carries the op call's work (the longest kernel the call launched; calls with a tie are left out)."""
    with gzip.open(path) as fh:
        doc = json.load(fh)
    ev = doc["traceEvents"] if isinstance(doc, dict) else doc
    ops = defaultdict(list)
    launches = {}
    kernels = []
    for i, e in enumerate(ev):
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat == "cpu_op":
            ops[(e["pid"], e["tid"])].append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), i))
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches.setdefault(e["args"]["correlation"], e)
        elif cat == "kernel":
            kernels.append(i)
    calls = defaultdict(list)  # op record index -> [(dur, kernel record index)]
    for ki in kernels:
        k = ev[ki]
        la = launches.get(k.get("args", {}).get("correlation"))
        if la is None:
            continue
        t = float(la["ts"])
        best = None
        for s, e_, i in ops[(la["pid"], la["tid"])]:
            if s <= t < e_:
                if best is None or s > best[0] or (s == best[0] and e_ - s < best[1] - best[0]):
                    best = (s, e_, i)
        if best is not None:
            calls[best[2]].append((float(k["dur"]), ki))
    out = {}
    for i, ks in calls.items():
        o = ev[i]
        if o["name"] not in GEMM_OPS or "Input Dims" not in o.get("args", {}):
            continue
        dur, ki = max(ks)
        if [d for d, _ in ks].count(dur) > 1:
            continue  # a tie: which one carries is an ordering detail, not checked here
        out[ki] = _two_mnk(o["name"], o["args"]["Input Dims"])
    return out


@pytest.mark.parametrize("rel", TRACES, ids=lambda r: r.split("/")[-2] + "/" + r.split("/")[-1][:24])
def test_gemm_flops_are_2mnk_of_the_launching_op(rel):
    path = _find(rel)
    t = tracekit.load(path, cache=False)
    r = roofline(t, None, None)
    pk = r.tables["per_kernel"].set_index("name")
    want = _independent_flops(path)
    ks = kernel_shapes(t).table
    eid = t.events["event_id"].to_numpy()[ks["row"].to_numpy()]
    got = dict(zip(eid.tolist(), ks["flops"].tolist()))
    gemm = ks["family"].to_numpy() == "gemm"
    mine = {int(e) for e, g in zip(eid, gemm & ks["carries"].to_numpy(dtype=bool)) if g}
    assert set(want) <= mine, sorted(set(want) - mine)[:5]  # every GEMM kernel the scan finds has tracekit's shape
    for ki, flops in want.items():  # every GEMM kernel: 2·M·N·K of its launching op
        assert got[ki] == pytest.approx(flops, rel=1e-12), ki
    checked = len(want)
    # per kernel name: the mean over its shaped calls (names launched by GEMM ops only)
    ev_names = t.events["name"].astype(str).to_numpy()[ks["row"].to_numpy()]
    by_name = defaultdict(list)
    for ki, flops in want.items():
        by_name[str(ev_names[list(eid).index(ki)])].append(flops)
    for name, fl in by_name.items():
        if pk.loc[name, "shaped_calls"] == len(fl):
            assert pk.loc[name, "flops"] == round(sum(fl) / len(fl)), name
    sh = pk[pk["shaped_calls"] > 0]
    for c in ("mfu", "mbu"):
        v = sh[c].dropna().astype(float)
        assert ((v >= 0) & (v <= 1)).all(), (c, v[(v < 0) | (v > 1)])
    s = r.summary
    assert 0 <= s["shaped_pct"] <= 100 and s["kernels"] >= s["shaped_kernels"]
    print(
        f"{rel}: {checked} GEMM kernels checked; shaped {s['shaped_pct']:.1f} % of GPU kernel time; "
        f"graph-replayed {s['graph_pct']:.1f} %; max MFU {sh['mfu'].max()}, max MBU {sh['mbu'].max()}"
    )
    if s["graph_kernels"] and kernel_shapes(t).replay_hint is not None:  # replayed kernels left without an op
        assert any("CUDA graphs" in w for w in r.warnings)


@pytest.mark.parametrize("rel", TRACES, ids=lambda r: r.split("/")[-2] + "/" + r.split("/")[-1][:24])
def test_findings_that_matter(rel):
    t = tracekit.load(_find(rel), cache=False)
    res = findings(t)
    f = res.tables["findings"]
    timed = f[f["gain_pct"].notna()]
    assert not (~timed["minor"] & (timed["gain_pct"] < 1.0)).any(), timed[["title", "gain_pct", "minor"]]
    assert (f["gain_ms_per_step"].dropna() >= 0.001).all()
    # no finding about a single PyTorch library kernel's grid
    single = f[f["kind"].isin(["wave_quantization", "kernel_roofline"])]
    assert not single["title"].str.contains("at::native::").any()
    for _, r in f.iterrows():
        assert r["basis"] in ("measured", "estimated") and r["command"].startswith("tracekit ")
    kinds = set(f["kind"])
    if "h100/Qwen" in rel:  # an eager model: elementwise and copies are over half of the step
        eager = f[f["kind"] == "dominant_eager"].iloc[0]
        assert eager["gain_pct"] > 40 and not eager["minor"] and "torch.compile" in eager["suggestion"]
    if "sglang_decode" in rel:  # GEMMs are most of the step, replayed from CUDA graphs: no shapes
        assert "dominant_gemm_unshaped" in kinds
        assert "CUDA graphs" in f[f["kind"] == "dominant_gemm_unshaped"].iloc[0]["how"]
    print(
        f"{rel}: {len(f)} findings, {int((~f['minor']).sum())} major: "
        + "; ".join(
            f"{k} {'–' if pd.isna(p) else round(float(p), 1)}"
            for k, p in zip(f.loc[~f["minor"], "kind"], f.loc[~f["minor"], "gain_pct"])
        )
    )
