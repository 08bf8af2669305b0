"""`findings --compare`: a step that grew because the GPU waited more (no kernel slower) is named by the class of its
idle time (tracekit/analyses/findings/idle_compare.py), with the side that has more of it and what it would gain."""

from __future__ import annotations

import pytest

from conftest import cpu_ann, gpu_ann, kernel, launch, load_events
from tracekit.analyses.findings.trace_findings import findings

MARK = "scheduler.run_batch"


def _trace(tmp_path, name: str, k_host_launch: float):
    """One step 1000–1100 µs (test_findings.py's idle trace): a 20 µs gap 1010–1030 before k_host — the host still
    launching when k_host's launch returns after the gap began (1025), a synchronisation wait when it was launched
    before (1001) —, a 10 µs sync gap 1040–1050, a 2 µs boundary gap, 10 µs unattributed at the end."""
    ev = [
        cpu_ann(MARK, 980.0, 130.0, ext=1),
        gpu_ann(MARK, 1000.0, 100.0, ext=1),
        launch("cudaLaunchKernel", 990.0, 1),
        kernel("k_first", 1000.0, 10.0, corr=1),
        launch("cudaLaunchKernel", k_host_launch, 2),
        kernel("k_host", 1030.0, 10.0, corr=2),
        launch("cudaLaunchKernel", 1000.0, 3),
        kernel("k_sync", 1050.0, 10.0, corr=3),
        launch("cudaLaunchKernel", 1001.5, 4),
        kernel("k_short", 1062.0, 28.0, corr=4),
    ]
    return load_events(tmp_path, ev, name=name)


def test_the_idle_class_that_grew_is_a_finding_on_its_side(tmp_path):
    a = _trace(tmp_path, "host_bound.json", 1025.0)
    b = _trace(tmp_path, "launched_ahead.json", 1001.0)
    res = findings(compare=(a, b))
    idle = res.tables["idle"].set_index("kind")
    assert idle.loc["idle_host", "a_ns"] == 20_000 and idle.loc["idle_host", "b_ns"] == 0
    assert idle.loc["idle_sync", "a_ns"] == 10_000 and idle.loc["idle_sync", "b_ns"] == 30_000
    assert idle.loc["idle_short", "diff_ns"] == 0 and idle.loc["idle_unattributed", "diff_ns"] == 0
    f = res.tables["findings"]
    rows = f[f["kind"] == "idle_changed"].set_index("source")
    assert len(rows) == 2 and res.summary["idle_classes_changed"] == 2
    host = f[(f["kind"] == "idle_changed") & f["title"].str.startswith("GPU idle while the host")].iloc[0]
    sync = f[(f["kind"] == "idle_changed") & f["title"].str.startswith("GPU idle waiting")].iloc[0]
    assert host["gain_ms_per_step"] == pytest.approx(0.020) and "in host_bound against" in host["title"]
    assert sync["gain_ms_per_step"] == pytest.approx(0.020) and "in launched_ahead against" in sync["title"]
    assert host["gain_pct"] == pytest.approx(20.0)  # of host_bound's 100 µs step


def test_alike_sides_have_no_idle_finding(tmp_path):
    a = _trace(tmp_path, "one.json", 1025.0)
    b = _trace(tmp_path, "two.json", 1025.0)
    res = findings(compare=(a, b))
    assert res.summary["idle_classes_changed"] == 0
    assert (res.tables["idle"]["diff_ns"] == 0).all()
    assert "idle_changed" not in set(res.tables["findings"]["kind"])
