"""Blocks (A3), AllGathers (A5), exposure (A6) and communication (A7) against the synthetic ground truth.

Every number is compared exactly, to the nanosecond and the byte, on the committed K3 fixtures with the
shipped annotations (fixtures/synthetic/*.truth.json; fixtures/README.md documents the truth).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracekit
from tracekit.analyses import allgathers, communication, exposure
from tracekit.analyses.options import AllGatherOptions
from tracekit.analyses.structure.blocks import block_stats
from tracekit.annotation import load_annotation

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic"
CASES = [
    ("dp16_bs4", "k3_dp16"),
    ("dp16_bs24", "k3_dp16"),
    ("dp2dcp8_bs64", "sgl_b_k3_decode"),
    ("dp2dcp8_bs128", "k3_dp2_dcp8"),
]


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def case(request):
    name, ann_name = request.param
    trace = tracekit.load(FIX / f"{name}.trace.json.gz", cache=False)
    truth = json.loads((FIX / f"{name}.truth.json").read_text())
    ann = load_annotation(ann_name)
    kw = {
        "ag": AllGatherOptions(
            group_size=ann.allgather.group_size, sizes=ann.allgather.sizes, local_copy=ann.allgather.local_copy
        )
    }
    return {"name": name, "trace": trace, "truth": truth, "ann": ann, "kw": kw}


def test_block_kernel_time_per_type_equals_truth(case):
    r = block_stats(case["trace"], case["ann"])
    got = {
        (row.step, row.block_type): (row.blocks, row.kernels, row.kernel_ns)
        for row in r.tables["per_step_type"].itertuples()
    }
    want = {
        (s["step"], t): (v["blocks"], v["kernels"], v["kernel_ns"])
        for s in case["truth"]["steps"]
        for t, v in s["blocks"].items()
    }
    assert got == want
    assert r.summary["untyped_blocks"] == 0
    assert not [w for w in r.warnings if "expected" in w]


def test_dp16_mla_blocks_are_typed_by_position():
    """The study's DP16 annotation has no MLA rule: the 24 MLA blocks are the untyped ones between head and tail."""
    ann = load_annotation("k3_dp16")
    assert ann.blocks.position.default == "MLA" and all(r.type != "MLA" for r in ann.blocks.types)
    r = block_stats(tracekit.load(FIX / "dp16_bs4.trace.json.gz", cache=False), ann)
    assert r.summary["blocks_per_step"]["MLA"] == 24


def test_allgather_counts_and_bytes_per_type_equal_truth(case):
    r = allgathers(case["trace"], **case["kw"])
    assert r.summary["unmatched"] == 0 and r.summary["group_size"] == 8
    got = {
        (row.step, row.type): (row.count, row.received_bytes, row.full_bytes)
        for row in r.tables["per_step_type"].itertuples()
    }
    want = {
        (s["step"], t): (v["count"], v["received_bytes"], v["full_bytes"])
        for s in case["truth"]["steps"]
        for t, v in s["allgather"]["by_type"].items()
    }
    assert got == want
    per_ag = r.tables["per_ag"]
    truth_ags = case["truth"]["allgathers"]
    assert len(per_ag) == len(truth_ags)
    assert sorted(zip(per_ag["start_ns"], per_ag["end_ns"], per_ag["type"], per_ag["stream"])) == sorted(
        (a["start_ns"], a["end_ns"], a["type"], a["stream"]) for a in truth_ags
    )
    hoisted = per_ag[~per_ag["local_copy"]]
    assert len(hoisted) == sum(a["hoisted"] for a in truth_ags)  # the prefetch-stream AllGather: flagged


def test_per_copy_bandwidth_equals_truth(case):
    r = allgathers(case["trace"], **case["kw"])
    cols = case["truth"]["copies"]["columns"]
    rows = [dict(zip(cols, r_)) for r_ in case["truth"]["copies"]["rows"]]
    copies = r.tables["copies"].sort_values("start_ns")
    assert copies["start_ns"].tolist() == sorted(r_["start_ns"] for r_ in rows)
    by_start = {r_["start_ns"]: r_ for r_ in rows}
    for c in copies.itertuples():
        t = by_start[c.start_ns]
        assert (c.bytes, c.dur_ns, bool(c.overlaps_comm)) == (t["bytes"], t["dur_ns"], t["overlaps_nccl_or_deepep"])
        assert c.gbps == pytest.approx(t["gbps"], abs=5e-4)


def test_exposure_per_type_equals_truth(case):
    r = exposure(case["trace"], **case["kw"])
    got = {(row.step, row.type): row.exposed_ns for row in r.tables["per_step_type"].itertuples()}
    want = {(s["step"], t): v for s in case["truth"]["steps"] for t, v in s["exposure_ns"].items()}
    assert {k: got.get(k, 0) for k in want} == want
    assert all(v == 0 for k, v in got.items() if k not in want)


def test_communication_critical_and_side_equal_truth(case):
    r = communication(case["trace"], ag=AllGatherOptions(local_copy=case["ann"].allgather.local_copy))
    per = r.tables["per_step"]
    for s in case["truth"]["steps"]:
        for cls, v in s["comm"].items():
            row = per[(per["step"] == s["step"]) & (per["class"] == cls)]
            got = (int(row["critical_ns"].sum()), int(row["side_ns"].sum()))
            assert got == (v["critical_ns"], v["side_ns"]), (s["step"], cls)
    names = r.tables["per_step_class"]
    for s in case["truth"]["steps"]:
        step_rows = names[(names["step"] == s["step"]) & (names["class"] != "weight_ag")]
        assert dict(zip(step_rows["name"], step_rows["count"])) == s["comm_kernels"]


def test_deepseek_v3_annotation_on_the_generic_fixture():
    """sglang's CPU-only step[DECODE bs=N] marker, mapped to the GPU work it launched, then blocks by type."""
    trace = tracekit.load(FIX / "dsv3_bs32.trace.json.gz", cache=False)
    truth = json.loads((FIX / "dsv3_bs32.truth.json").read_text())
    r = block_stats(trace, load_annotation("deepseek_v3"))
    got = {
        (row.step, row.block_type): (row.blocks, row.kernels, row.kernel_ns)
        for row in r.tables["per_step_type"].itertuples()
    }
    want = {
        (s["step"], t): (v["blocks"], v["kernels"], v["kernel_ns"])
        for s in truth["steps"]
        for t, v in s["blocks"].items()
    }
    assert got == want
    tags = r.tables["per_tag"].set_index("op_tag")
    assert tags.loc["moe_w13", "count"] == 58 * len(truth["steps"])
