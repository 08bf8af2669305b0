"""Unit tests for tracekit.events, the questions every layer asks about the events table: hand-built tables whose
answers are worked out by hand here, the edge cases (empty tables, no kernels, reused correlation ids, a lane's
running maximum end, tolerance and fraction), and small hypothesis properties against plain-Python references."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import gpu_ann, kernel, launch, load_events, memcpy
from tracekit import schema
from tracekit.errors import MissingDataError, UsageError
from tracekit.events import (
    categorical_at,
    gpu_mask,
    lane_key,
    launch_index,
    main_stream,
    name_mask,
    same_stream_overlaps,
    weight_ag_mask,
)

HSETTINGS = settings(max_examples=60, deadline=None)


def table(rows: list[tuple]) -> pd.DataFrame:
    """An events table from (name, kind, device, stream, start_ns, dur_ns[, copy_kind]) rows, with the dtypes of
    schema.EVENT_COLUMNS for the columns tracekit.events reads."""
    rows = [r if len(r) == 7 else (*r, None) for r in rows]
    name, kind, dev, stream, start, dur, ck = (list(c) for c in zip(*rows)) if rows else ([],) * 7
    start, dur = np.asarray(start, dtype=np.int64), np.asarray(dur, dtype=np.int64)
    return pd.DataFrame(
        {
            "start_ns": start,
            "dur_ns": dur,
            "end_ns": start + dur,
            "name": pd.Categorical(name),
            "kind": pd.Categorical(kind, categories=schema.KINDS),
            "device": np.asarray(dev, dtype=np.int32),
            "stream": np.asarray(stream, dtype=np.int64),
            "copy_kind": pd.Categorical(ck, categories=schema.COPY_KINDS),
        }
    )


EMPTY = table([])


# ---------------------------------------------------------------------------------------------------------- name_mask


def test_name_mask_searches_anywhere_in_the_name_and_is_case_sensitive():
    ev = table(
        [
            ("sm90_gemm_bf16", "kernel", 0, 7, 0, 1),
            ("GEMM", "kernel", 0, 7, 1, 1),
            ("gemm", "cpu_op", -1, -1, 2, 1),
            ("flash_fwd", "kernel", 0, 7, 3, 1),
        ]
    )
    assert name_mask(ev, "gemm").tolist() == [True, False, True, False]
    assert name_mask(ev, "^gemm$").tolist() == [False, False, True, False]


def test_name_mask_kind_keeps_only_that_kind():
    ev = table([("gemm_a", "kernel", 0, 7, 0, 1), ("gemm_b", "cpu_op", -1, -1, 1, 1), ("gemm_c", "memcpy", 0, 7, 2, 1)])
    assert name_mask(ev, "gemm", kind="kernel").tolist() == [True, False, False]
    assert name_mask(ev, "gemm", kind="cpu_op").tolist() == [False, True, False]
    assert name_mask(ev, "gemm", kind="memset").tolist() == [False, False, False]


def test_name_mask_a_missing_name_never_matches():
    ev = table([(None, "kernel", 0, 7, 0, 1), ("x", "kernel", 0, 7, 1, 1)])
    assert name_mask(ev, "").tolist() == [False, True]  # "" finds every name, but a missing name is none
    assert name_mask(ev, ".*").tolist() == [False, True]


def test_name_mask_takes_a_compiled_pattern():
    ev = table([("NCCL_x", "kernel", 0, 7, 0, 1), ("nccl_y", "kernel", 0, 7, 1, 1)])
    assert name_mask(ev, re.compile("nccl", re.I)).tolist() == [True, True]


def test_name_mask_runs_the_pattern_once_per_distinct_name_not_per_event():
    ev = table([("a", "kernel", 0, 7, i, 1) for i in range(50)] + [("b", "kernel", 0, 7, 50, 1)])
    seen = []

    class Counting:
        def search(self, text):
            seen.append(text)
            return text == "b"

    out = name_mask(ev, Counting())
    assert sorted(seen) == ["a", "b"]
    assert out.sum() == 1 and out[-1]


def test_name_mask_empty_tables():
    assert name_mask(EMPTY, "x").tolist() == []
    assert name_mask(EMPTY, "x", kind="kernel").dtype == bool
    # no rows but categories left over (a filtered table)
    ev = table([("x", "kernel", 0, 7, 0, 1)]).iloc[:0]
    assert name_mask(ev, "x", kind="kernel").tolist() == []


def test_name_mask_a_bad_pattern_from_a_user_is_one_usage_error_naming_where():
    ev = table([("x", "kernel", 0, 7, 0, 1)])
    with pytest.raises(UsageError, match="my selector"):
        name_mask(ev, "(unclosed", where="my selector")


# ------------------------------------------------------------------------------------------------------ categorical_at


def test_categorical_at_by_hand():
    out = categorical_at(["MoE", "attn", "MoE", "unused"], np.array([2, -1, 0, 1, 1]))
    assert list(out.categories) == ["MoE", "attn"]  # used values only, sorted
    assert np.asarray(out.codes).tolist() == [0, -1, 0, 1, 1]
    assert out.astype(object).tolist()[0] == "MoE" and pd.isna(out[1])


def test_categorical_at_all_missing_and_empty():
    out = categorical_at(["a", "b"], np.array([-1, -1, -1]))
    assert len(out) == 3 and out.isna().all() and len(out.categories) == 0
    out = categorical_at(["a"], np.array([], dtype=np.int64))
    assert len(out) == 0 and len(out.categories) == 0
    out = categorical_at([], np.array([-1, -1]))  # nothing to point at: every row missing
    assert len(out) == 2 and out.isna().all()


@HSETTINGS
@given(values=st.lists(st.text(alphabet="abAB_", min_size=0, max_size=3), min_size=1, max_size=6), data=st.data())
def test_categorical_at_is_the_slow_categorical(values, data):
    idx = np.asarray(data.draw(st.lists(st.integers(-1, len(values) - 1), max_size=25)), dtype=np.int64)
    arr = np.asarray(values, dtype=object)
    ref = pd.Categorical(np.where(idx >= 0, arr[idx], None)) if idx.size else pd.Categorical([])
    out = categorical_at(values, idx)
    assert list(out.categories) == list(ref.categories)
    assert np.asarray(out.codes, dtype=np.int64).tolist() == np.asarray(ref.codes, dtype=np.int64).tolist()


# ------------------------------------------------------------------------------------------------------------ lane_key


def test_lane_key_by_hand():
    ev = table(
        [
            ("k", "kernel", 0, 7, 0, 1),
            ("k", "kernel", 0, 8, 0, 1),
            ("k", "kernel", 1, 7, 0, 1),
            ("k", "kernel", 3, 2**31 + 5, 0, 1),
            ("op", "cpu_op", -1, -1, 0, 1),
        ]
    )
    key = lane_key(ev)
    assert key.dtype == np.int64
    # device is int32 in the table: 3 << 32 must not overflow it
    assert key.tolist() == [7, 8, 2**32 + 7, 3 * 2**32 + 2**31 + 5, -(2**32) - 1]
    assert lane_key(EMPTY).tolist() == [] and lane_key(EMPTY).dtype == np.int64


@HSETTINGS
@given(st.lists(st.tuples(st.integers(-1, 16), st.integers(-1, 2**31)), min_size=1, max_size=20))
def test_lane_key_same_key_exactly_when_same_lane(lanes):
    ev = table([("k", "kernel", d, s, 0, 1) for d, s in lanes])
    key = lane_key(ev).tolist()
    for i in range(len(lanes)):
        for j in range(len(lanes)):
            assert (key[i] == key[j]) == (lanes[i] == lanes[j])


# ------------------------------------------------------------------------------------------------------------ gpu_mask


def test_gpu_mask_is_kernels_memcpys_and_memsets_only():
    ev = table([(k, k, 0, 7, i, 1) for i, k in enumerate(schema.KINDS)])
    got = dict(zip(schema.KINDS, gpu_mask(ev).tolist()))
    assert got == {k: k in ("kernel", "memcpy", "memset") for k in schema.KINDS}
    assert gpu_mask(EMPTY).tolist() == []


# --------------------------------------------------------------------------------------------------------- main_stream


def test_main_stream_is_the_lane_with_the_most_kernel_time_not_the_most_kernels():
    ev = table(
        [
            ("a", "kernel", 0, 7, 0, 10),
            ("a", "kernel", 0, 7, 20, 10),
            ("a", "kernel", 0, 7, 40, 10),
            ("b", "kernel", 0, 9, 0, 50),
            ("Memcpy HtoD", "memcpy", 0, 11, 0, 1000, "HtoD"),  # not a kernel: does not count
            ("op", "cpu_op", -1, -1, 0, 5000),
        ]
    )
    assert main_stream(ev) == (0, 9)


def test_main_stream_lanes_are_device_and_stream_together():
    # stream 7 carries 30 + 25 = 55 over two devices, but the busiest lane is (0, 9) with 40
    ev = table([("a", "kernel", 0, 7, 0, 30), ("a", "kernel", 1, 7, 0, 25), ("b", "kernel", 0, 9, 0, 40)])
    d, s = main_stream(ev)
    assert (d, s) == (0, 9) and type(d) is int and type(s) is int


def test_main_stream_given_returns_its_device():
    ev = table([("a", "kernel", 0, 7, 0, 100), ("b", "kernel", 2, 13, 0, 1)])
    d, s = main_stream(ev, stream=13)
    assert (d, s) == (2, 13) and type(d) is int and type(s) is int


def test_main_stream_given_without_kernels_is_missing_data():
    ev = table([("a", "kernel", 0, 7, 0, 100), ("Memcpy HtoD", "memcpy", 0, 13, 0, 9, "HtoD")])
    with pytest.raises(MissingDataError, match=r"\b13\b"):
        main_stream(ev, stream=13)


@pytest.mark.parametrize(
    "ev",
    [
        EMPTY,
        table(
            [
                ("Memcpy HtoD", "memcpy", 0, 7, 0, 10, "HtoD"),
                ("op", "cpu_op", -1, -1, 0, 10),
                ("step", "gpu_annotation", 0, 7, 0, 10),
            ]
        ),
    ],
    ids=["empty", "no-kernels"],
)
def test_main_stream_without_kernels_is_one_sentence_of_missing_data(ev):
    for stream in (None, 7):
        with pytest.raises(MissingDataError) as err:
            main_stream(ev, stream=stream)
        msg = str(err.value)
        assert "kernel" in msg and "\n" not in msg and ". " not in msg.rstrip(".")
        assert err.value.exit_code == 4


# ------------------------------------------------------------------------------------------------------ weight_ag_mask

PTOP = "Memcpy PtoP (Device -> Device)"


def test_weight_ag_mask_ptop_copies_and_the_local_copy_kernels_on_their_lanes():
    ev = table(
        [
            (PTOP, "memcpy", 0, 20, 0, 10, "PtoP"),  # True: PtoP
            ("memcpy128", "kernel", 0, 20, 10, 5),  # True: local copy on a PtoP lane
            ("gemm", "kernel", 0, 20, 20, 5),  # other kernel on that lane
            ("Memcpy DtoD (Device -> Device)", "memcpy", 0, 20, 30, 5, "DtoD"),  # not PtoP
            ("memcpy128", "gpu_annotation", 0, 20, 40, 5),  # the name, but not a kernel
            ("memcpy1280", "kernel", 0, 20, 50, 5),  # default pattern is ^memcpy128$
            ("memcpy128", "kernel", 0, 7, 60, 5),  # a lane without PtoP
            ("memcpy128", "kernel", 1, 20, 70, 5),  # same stream number, other device
            (PTOP, "memcpy", 2, 3, 80, 10, "PtoP"),  # True: PtoP on another lane
        ]
    )
    assert weight_ag_mask(ev).tolist() == [True, True, False, False, False, False, False, False, True]


def test_weight_ag_mask_without_ptop_is_nothing():
    ev = table([("memcpy128", "kernel", 0, 20, 0, 5), ("Memcpy DtoD", "memcpy", 0, 20, 5, 5, "DtoD")])
    assert weight_ag_mask(ev).tolist() == [False, False]
    assert weight_ag_mask(EMPTY).tolist() == []


def test_weight_ag_mask_takes_a_local_copy_pattern_as_text_or_compiled():
    ev = table(
        [
            (PTOP, "memcpy", 0, 20, 0, 10, "PtoP"),
            ("memcpy128", "kernel", 0, 20, 10, 5),
            ("my_copy_v2", "kernel", 0, 20, 20, 5),
        ]
    )
    assert weight_ag_mask(ev, "my_copy").tolist() == [True, False, True]
    assert weight_ag_mask(ev, re.compile(r"^MY_COPY", re.I)).tolist() == [True, False, True]
    with pytest.raises(UsageError):
        weight_ag_mask(ev, "(bad")


# ------------------------------------------------------------------------------------------------ same_stream_overlaps


def test_same_stream_overlaps_by_hand():
    ev = table(
        [
            ("A", "kernel", 0, 7, 0, 100),  # 0: [0, 100)
            ("B", "kernel", 0, 7, 10, 10),  # 1: [10, 20) inside A: overlap
            ("C", "kernel", 0, 7, 50, 10),  # 2: [50, 60): after B's end, before A's: overlap (running max)
            ("D", "kernel", 0, 7, 100, 10),  # 3: [100, 110): touches A's end: no overlap
            ("S", "memset", 0, 7, 105, 3),  # 4: memset inside D: overlap
            ("E", "kernel", 0, 8, 105, 15),  # 5: other stream: no
            ("F", "kernel", 1, 7, 5, 10),  # 6: same stream number, other device: no
            ("step", "gpu_annotation", 0, 7, 0, 1000),  # 7: not GPU activity, neither flagged ...
            ("G", "kernel", 0, 7, 200, 10),  # 8: ... nor holding the lane: G is alone
            ("op", "cpu_op", -1, -1, 0, 1000),  # 9: CPU
            ("H", "memcpy", 0, 7, 205, 10, "DtoD"),  # 10: memcpy inside G: overlap
        ]
    )
    assert np.flatnonzero(same_stream_overlaps(ev)).tolist() == [1, 2, 4, 10]


def test_same_stream_overlaps_rows_in_any_order():
    ev = table(
        [
            ("C", "kernel", 0, 7, 50, 10),
            ("B", "kernel", 0, 7, 10, 10),
            ("A", "kernel", 0, 7, 0, 100),
            ("D", "kernel", 0, 7, 100, 10),
        ]
    )
    assert same_stream_overlaps(ev).tolist() == [True, True, False, False]


def test_same_stream_overlaps_tolerance_is_strict():
    ev = table([("A", "kernel", 0, 7, 0, 100), ("B", "kernel", 0, 7, 90, 110)])  # 10 ns overlap
    assert same_stream_overlaps(ev, tolerance_ns=9).tolist() == [False, True]
    assert same_stream_overlaps(ev, tolerance_ns=10).tolist() == [False, False]


def test_same_stream_overlaps_fraction_of_own_duration():
    ev = table([("A", "kernel", 0, 7, 0, 100), ("B", "kernel", 0, 7, 94, 20)])  # 6 ns overlap of a 20 ns kernel
    assert same_stream_overlaps(ev, fraction=0.25).tolist() == [False, True]  # allowed 5
    assert same_stream_overlaps(ev, fraction=0.3).tolist() == [False, False]  # allowed 6
    assert same_stream_overlaps(ev, fraction=0.5).tolist() == [False, False]  # the step health check's rule
    # the larger of the two bounds
    assert same_stream_overlaps(ev, tolerance_ns=6, fraction=0.25).tolist() == [False, False]
    assert same_stream_overlaps(ev, tolerance_ns=2, fraction=0.3).tolist() == [False, False]


def test_same_stream_overlaps_nothing_to_compare():
    assert same_stream_overlaps(EMPTY).tolist() == []
    ev = table([("op", "cpu_op", -1, -1, 0, 10), ("op", "cpu_op", -1, -1, 5, 10)])
    assert same_stream_overlaps(ev).tolist() == [False, False]
    assert same_stream_overlaps(table([("k", "kernel", 0, 7, 0, 10)])).tolist() == [False]


def _overlaps_slow(rows, tolerance_ns, fraction):
    """Plain loop: a GPU row is flagged when GPU rows of its lane that come before it (by start, ties in table
    order) reach past its start by more than max(tolerance, fraction × its duration)."""
    out = []
    for i, (_, kind, d, s, start, dur) in enumerate(rows):
        if kind not in schema.GPU_ACTIVITY_KINDS:
            out.append(False)
            continue
        reach = None
        for j, (_, kind2, d2, s2, start2, dur2) in enumerate(rows):
            if kind2 in schema.GPU_ACTIVITY_KINDS and (d2, s2) == (d, s) and (start2, j) < (start, i):
                reach = start2 + dur2 if reach is None else max(reach, start2 + dur2)
        out.append(reach is not None and reach - start > max(tolerance_ns, int(fraction * dur)))
    return out


@HSETTINGS
@given(
    rows=st.lists(
        st.tuples(
            st.just("k"),
            st.sampled_from(["kernel", "memcpy", "memset", "gpu_annotation"]),
            st.integers(0, 1),
            st.integers(7, 8),
            st.integers(0, 60),
            st.integers(0, 30),
        ),
        max_size=14,
    ),
    tolerance_ns=st.integers(0, 6),
    fraction=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
)
def test_same_stream_overlaps_is_the_slow_loop(rows, tolerance_ns, fraction):
    got = same_stream_overlaps(table(rows), tolerance_ns=tolerance_ns, fraction=fraction).tolist()
    assert got == _overlaps_slow(rows, tolerance_ns, fraction)


# -------------------------------------------------------------------------------------------------------- launch_index


def _i64(*xs):
    return np.asarray(xs, dtype=np.int64)


def test_launch_index_by_hand():
    l_corr, l_start = _i64(5, 6, 5), _i64(100, 110, 300)
    g_start = _i64(150, 350, 120, 50, 130, 140, 300)
    g_corr = _i64(5, 5, 6, 5, 7, -1, 5)
    got = launch_index(g_start, g_corr, l_corr, l_start)
    assert got.dtype == np.int64
    assert got.tolist() == [
        0,  # corr 5 at 150: launch 0 (100), the one of 300 comes later
        2,  # corr 5 at 350: the id is reused, the latest launch before it (300) wins
        1,  # corr 6
        0,  # corr 5 at 50, before every launch of 5 (clock skew): the id's first launch
        -1,  # corr 7: no launch of that id
        -1,  # no correlation id
        2,  # corr 5 at 300 exactly: the launch at 300 counts
    ]


def test_launch_index_first_launch_is_the_earliest_not_the_first_listed():
    assert launch_index(_i64(50), _i64(5), _i64(5, 5), _i64(300, 100)).tolist() == [1]
    assert launch_index(_i64(200), _i64(5), _i64(5, 5), _i64(300, 100)).tolist() == [1]
    assert launch_index(_i64(400), _i64(5), _i64(5, 5), _i64(300, 100)).tolist() == [0]


def test_launch_index_empty_sides():
    got = launch_index(_i64(1, 2), _i64(1, 1), _i64(), _i64())
    assert got.tolist() == [-1, -1] and got.dtype == np.int64
    got = launch_index(_i64(), _i64(), _i64(1), _i64(0))
    assert got.tolist() == [] and got.dtype == np.int64


def _launch_index_slow(g_start, g_corr, l_corr, l_start):
    out = []
    for t, c in zip(g_start, g_corr):
        mine = [(l_start[j], j) for j in range(len(l_corr)) if c >= 0 and l_corr[j] == c]
        before = [p for p in mine if p[0] <= t]
        out.append(max(before)[1] if before else min(mine)[1] if mine else -1)
    return out


@settings(max_examples=40, deadline=None)
@given(
    acts=st.lists(st.tuples(st.integers(0, 40), st.integers(-1, 4)), max_size=12),
    launches=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=12),
)
def test_launch_index_is_the_slow_loop(acts, launches):
    g_start, g_corr = (np.asarray(c, dtype=np.int64) for c in (zip(*acts) if acts else ([], [])))
    l_start, l_corr = (np.asarray(c, dtype=np.int64) for c in (zip(*launches) if launches else ([], [])))
    got = launch_index(g_start, g_corr, l_corr, l_start).tolist()
    assert got == _launch_index_slow(g_start.tolist(), g_corr.tolist(), l_corr.tolist(), l_start.tolist())


# ------------------------------------------------------------------------------------------- on a table from ingest


def test_the_answers_on_a_loaded_trace(tmp_path):
    ev = load_events(
        tmp_path,
        [
            launch("cudaLaunchKernel", 0.5, 11),
            kernel("gemm", 1, 10, stream=7, corr=11),
            kernel("gemm", 5, 3, stream=7, corr=11),  # overlaps the first gemm
            kernel("memcpy128", 20, 2, stream=20, corr=12),
            memcpy(PTOP, 22, 4, stream=20),
            kernel("memcpy128", 30, 2, stream=9, corr=13),
            gpu_ann("step", 0, 40, stream=7),
        ],
    ).events
    names = ev["name"].astype(str).tolist()
    kinds = ev["kind"].astype(str).tolist()
    assert gpu_mask(ev).tolist() == [k in ("kernel", "memcpy") for k in kinds]
    assert main_stream(ev) == (0, 7)
    ag = weight_ag_mask(ev)
    assert sorted(n for n, a in zip(names, ag) if a) == sorted(["memcpy128", PTOP])
    assert ev.loc[ag, "stream"].tolist() == [20, 20]
    over = same_stream_overlaps(ev)
    assert [(n, s) for n, s, o in zip(names, ev["start_ns"], over) if o] == [("gemm", 5000)]
    k = (ev["kind"] == "kernel").to_numpy()
    rt = (ev["kind"] == "runtime").to_numpy()
    li = launch_index(
        ev["start_ns"].to_numpy()[k],
        ev["correlation"].to_numpy()[k],
        ev["correlation"].to_numpy()[rt],
        ev["start_ns"].to_numpy()[rt],
    )
    assert li.tolist() == [0, 0, -1, -1]
