"""Issue 30: report's exposure runs once for itself and its exposed-AllGather finding (kept on the trace with the
segmentation it reads), and each caller gets its own copy of the Result."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tracekit.analyses.comm import exposure as E
from tracekit.analyses.report.trace_report import report

DP16 = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"


@pytest.mark.slow  # a whole report: the slow tier (issue 27)
def test_report_computes_the_exposure_once_for_itself_and_its_finding(monkeypatch):
    tr = tracekit.load(DP16, cache=False)
    calls = []
    real = E._exposure
    monkeypatch.setattr(E, "_exposure", lambda *a, **k: calls.append(1) or real(*a, **k))
    ann = tracekit.load_annotation("k3_dp16")
    res = report(tr, ann)
    assert len(calls) == 1
    again = E.exposure(tr, ann, steps=tracekit.find_steps(tr, ann=ann))
    assert len(calls) == 1  # the same segmentation: the kept result
    assert again.tables["per_step"]["exposed_ns"].sum() > 0
    assert again.summary["median_exposed_ns_per_step"] == res.summary.get(
        "median_exposed_ns_per_step", again.summary["median_exposed_ns_per_step"]
    )
    again.warnings.append("x")
    again.summary["allgathers"] = -1
    fresh = E.exposure(tr, ann, steps=tracekit.find_steps(tr, ann=ann))
    assert "x" not in fresh.warnings and fresh.summary["allgathers"] != -1  # each caller gets its own copy
    other = E.exposure(tr, ann, ag=tracekit.AllGatherOptions(group_size=2), steps=tracekit.find_steps(tr, ann=ann))
    assert len(calls) == 2 and other.params["group_size"] == 2  # other options: computed, not the kept one
