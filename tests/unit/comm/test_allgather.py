"""AllGather segmentation, exposure and communication (A5–A8) on hand-built traces."""

from __future__ import annotations

import pytest

import tracekit
from tracekit.analyses.comm import segments
from tracekit.analyses.comm.allgather import allgathers
from tracekit.analyses.comm.communication import communication
from tracekit.analyses.comm.exposure import exposure
from tracekit.analyses.comm.segments import segment_allgathers
from tracekit.analyses.options import AllGatherOptions
from tracekit.analyses.steps.model import step_options
from tracekit.errors import MissingDataError
from tests.conftest import comparable_doc, kernel, load_events, memcpy, write_trace

PTOP = "Memcpy PtoP (Device -> Device)"
G = 4  # one local copy + 3 PtoP copies per AllGather in these cases
SHARD = 1000  # bytes per copy, so a complete AllGather is 4000 bytes in full
NO_FLOOR = step_options(min_step_ns=0)


def ann(ts, dur):
    return {
        "ph": "X",
        "cat": "gpu_user_annotation",
        "name": "scheduler.run_batch",
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
    }


def ag_events(
    t0: float,
    stream: int = 20,
    copies: int = G - 1,
    local: bool = True,
    shard: int = SHARD,
    copy_us: float = 10.0,
    gap_us: float = 1.0,
) -> list:
    """An AllGather: local copy (5 µs) then `copies` PtoP copies of `copy_us` with `gap_us` gaps."""
    evs = []
    t = t0
    if local:
        evs.append(kernel("memcpy128", t, 5.0, stream=stream))
        t += 5.0 + gap_us
    for _ in range(copies):
        evs.append(memcpy(PTOP, t, copy_us, nbytes=shard, stream=stream))
        t += copy_us + gap_us
    return evs


def test_basic_segmentation_bytes_and_bandwidth(tmp_path):
    evs = [ann(0.0, 20_000.0)] + ag_events(100.0) + ag_events(200.0) + ag_events(300.0, shard=2 * SHARD)
    ag = segment_allgathers(load_events(tmp_path, evs), ag=AllGatherOptions(sizes={"small": 4000, "big": 8000}))
    p = ag.per_ag
    assert ag.group_size == G
    assert p["type"].tolist() == ["small", "small", "big"]
    assert p["copies"].tolist() == [3, 3, 3] and p["local_copy"].all() and p["complete"].all()
    first = p.iloc[0]
    # local copy 100-105, copies 106-116, 117-127, 128-138: span 38 µs, gaps 3 µs
    assert (first.start_ns, first.end_ns, first.local_copy_ns, first.gaps_ns) == (100_000, 138_000, 5_000, 3_000)
    assert (first.received_bytes, first.full_bytes) == (3000, 4000)
    assert first.effective_gbps == pytest.approx(3000 / 38_000)
    assert ag.copies["gbps"].tolist()[:3] == [pytest.approx(0.1)] * 3


def test_missing_copy_and_lonely_local_copy(tmp_path):
    # a run is cut at each local copy, so a short run and a lonely local copy stay what they are
    evs = (
        [ann(0.0, 20_000.0)]
        + ag_events(100.0)
        + ag_events(200.0)
        + ag_events(300.0, copies=2)  # one missing
        + [kernel("memcpy128", 400.0, 5.0, stream=20)]  # nothing after
        + ag_events(500.0)
    )
    ag = segment_allgathers(load_events(tmp_path, evs), ag=AllGatherOptions(sizes={"layer": 4000}))
    p = ag.per_ag
    assert ag.group_size == G
    assert p["copies"].tolist() == [3, 3, 2, 0, 3]
    assert p["complete"].tolist() == [True, True, False, False, True]
    # the incomplete one is typed from its mean copy × G; the empty one has no bytes at all
    assert p["full_bytes"].tolist() == [4000, 4000, 4000, 0, 4000]
    assert p["type"].tolist() == ["layer", "layer", "layer", "unmatched", "layer"]
    assert any("G-1=3" in w for w in ag.warnings) and any("match no size" in w for w in ag.warnings)


def test_run_without_local_copy_is_flagged(tmp_path):
    evs = [ann(0.0, 20_000.0)] + ag_events(100.0, stream=30, local=False) + ag_events(200.0, stream=30, local=False)
    ag = segment_allgathers(load_events(tmp_path, evs), ag=AllGatherOptions(group_size=G, sizes={"layer": 4000}))
    assert ag.per_ag["local_copy"].tolist() == [False, False]
    assert ag.per_ag["type"].tolist() == ["layer", "layer"]
    assert any("no local copy" in w for w in ag.warnings)


def test_long_run_splits_into_allgathers_of_g_minus_1(tmp_path):
    evs = [ann(0.0, 20_000.0)] + ag_events(100.0) + ag_events(200.0) + ag_events(300.0, copies=6)
    p = segment_allgathers(load_events(tmp_path, evs)).per_ag
    assert p["copies"].tolist() == [3, 3, 3, 3]
    assert p["local_copy"].tolist() == [True, True, True, False]


def test_interleaved_streams_and_hoisted_prefetch(tmp_path):
    # the side stream (20) and a prefetch stream (30, PtoP only) run AllGathers at overlapping times
    evs = (
        [ann(0.0, 20_000.0)]
        + ag_events(100.0, stream=20)
        + ag_events(105.0, stream=30, local=False)
        + ag_events(200.0, stream=20)
    )
    ag = segment_allgathers(load_events(tmp_path, evs), ag=AllGatherOptions(sizes={"layer": 4000}))
    p = ag.per_ag.sort_values("start_ns")
    assert p["stream"].tolist() == [20, 30, 20]
    assert p["local_copy"].tolist() == [True, False, True]
    assert (p["type"] == "layer").all()


def test_step_boundary_assigns_by_start_and_no_correlation_grouping(tmp_path):
    # every event shares correlation 1 (a CUDA-graph replay): grouping must not care
    evs = [ann(0.0, 10_200.0 / 1000 * 1000), ann(20_000.0, 20_000.0)] + ag_events(10_180.0) + ag_events(20_100.0)
    ag = segment_allgathers(load_events(tmp_path, evs), steps=NO_FLOOR)
    assert ag.per_ag["step"].tolist() == [0, 1]  # the first starts in step 0 and ends after it


def test_exposure_charged_to_running_allgather(tmp_path):
    # compute kernel 0-100 on the main stream; AG A (stream 20) 50-88 half hidden; AG B (stream 30) 90-123
    evs = (
        [ann(0.0, 1000.0), kernel("gemm", 0.0, 100.0)]
        + ag_events(50.0, stream=20)
        + ag_events(90.0, stream=30, local=False)
    )
    r = exposure(load_events(tmp_path, evs), ag=AllGatherOptions(sizes={"layer": 4000}), steps=NO_FLOOR)
    per_ag = r.tables["per_ag"].sort_values("start_ns")
    # A: all of it under the kernel (ends at 88). B: copies 90-100 (hidden) 100-101 gap? no: 90-100, 101-111,
    # 112-122 → exposed 101-111 and 112-122 = 20 µs
    assert per_ag["exposed_ns"].tolist() == [0, 20_000]
    assert r.summary["total_exposed_ns"] == 20_000
    assert r.tables["per_step"]["exposed_ns"].tolist() == [20_000]
    iv = r.tables["intervals"]
    assert list(zip(iv["start_ns"], iv["end_ns"])) == [(101_000, 111_000), (112_000, 122_000)]


def test_exposure_overlapping_allgathers_charge_earliest(tmp_path):
    evs = (
        [ann(0.0, 1000.0)]
        + ag_events(0.0, stream=20, local=False, gap_us=0.0)
        + ag_events(5.0, stream=30, local=False, gap_us=0.0)
    )
    r = exposure(load_events(tmp_path, evs), steps=NO_FLOOR)
    per_ag = r.tables["per_ag"].sort_values("start_ns")
    # A runs 0-30, B 5-35; nothing else runs: the union 0-35 is exposed, 0-30 charged to A, 30-35 to B
    assert per_ag["exposed_ns"].tolist() == [30_000, 5_000]
    assert r.summary["total_exposed_ns"] == 35_000


def test_no_ptop_is_exit_4(tmp_path):
    with pytest.raises(MissingDataError, match="no PtoP copies"):
        segment_allgathers(load_events(tmp_path, [kernel("k", 0.0, 1.0)]))


def test_comm_critical_vs_side(tmp_path):
    evs = [
        ann(0.0, 1000.0),
        kernel("gemm", 0.0, 500.0),  # the main stream has most kernel time
        kernel("ncclDevKernel_AllGather_RING_LL", 510.0, 20.0),
        kernel("ncclDevKernel_AllGather_RING_LL", 540.0, 20.0),
        kernel("void deep_ep::internode_ll::dispatch<1>", 600.0, 30.0, stream=24),
        memcpy(PTOP, 0.0, 100.0, stream=20),
    ]
    r = communication(load_events(tmp_path, evs), steps=NO_FLOOR)
    t = r.tables["per_step_class"].set_index("class")
    assert r.summary["main_stream"] == 7
    assert (t.loc["nccl", "critical_ns"], t.loc["nccl", "side_ns"], t.loc["nccl", "count"]) == (40_000, 0, 2)
    assert t.loc["nccl", "collective"] == "AllGather"
    assert (t.loc["deepep", "critical_ns"], t.loc["deepep", "side_ns"]) == (0, 30_000)
    assert (t.loc["weight_ag", "side_ns"], t.loc["weight_ag", "count"]) == (100_000, 1)


def test_copies_without_bytes_make_sizes_and_rates_null_never_negative(tmp_path):
    """A PtoP copy with no `bytes` arg (-1) once gave a negative GB/s and halved the received bytes."""
    evs = [ann(0.0, 20_000.0)] + ag_events(100.0)
    broken = ag_events(200.0)
    broken[2] = memcpy(PTOP, broken[2]["ts"], 10.0, nbytes=None, stream=20)
    ag = segment_allgathers(load_events(tmp_path, evs + broken), ag=AllGatherOptions(sizes={"small": 4000}))
    p = ag.per_ag
    assert p["type"].tolist() == ["small", "unknown_size"] and p["copies_without_bytes"].tolist() == [0, 1]
    assert p["received_bytes"].isna().tolist() == [False, True] and p["full_bytes"].isna().tolist() == [False, True]
    assert p["effective_gbps"].isna().tolist() == [False, True]
    g = ag.copies["gbps"]
    assert g.isna().sum() == 1 and (g.dropna() > 0).all()
    assert any("carry no byte count" in w and "unknown_size" in w for w in ag.warnings)
    res = tracekit.allgathers(load_events(tmp_path, evs + broken), ag=AllGatherOptions(sizes={"small": 4000}))
    assert res.summary["median_copy_gbps"] > 0


def test_exposure_reuses_the_segmentation_of_allgather(tmp_path, monkeypatch):
    """allgather then exposure on one trace and the same options (what report and export do) cut the AllGathers once;
    the results are those of a fresh trace each, and one caller's warnings are not the next one's."""
    evs = (
        [ann(0.0, 20_000.0), kernel("gemm", 0.0, 150.0)]
        + ag_events(100.0)
        + ag_events(200.0, copies=2)
        + ag_events(300.0, shard=2 * SHARD)
    )
    path = write_trace(tmp_path / "t.json", evs)
    small = AllGatherOptions(sizes={"small": 4000})
    fresh_ag = comparable_doc(allgathers(tracekit.load(path, cache=False), ag=small, steps=NO_FLOOR))
    fresh_ex = comparable_doc(exposure(tracekit.load(path, cache=False), ag=small, steps=NO_FLOOR))
    calls = []
    cut = segments._segment
    monkeypatch.setattr(segments, "_segment", lambda *a, **k: calls.append(1) or cut(*a, **k))
    trace = tracekit.load(path, cache=False)
    first = allgathers(trace, ag=AllGatherOptions(sizes={"small": 4000}), steps=NO_FLOOR)
    first.warnings.append("a caller's own note")
    first.tables["per_ag"]["type"] = "changed by a caller"
    second = exposure(trace, ag=AllGatherOptions(sizes={"small": 4000}), steps=NO_FLOOR)
    assert len(calls) == 1
    assert "a caller's own note" not in second.warnings
    assert comparable_doc(second) == fresh_ex
    assert comparable_doc(allgathers(trace, ag=AllGatherOptions(sizes={"small": 4000}), steps=NO_FLOOR)) == fresh_ag
    assert len(calls) == 1
    # other options are another segmentation
    other = exposure(trace, ag=AllGatherOptions(sizes={"big": 8000}), steps=NO_FLOOR)
    assert len(calls) == 2 and set(other.tables["per_ag"]["type"]) == {"big", "unmatched"}
    assert (
        segment_allgathers(trace, ag=small, steps=segment_allgathers(trace, ag=small, steps=NO_FLOOR).steps) is not None
    )
    assert len(calls) == 2


def test_group_size_below_two_is_a_usage_error(tmp_path):
    from tracekit.errors import UsageError

    with pytest.raises(UsageError, match="2 or more"):
        segment_allgathers(
            load_events(tmp_path, [ann(0.0, 1000.0)] + ag_events(0.0)), ag=AllGatherOptions(group_size=1)
        )
