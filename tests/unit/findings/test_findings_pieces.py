"""Pieces the findings sources share (tracekit/analyses/findings/kernel_arrays.py), on hand-made tables."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from tracekit.analyses.findings.context import Context
from tracekit.analyses.findings.kernel_arrays import rest_finding
from tracekit.analyses.findings.rules import ms_text
from tracekit.analyses.options import AllGatherOptions


def _ctx(step_ns: float = 10e6) -> Context:
    return Context(
        trace=SimpleNamespace(path="t.json"),
        ann=None,
        steps=None,
        step_ns=step_ns,
        hw=None,
        log=None,
        ag=AllGatherOptions(),
        sms=None,
    )


def test_the_kernels_beyond_a_sources_cap_are_one_finding_with_their_summed_gain():
    rest = pd.DataFrame({"name": ["k1", "k2", "k3"], "lost_per_step_ns": [2e6, 1e6, 0.5e6]})
    [f] = rest_finding(_ctx(), "wave_quantization_rest", "waves", rest, "lost_per_step_ns")
    assert f["kind"] == "wave_quantization_rest" and f["source"] == "waves"
    assert f["gain_ms_per_step"] == 3.5 and f["gain_pct"] == 35.0
    assert f["evidence"] == f"3 kernel name(s), largest {ms_text(2e6)} per step"
    assert f["title"] == f"Tail waves of 3 more kernels: {ms_text(3.5e6)} per step"
    assert "tracekit waves trace t.json --all" in f["command"]


def test_no_kernel_beyond_the_cap_is_no_finding():
    empty = pd.DataFrame({"name": [], "gain_per_step_ns": []})
    assert rest_finding(_ctx(), "kernel_roofline_rest", "shapes", empty, "gain_per_step_ns") == []
