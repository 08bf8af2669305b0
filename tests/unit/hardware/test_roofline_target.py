"""`tracekit roofline` gives each kernel its target time, at the achievable roofline and never below the launch floor
of the profile's vendor, through the one function the findings use (`hardware.roofline.target_ns`); the floor is in
the summary (review of issue 39: "`tracekit roofline` itself does not apply the launch floor")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.analyses.findings import rules
from tracekit.analyses.hardware.roofline import launch_floor_ns, target_ns, target_rules
from tracekit.gpu_specs import as_profile
from tests.conftest import gemm_trace


def test_target_is_the_slower_roof_never_below_the_floor():
    h100, mi300 = as_profile("h100"), as_profile("mi300x")
    floors = rules.finding_rules()["launch_floor_us"]
    assert launch_floor_ns(h100) == 1e3 * floors["nvidia"] and launch_floor_ns(mi300) == 1e3 * floors["amd"]
    assert rules.launch_floor_ns is launch_floor_ns  # the findings' floor is this one
    f_hbm = target_rules()["achievable_hbm"]
    big = 1e9  # 1 GB: far above the floor, the bytes decide
    assert target_ns(big, np.nan, np.nan, h100) == pytest.approx(big / (f_hbm * h100.hbm_bytes_per_s) * 1e9)
    assert target_ns(6_000, 1.0, 1e15, h100) == launch_floor_ns(h100)  # 6 kB: under one launch's time
    assert target_ns(6_000, 1.0, 1e15, mi300) == launch_floor_ns(mi300)
    assert np.isnan(target_ns(np.nan, 1.0, 1e15, h100))  # bytes unknown: the target is unknown, not 0


@pytest.mark.slow
def test_roofline_tables_carry_the_target_and_the_summary_the_floor(tmp_path):
    trace = gemm_trace(tmp_path)
    hw = as_profile("h100")
    r = tracekit.roofline(trace, hw="h100")
    assert r.summary["launch_floor_ns"] == 2000 and r.summary["achievable_hbm"] == target_rules()["achievable_hbm"]
    t = r.tables["per_kernel"]
    shaped = t[t["shaped_calls"] > 0]
    assert len(shaped) and (shaped["target_ns"] >= launch_floor_ns(hw)).all()
    for _, row in shaped.iterrows():
        peak = hw.peak_flops(row["dtype"] or "") or np.nan
        flops = np.nan if pd.isna(row["flops"]) else float(row["flops"])
        assert row["target_ns"] == pytest.approx(float(target_ns(float(row["bytes"]), flops, peak, hw)))
    assert t[t["shaped_calls"] == 0]["target_ns"].isna().all()  # no shape: no target (null), never 0
    copy = shaped[shaped["name"] == "copy_long"]
    assert copy["target_ns"].tolist() == [launch_floor_ns(hw)]  # 2 kB of copy: the floor, not ~1 ns
