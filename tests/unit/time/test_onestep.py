"""The one-step table: every nanosecond of a step charged to one name, so the rows sum exactly to the wall.

Checked by hand on a small table, and with hypothesis on random multi-stream traces against a slow reference that
walks every nanosecond."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit
from tracekit.analyses.time.onestep import (
    IDLE,
    ONE_STEP_COLUMNS,
    one_step_table,
)
from tracekit.analyses.steps.resolve import find_steps, median_step

SYN = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic"
MAIN = (0, 7)


def _ev(rows):
    """rows: (name, kind, stream, start, end[, device])."""
    df = pd.DataFrame(
        [
            {
                "name": r[0],
                "kind": r[1],
                "stream": r[2],
                "start_ns": r[3],
                "end_ns": r[4],
                "device": r[5] if len(r) > 5 else 0,
            }
            for r in rows
        ]
    )
    df["dur_ns"] = df["end_ns"] - df["start_ns"]
    df["kind"] = df["kind"].astype("category")
    df["name"] = df["name"].astype("category")
    return df


def _steps(*windows):
    return pd.DataFrame(
        {"step": range(len(windows)), "start_ns": [w[0] for w in windows], "end_ns": [w[1] for w in windows]}
    )


def test_main_stream_first_then_side_streams_then_idle():
    ev = _ev(
        [
            ("gemm", "kernel", 7, 0, 40),
            ("attn", "kernel", 7, 50, 80),
            ("ag", "kernel", 20, 30, 60),  # hidden 30-40 under gemm, charged 40-50, hidden 50-60 under attn
            ("ptop", "memcpy", 20, 60, 100),  # hidden 60-80 under attn, charged 80-90 (then idle? no: 80-100)
            ("side", "kernel", 24, 85, 95),  # a side kernel beats a side copy: charged 85-95
            ("other_gpu", "kernel", 7, 0, 100, 1),  # another device: ignored
        ]
    )
    t = one_step_table(ev, _steps((0, 110)), by="name", main=MAIN)
    got = {r.name: (r.wall_ns, r.overlapped_ns) for r in t.itertuples()}
    assert got == {"gemm": (40, 0), "attn": (30, 0), "ag": (10, 20), "ptop": (10, 30), "side": (10, 0), IDLE: (10, 0)}
    assert list(t.columns) == ONE_STEP_COLUMNS
    assert t["wall_ns"].sum() == 110 and t["wall_pct"].sum() == pytest.approx(100.0)
    assert t["name"].iloc[-1] == IDLE  # idle last, the rest by wall time


def test_earliest_start_wins_within_a_level_and_steps_clip():
    ev = _ev(
        [
            ("a", "kernel", 7, 0, 30),
            ("b", "kernel", 7, 10, 50),  # PDL-style overlap on the main stream
            ("c", "kernel", 20, 45, 70),
        ]
    )
    t = one_step_table(ev, _steps((5, 40), (40, 80)), by="name", main=MAIN)
    s0 = dict(zip(t.loc[t.step == 0, "name"], t.loc[t.step == 0, "wall_ns"]))
    s1 = dict(zip(t.loc[t.step == 1, "name"], t.loc[t.step == 1, "wall_ns"]))
    assert s0 == {"a": 25, "b": 10, IDLE: 0}
    assert s1 == {"b": 10, "c": 20, IDLE: 10}


def test_names_from_any_column_missing_values_and_categories():
    ev = _ev(
        [
            ("void flashinfer::norm::RMSNormKernel<8u>(x)", "kernel", 7, 0, 10),
            ("nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT", "kernel", 7, 10, 30),
        ]
    )
    t = one_step_table(ev, _steps((0, 40)), main=MAIN)  # by category, computed from the shipped rules
    assert dict(zip(t["name"], t["wall_ns"])) == {"gemm": 20, "norm": 10, IDLE: 10}
    ev["op_tag"] = pd.Categorical(["rms", None])
    t = one_step_table(ev, _steps((0, 40)), by="op_tag", main=MAIN)
    assert dict(zip(t["name"], t["wall_ns"])) == {"(none)": 20, "rms": 10, IDLE: 10}
    assert set(t["group_by"]) == {"op_tag"}


def test_overlapping_steps_are_measured_one_by_one():
    ev = _ev([("a", "kernel", 7, 0, 100)])
    t = one_step_table(ev, _steps((0, 60), (40, 100)), by="name", main=MAIN)
    assert t.groupby("step")["wall_ns"].sum().tolist() == [60, 60]


def test_median_step():
    assert median_step(_steps((0, 10), (20, 50), (60, 80))) == 2
    assert median_step(_steps()) is None


# --------------------------------------------------------------------------------------------------
# property: random multi-stream traces against a nanosecond-by-nanosecond reference
# --------------------------------------------------------------------------------------------------

KINDS = ("kernel", "memcpy", "memset")


def _reference(ev: pd.DataFrame, windows, main):
    """Walk every ns: the winner by (level, start, stream, row), the names running, per step."""
    rows = [r for r in ev.itertuples(index=True) if r.device == main[0] and r.end_ns > r.start_ns]

    def level(r):
        if r.stream == main[1]:
            return 0 if r.kind == "kernel" else 1
        return {"kernel": 2, "memcpy": 3, "memset": 4}[r.kind]

    out = {}
    for j, (a, b) in enumerate(windows):
        wall, ran = {}, {}
        for t in range(a, b):
            active = [r for r in rows if r.start_ns <= t < r.end_ns]
            if not active:
                wall[IDLE] = wall.get(IDLE, 0) + 1
                continue
            win = min(active, key=lambda r: (level(r), r.start_ns, r.stream, r.Index))
            wall[str(win.name)] = wall.get(str(win.name), 0) + 1
            for n in {str(r.name) for r in active}:
                ran[n] = ran.get(n, 0) + 1
        wall.setdefault(IDLE, 0)
        out[j] = {n: (wall.get(n, 0), ran.get(n, 0) - wall.get(n, 0) if n != IDLE else 0) for n in set(wall) | set(ran)}
    return out


activity = st.tuples(
    st.sampled_from(["a", "b", "c", "d"]),
    st.sampled_from(KINDS),
    st.sampled_from([7, 20, 24]),
    st.integers(0, 120),
    st.integers(0, 40),
    st.sampled_from([0, 0, 0, 1]),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(activity, min_size=0, max_size=14), st.lists(st.integers(0, 150), min_size=2, max_size=6))
def test_rows_sum_to_the_wall_and_equal_the_reference(acts, cuts):
    rows = [(n, k, s, t0, t0 + d, dev) for n, k, s, t0, d, dev in acts]
    if not rows:
        rows = [("a", "kernel", 7, 0, 0)]
    ev = _ev(rows).sort_values("start_ns", kind="stable").reset_index(drop=True)
    cuts = sorted(set(cuts))
    windows = [(cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)]
    if not windows:
        windows = [(0, 10)]
    t = one_step_table(ev, _steps(*windows), by="name", main=MAIN)
    for j, (a, b) in enumerate(windows):
        part = t[t.step == j]
        assert part["wall_ns"].sum() == b - a
        assert (part["wall_ns"] >= 0).all() and (part["overlapped_ns"] >= 0).all()
    ref = _reference(ev, windows, MAIN)
    for j in range(len(windows)):
        part = t[t.step == j]
        got = {r.name: (r.wall_ns, r.overlapped_ns) for r in part.itertuples()}
        assert got == ref[j], (j, windows[j])


@pytest.mark.parametrize("fixture", ["dp16_bs4", "dp2dcp8_bs128", "dsv3_bs32"])
def test_sums_exactly_to_the_wall_on_the_synthetic_fixtures(fixture):
    trace = tracekit.load(SYN / f"{fixture}.trace.json.gz", cache=False)
    st_ = find_steps(trace)
    t = one_step_table(trace.events, st_)
    walls = dict(zip(st_.table["step"], st_.table["dur_ns"]))
    assert t.groupby("step")["wall_ns"].sum().to_dict() == walls
    assert (t["overlapped_ns"] >= 0).all()
