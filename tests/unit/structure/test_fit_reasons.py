"""`tracekit annotations`: an annotation that does not fit says which parts fell short, and one never scored is
unscored (null / `–`), not 0 (review of issue 39)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.analyses.structure.fit import PARTS, annotation_fit, fits_above, shortfall

SYN = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic"


def _row(**parts) -> dict:
    return {p: parts.get(p) for p in PARTS} | {k: v for k, v in parts.items() if k not in PARTS}


def test_the_part_that_failed_is_named():
    # k3_dp16 on a DP2 x DCP8 trace: everything but the AllGather sizes holds
    row = _row(marker=1.0, typed=1.0, tags=1.0, layers=0.985, expect=1.0, allgather=0.0, hardware=1.0, framework=1.0)
    assert shortfall(row) == "its AllGather sizes match none of the trace's"


def test_parts_in_order_of_weighted_loss_and_in_words():
    row = _row(
        typed=0.5,  # weight 3: loss 1.5
        tags=0.6,  # weight 2: loss 0.8
        comm=0.0,  # weight 1: loss 1
        hardware=0.0,  # weight 0.5: loss 0.5, the 4th: left out (at most 3)
        declared_hardware=["AMD"],
        trace_hardware="NVIDIA",
    )
    assert shortfall(row) == (
        "50% of the steps' kernel time lies in its typed blocks; none of its comm_patterns matches a kernel;"
        " 60% of its op tags tag a kernel"
    )
    assert shortfall(_row(hardware=0.0, declared_hardware=["AMD"], trace_hardware="NVIDIA")) == (
        "it names AMD GPUs, the trace ran on NVIDIA"
    )
    assert shortfall(_row(typed=1.0, layers=0.97)) == ""  # nothing under fit.json's shortfall_below


@pytest.mark.slow
def test_on_a_dp2_dcp8_trace():
    res = annotation_fit(tracekit.load(SYN / "dp2dcp8_bs64.trace.json.gz", cache=False))
    t = res.tables["annotations"].set_index("name")
    assert t.loc["k3_dp2_dcp8", "fits"] and t.loc["k3_dp2_dcp8", "reason"] == ""
    k3 = t.loc["k3_dp16"]
    assert not k3["fits"] and k3["allgather"] == 0
    assert k3["reason"].startswith("its AllGather sizes match none of the trace's")
    for name, row in t.iterrows():  # every scored row that does not fit says why
        if pd.notna(row["score"]) and row["score"] <= fits_above():
            assert row["reason"], name
    q = t.loc["qwen3_dense_sglang_rocm"]  # cuts no block here: never scored
    assert pd.isna(q["score"]) and not q["fits"] and "cuts no block" in q["reason"]
    assert res.tables["annotations"]["name"].iloc[-1] == "qwen3_dense_sglang_rocm"  # the unscored rank last
    doc = res.to_json()
    assert '"score": null' in doc.replace('"score":null', '"score": null')


@pytest.mark.slow
def test_unscored_prints_a_dash(cli):
    code, out, _ = cli("--all", "annotations", SYN / "dp2dcp8_bs64.trace.json.gz")
    line = next(x for x in out.splitlines() if "qwen3_dense_sglang_rocm" in x)
    assert code == 0 and "0.000" not in line and line.split()[2] == "–"
