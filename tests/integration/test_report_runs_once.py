"""`report` runs each expensive analysis once per trace and options (issue 30): the automatic layers once, the block
engine only for an annotation that could fit (the fit bounds the others from the kernel names first), and with an
annotation the engine once for all the parts that use it."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tracekit.analyses.structure.layers import finding as L
from tracekit.analyses.report.trace_report import report
from tracekit.annotation import as_annotation
from tracekit.annotation import blocks as B

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

DP16 = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def wrapper(*a, **k):
        calls.append(a[1] if len(a) > 1 else None)
        return real(*a, **k)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def test_report_without_an_annotation_finds_the_layers_once_and_runs_the_engine_only_for_the_fitting_one(monkeypatch):
    tr = tracekit.load(DP16, cache=False)
    finds = _counting(monkeypatch, L, "_find_layers")
    engine = _counting(monkeypatch, B, "_annotate")
    res = report(tr)
    assert res.summary["fitting_annotation"] == "k3_dp16"
    assert len(finds) == 1
    assert [a.name for a in engine] == ["k3_dp16"]
    assert not any(k[0] == "annotate" for k in tr.derived if isinstance(k, tuple))  # the fit keeps no engine run


def test_report_with_an_annotation_runs_the_engine_once(monkeypatch):
    tr = tracekit.load(DP16, cache=False)
    engine = _counting(monkeypatch, B, "_annotate")
    report(tr, as_annotation("k3_dp16"))
    assert len(engine) == 1
