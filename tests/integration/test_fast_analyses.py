"""Issue 30: steps, info, timeline and communication at ingest speed — each runs once per trace and options, and
the vectorised versions give the tables the per-group pandas versions gave (pinned here against those)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit import intervals
from tracekit.analyses.comm import communication as C
from tracekit.analyses.report.trace_report import report
from tracekit.analyses.time import onestep as O
from tracekit.analyses.time import timeline as T
from tracekit.analyses.time.info import trace_info
from tracekit.events import gpu_mask

DP16 = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"


@pytest.mark.slow  # a whole report: the slow tier (issue 27)
def test_report_computes_the_communication_once_for_itself_and_its_finding(monkeypatch):
    tr = tracekit.load(DP16, cache=False)
    calls = []
    real = C._communication
    monkeypatch.setattr(C, "_communication", lambda *a, **k: calls.append(1) or real(*a, **k))
    res = report(tr)
    assert len(calls) == 1
    again = C.communication(tr, steps=tracekit.find_steps(tr))
    assert len(calls) == 1  # the same steps and options: the kept result
    assert again.tables["per_step"].equals(res.tables["comm"])
    again.warnings.append("x")
    again.summary["main_stream"] = -1
    fresh = C.communication(tr, steps=tracekit.find_steps(tr))
    assert "x" not in fresh.warnings and fresh.summary["main_stream"] != -1  # each caller gets its own copy


def _by_stream_as_before(ev: pd.DataFrame) -> pd.DataFrame:
    """info's by_stream as it was computed before issue 30 (crosstab and a groupby-apply per stream)."""
    lanes = ev[ev["kind"].isin(("kernel", "memcpy", "memset", "gpu_annotation"))]
    gpu = ev[gpu_mask(ev)]
    counts = pd.crosstab([lanes["device"], lanes["stream"]], lanes["kind"].astype(str))
    for k in ("kernel", "memcpy", "memset", "gpu_annotation"):
        if k not in counts:
            counts[k] = 0
    busy_by = gpu.groupby(["device", "stream"]).apply(
        lambda g: intervals.total(intervals.normalize(g["start_ns"].to_numpy(), g["end_ns"].to_numpy())),
        include_groups=False,
    )
    return pd.DataFrame(
        {
            "device": counts.index.get_level_values(0).astype(np.int64),
            "stream": counts.index.get_level_values(1).astype(np.int64),
            "kernels": counts["kernel"].to_numpy(np.int64),
            "memcpys": counts["memcpy"].to_numpy(np.int64),
            "memsets": counts["memset"].to_numpy(np.int64),
            "gpu_annotations": counts["gpu_annotation"].to_numpy(np.int64),
            "busy_ns": [int(busy_by.get((d, s), 0)) for d, s in counts.index],
        }
    )


def test_info_tables_are_the_groupby_tables():
    tr = tracekit.load(DP16, cache=False)
    ev = tr.events
    res = trace_info(tr)
    pd.testing.assert_frame_equal(res.tables["by_stream"], _by_stream_as_before(ev))
    by_kind = ev.groupby("kind", observed=True).agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum")).reset_index()
    by_kind["kind"] = by_kind["kind"].astype(str)
    pd.testing.assert_frame_equal(res.tables["by_kind"], by_kind)
    by_cat = (
        ev.groupby("cat", observed=True)
        .size()
        .rename("count")
        .reset_index()
        .sort_values("count", ascending=False, kind="stable")
    )
    by_cat["cat"] = by_cat["cat"].astype(str)
    pd.testing.assert_frame_equal(res.tables["by_category"].reset_index(drop=True), by_cat.reset_index(drop=True))
    gpu = ev[gpu_mask(ev)]
    assert res.summary["streams"] == gpu.groupby(["device", "stream"]).ngroups > 1
    assert res.summary["kernels"] == int((ev["kind"] == "kernel").sum()) > 0
    assert res.tables["by_stream"]["busy_ns"].sum() > 0


def _merge_touching_as_before(df: pd.DataFrame, gap_ns: int) -> pd.DataFrame:
    """timeline's merge of touching activities as it was before issue 30 (a groupby over lane+label texts)."""
    df = df.sort_values(["lane", "label", "start_ns"], kind="stable")
    lane_label = df["lane"] + "\0" + df["label"]
    prev_end = df.groupby(lane_label.to_numpy())["end_ns"].shift().to_numpy()
    new = np.isnan(prev_end.astype(float)) | (
        df["start_ns"].to_numpy() - np.nan_to_num(prev_end.astype(float)) > gap_ns
    )
    out = df.groupby(np.cumsum(new)).agg(
        lane=("lane", "first"), label=("label", "first"), start_ns=("start_ns", "min"), end_ns=("end_ns", "max")
    )
    return out.reset_index(drop=True)


def test_timeline_merges_touching_activities_as_the_groupby_did():
    rng = np.random.default_rng(0)
    n = 5000
    start = np.cumsum(rng.integers(0, 50, n)) + 10**15
    df = pd.DataFrame(
        {
            "lane": np.asarray(rng.choice(["stream 0:7", "stream 0:12", "stream 1:7"], n), dtype=object),
            "label": np.asarray(rng.choice(["gemm", "attention", "other", "nccl"], n), dtype=object),
            "start_ns": start,
            "end_ns": start + rng.integers(0, 80, n),
        }
    )
    for gap in (1, 20, 200):
        new = T._merge_touching(df, gap)
        pd.testing.assert_frame_equal(new, _merge_touching_as_before(df, gap))
        assert len(new) < n


def test_timeline_of_a_fixture_step_with_merging(monkeypatch):
    tr = tracekit.load(DP16, cache=False)
    st = tracekit.find_steps(tr)
    full = T.step_timeline(tr, st, 1)
    acts = full[full["lane"].str.startswith("stream ")]
    assert len(acts) > 1000 and acts["label"].nunique() > 3 and acts["lane"].nunique() > 1
    monkeypatch.setattr(T, "MAX_ACTIVITIES", 100)  # the merging path on real activities
    merged = T.step_timeline(tr, st, 1)
    m_acts = merged[merged["lane"].str.startswith("stream ")].reset_index(drop=True)
    s0, s1 = int(st.table["start_ns"].iloc[1]), int(st.table["end_ns"].iloc[1])
    want = _merge_touching_as_before(acts[["lane", "label", "start_ns", "end_ns"]], max(1, (s1 - s0) // 4000))
    pd.testing.assert_frame_equal(m_acts, want.sort_values(["lane", "start_ns"], kind="stable").reset_index(drop=True))
    assert len(m_acts) < len(acts)


def test_one_step_union_per_name_is_measure_by_group():
    rng = np.random.default_rng(1)
    n = 20000
    s = rng.integers(0, 10**6, n)
    e = s + rng.integers(1, 5000, n)
    grp = rng.integers(0, 37, n)
    o = np.argsort(s, kind="stable")
    got = O._union_by_group(grp[o], s[o], e[o], 40)
    np.testing.assert_array_equal(got, intervals.measure_by_group(grp, s, e, 40))
    assert got[:37].min() > 0 and got[37:].sum() == 0


def test_one_step_tables_charge_once_and_match_each_table_alone():
    tr = tracekit.load(DP16, cache=False)
    st = tracekit.find_steps(tr)
    ev = tr.events.assign(category=tracekit.trace_categories(tr), kname=tr.events["name"])
    both = O.one_step_tables(ev, st, by=("category", "kname", "absent_column"))
    alone = pd.concat([O.one_step_table(ev, st, by=b) for b in ("category", "kname")], ignore_index=True)
    pd.testing.assert_frame_equal(both, alone)
    assert set(both["group_by"]) == {"category", "kname"} and both["step"].nunique() == len(st.table)
    per_step = both[both["group_by"] == "kname"].groupby("step")["wall_ns"].sum()
    np.testing.assert_array_equal(per_step.to_numpy(), st.table.sort_values("step")["dur_ns"].to_numpy())


def _per_step_class_as_before(c: pd.DataFrame, ws, we, wid) -> pd.DataFrame:
    """communication's per (class, name, step) table as it was before issue 30 (DataFrames per name)."""
    rows = []
    for (cls, name), g in c.groupby(["class", c["name"].astype(str)], sort=True, observed=True):
        crit, side = g[g["critical"]], g[~g["critical"]]
        crit_ns = intervals.measure_in_windows(intervals.normalize(crit["start_ns"], crit["end_ns"]), ws, we)
        side_ns = intervals.measure_in_windows(intervals.normalize(side["start_ns"], side["end_ns"]), ws, we)
        cnt = np.bincount(np.searchsorted(wid, g["step"].to_numpy()[g["step"].to_numpy() >= 0]), minlength=len(wid))
        first = g.iloc[0]
        for i in range(len(wid)):
            if crit_ns[i] or side_ns[i] or cnt[i]:
                rows.append(
                    {
                        "step": int(wid[i]),
                        "class": cls,
                        "name": name,
                        "collective": C._opt(first["collective"]),
                        "algo": C._opt(first["algo"]),
                        "protocol": C._opt(first["protocol"]),
                        "critical_ns": int(crit_ns[i]),
                        "side_ns": int(side_ns[i]),
                        "count": int(cnt[i]),
                    }
                )
    return pd.DataFrame(rows, columns=C.TABLE_COLUMNS)


def test_communication_table_is_the_per_name_groupby_table(monkeypatch):
    seen = []
    real = C._per_step_class
    monkeypatch.setattr(C, "_per_step_class", lambda *a: seen.append((a, real(*a))) or seen[-1][1])
    for path in (DP16, DP16.with_name("dp2dcp8_bs64.trace.json.gz")):
        tr = tracekit.load(path, cache=False)
        C.communication(tr)
    assert len(seen) == 2
    for args, table in seen:
        assert len(table) > 10 and set(table["class"]) >= {"weight_ag"} and table["step"].nunique() > 1
        pd.testing.assert_frame_equal(table, _per_step_class_as_before(*_rows_as_before(*args)))


def _rows_as_before(ev, sel, start, end, critical, step, ws, we, wid):
    """_per_step_class's arguments since round 3 (the event rows and their arrays) as the table it took before."""
    c = ev.iloc[sel][["name", "comm_class", "collective", "algo", "protocol"]].copy()
    c["class"] = c["comm_class"].astype(object).where(c["comm_class"].notna(), C.WEIGHT_AG_CLASS)
    c["start_ns"], c["end_ns"], c["critical"], c["step"] = start, end, critical, step
    return c, ws, we, wid
