"""Tests for tracekit.intervals: hand-written cases plus hypothesis properties
checked against a deliberately slow per-nanosecond reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.intervals import (
    clip,
    coverage_count,
    intersect,
    measure_in_windows,
    normalize,
    split_by_windows,
    subtract,
    total,
    union,
)

I64 = np.int64
HSETTINGS = settings(max_examples=200, deadline=None)
COORD_MAX = 200


# ---------------------------------------------------------------------------
# slow reference helpers (small coordinates only)
# ---------------------------------------------------------------------------


def points(starts, ends) -> set[int]:
    """Set of integer points covered by the half-open intervals."""
    out: set[int] = set()
    for s, e in zip(list(starts), list(ends)):
        out.update(range(int(s), int(e)))
    return out


def from_points(pts: set[int]) -> tuple[list[int], list[int]]:
    """Canonical normalized intervals (maximal runs) of a set of points."""
    starts: list[int] = []
    ends: list[int] = []
    for p in sorted(pts):
        if ends and ends[-1] == p:
            ends[-1] = p + 1
        else:
            starts.append(p)
            ends.append(p + 1)
    return starts, ends


def as_lists(pair) -> tuple[list[int], list[int]]:
    s, e = pair
    return [int(x) for x in s], [int(x) for x in e]


def assert_int64_pair(pair) -> None:
    s, e = pair
    assert isinstance(s, np.ndarray) and isinstance(e, np.ndarray)
    assert s.dtype == I64 and e.dtype == I64
    assert s.ndim == 1 and s.shape == e.shape


def assert_normalized(pair) -> None:
    assert_int64_pair(pair)
    s, e = pair
    assert np.all(e > s)
    assert np.all(s[1:] > e[:-1])


def E():
    return np.empty(0, dtype=I64), np.empty(0, dtype=I64)


# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------

coord = st.integers(min_value=0, max_value=COORD_MAX)


@st.composite
def raw_intervals(draw, max_size: int = 12):
    """Unsorted intervals including empty / inverted / duplicate ones."""
    n = draw(st.integers(min_value=0, max_value=max_size))
    starts = []
    ends = []
    for _ in range(n):
        s = draw(coord)
        kind = draw(st.sampled_from(["normal", "normal", "normal", "empty", "inverted", "dup"]))
        if kind == "empty":
            e = s
        elif kind == "inverted":
            e = draw(st.integers(min_value=0, max_value=s))
        elif kind == "dup" and starts:
            i = draw(st.integers(min_value=0, max_value=len(starts) - 1))
            s, e = starts[i], ends[i]
        else:
            e = draw(st.integers(min_value=s, max_value=min(COORD_MAX, s + 60)))
        starts.append(s)
        ends.append(e)
    return np.array(starts, dtype=I64), np.array(ends, dtype=I64)


@st.composite
def disjoint_windows(draw, max_size: int = 8):
    """Sorted, disjoint (possibly touching / zero-length) windows."""
    cuts = sorted(draw(st.lists(coord, min_size=0, max_size=2 * max_size)))
    if len(cuts) % 2:
        cuts = cuts[:-1]
    ws = np.array(cuts[0::2], dtype=I64)
    we = np.array(cuts[1::2], dtype=I64)
    return ws, we


# ---------------------------------------------------------------------------
# normalize
# ---------------------------------------------------------------------------


class TestNormalizeExamples:
    def test_empty(self):
        s, e = normalize([], [])
        assert_normalized((s, e))
        assert s.size == 0

    def test_overlap_touch_nested_identical(self):
        s, e = normalize([10, 0, 5, 2, 20, 20, 30], [15, 5, 8, 3, 25, 25, 30])
        # [0,5)+[5,8)+[2,3) -> [0,8); [10,15); [20,25) twice -> once; [30,30) dropped
        assert as_lists((s, e)) == ([0, 10, 20], [8, 15, 25])

    def test_nested(self):
        assert as_lists(normalize([0, 2, 3], [100, 5, 4])) == ([0], [100])

    def test_zero_length_and_inverted_dropped(self):
        assert as_lists(normalize([5, 7, 9], [5, 3, 10])) == ([9], [10])

    def test_gap_of_one_not_merged(self):
        assert as_lists(normalize([0, 6], [5, 10])) == ([0, 6], [5, 10])

    def test_int_like_inputs(self):
        s, e = normalize(np.array([3, 0], dtype=np.int32), (4, 1))
        assert_normalized((s, e))
        assert as_lists((s, e)) == ([0, 3], [1, 4])

    def test_large_nanosecond_values(self):
        base = 1_700_000_000_000_000_000
        s, e = normalize([base + 10, base], [base + 20, base + 10])
        assert as_lists((s, e)) == ([base], [base + 20])

    def test_shape_mismatch(self):
        with pytest.raises(ValueError):
            normalize([1, 2], [3])

    def test_not_1d(self):
        with pytest.raises(ValueError):
            normalize([[1, 2]], [[3, 4]])

    def test_does_not_mutate_or_alias(self):
        s = np.array([5, 0, 1], dtype=I64)
        e = np.array([9, 2, 3], dtype=I64)
        s0, e0 = s.copy(), e.copy()
        out = normalize(s, e)
        np.testing.assert_array_equal(s, s0)
        np.testing.assert_array_equal(e, e0)
        # already-normalized input: result must be a copy, not a view
        ns = np.array([0, 10], dtype=I64)
        ne = np.array([5, 15], dtype=I64)
        rs, re_ = normalize(ns, ne)
        rs[0] = 99
        re_[0] = 99
        assert ns[0] == 0 and ne[0] == 5
        assert not np.shares_memory(out[0], s)


@pytest.mark.slow
@HSETTINGS
@given(raw_intervals())
def test_normalize_matches_reference(iv):
    s0, e0 = iv[0].copy(), iv[1].copy()
    out = normalize(*iv)
    assert_normalized(out)
    assert as_lists(out) == from_points(points(*iv))
    np.testing.assert_array_equal(iv[0], s0)
    np.testing.assert_array_equal(iv[1], e0)


@pytest.mark.slow
@HSETTINGS
@given(raw_intervals())
def test_normalize_idempotent(iv):
    once = normalize(*iv)
    twice = normalize(*once)
    assert as_lists(once) == as_lists(twice)


# ---------------------------------------------------------------------------
# union
# ---------------------------------------------------------------------------


class TestUnionExamples:
    def test_no_args(self):
        out = union()
        assert_normalized(out)
        assert out[0].size == 0

    def test_single(self):
        assert as_lists(union(([3, 0], [5, 3]))) == ([0], [5])

    def test_touching_across_sets(self):
        assert as_lists(union(([0], [5]), ([5], [10]), ([20], [30]))) == ([0, 20], [10, 30])

    def test_with_empty(self):
        assert as_lists(union(E(), ([1], [2]), E())) == ([1], [2])

    def test_bad_arg(self):
        with pytest.raises(ValueError):
            union(([1, 2], [3]))
        with pytest.raises(ValueError):
            union(np.array([1, 2, 3]))


@pytest.mark.slow
@HSETTINGS
@given(st.lists(raw_intervals(max_size=8), min_size=0, max_size=4), st.booleans())
def test_union_matches_reference(sets, prenormalize):
    if prenormalize:
        sets = [normalize(*x) for x in sets]
    out = union(*sets)
    assert_normalized(out)
    ref: set[int] = set()
    for x in sets:
        ref |= points(*x)
    assert as_lists(out) == from_points(ref)


# ---------------------------------------------------------------------------
# intersect / subtract
# ---------------------------------------------------------------------------


class TestIntersectSubtractExamples:
    def test_basic(self):
        a = ([0, 10], [5, 20])
        b = ([3, 12], [12, 30])
        assert as_lists(intersect(a, b)) == ([3, 10], [5, 20])
        assert as_lists(subtract(a, b)) == ([0], [3])
        assert as_lists(subtract(b, a)) == ([5, 20], [10, 30])

    def test_touching_has_empty_intersection(self):
        assert as_lists(intersect(([0], [5]), ([5], [10]))) == ([], [])
        assert as_lists(subtract(([0], [5]), ([5], [10]))) == ([0], [5])

    def test_identical(self):
        a = ([0, 10], [5, 20])
        assert as_lists(intersect(a, a)) == ([0, 10], [5, 20])
        assert as_lists(subtract(a, a)) == ([], [])

    def test_nested(self):
        a = ([0], [100])
        b = ([10, 30], [20, 40])
        assert as_lists(intersect(a, b)) == ([10, 30], [20, 40])
        assert as_lists(subtract(a, b)) == ([0, 20, 40], [10, 30, 100])
        assert as_lists(subtract(b, a)) == ([], [])

    def test_empty_operands(self):
        a = ([5, 0], [9, 3])
        for out in (intersect(a, E()), intersect(E(), a), subtract(E(), a), intersect(E(), E())):
            assert_normalized(out)
            assert out[0].size == 0
        out = subtract(a, E())
        assert_normalized(out)
        assert as_lists(out) == ([0, 5], [3, 9])

    def test_unnormalized_inputs(self):
        a = ([10, 0, 2], [20, 5, 12])  # -> [0, 20)
        b = ([5, 5, 15], [6, 6, 15])  # -> [5, 6)
        assert as_lists(subtract(a, b)) == ([0, 6], [5, 20])
        assert as_lists(intersect(a, b)) == ([5], [6])

    def test_subtract_result_touching_pieces_merge(self):
        # b's hole [5,5) is empty so a stays whole
        assert as_lists(subtract(([0], [10]), ([5], [5]))) == ([0], [10])

    def test_shape_mismatch(self):
        with pytest.raises(ValueError):
            intersect(([1], [2, 3]), ([1], [2]))
        with pytest.raises(ValueError):
            subtract(([1], [2]), ([1, 2], [3]))

    def test_no_mutation(self):
        a = (np.array([10, 0], dtype=I64), np.array([20, 5], dtype=I64))
        b = (np.array([3], dtype=I64), np.array([12], dtype=I64))
        copies = [x.copy() for x in (*a, *b)]
        intersect(a, b)
        subtract(a, b)
        for x, c in zip((*a, *b), copies):
            np.testing.assert_array_equal(x, c)


@pytest.mark.slow
@HSETTINGS
@given(raw_intervals(), raw_intervals())
def test_intersect_matches_reference(a, b):
    out = intersect(a, b)
    assert_normalized(out)
    assert as_lists(out) == from_points(points(*a) & points(*b))


@pytest.mark.slow
@HSETTINGS
@given(raw_intervals(), raw_intervals())
def test_subtract_matches_reference(a, b):
    out = subtract(a, b)
    assert_normalized(out)
    assert as_lists(out) == from_points(points(*a) - points(*b))


@HSETTINGS
@given(raw_intervals(), raw_intervals())
def test_set_identities(a, b):
    # |a| = |a ∩ b| + |a \ b| and a ∪ b = (a \ b) ∪ b
    assert total(a) == total(intersect(a, b)) + total(subtract(a, b))
    assert as_lists(union(a, b)) == as_lists(union(subtract(a, b), b))


# ---------------------------------------------------------------------------
# total / clip
# ---------------------------------------------------------------------------


class TestTotalClipExamples:
    def test_total(self):
        assert total(E()) == 0
        assert total(([0, 10], [5, 12])) == 7
        assert total(([0, 0, 2], [10, 10, 4])) == 10  # overlaps counted once
        assert total(([5], [5])) == 0
        assert isinstance(total(([0], [3])), int)

    def test_clip(self):
        a = ([0, 10, 20], [5, 15, 25])
        assert as_lists(clip(a, 3, 22)) == ([3, 10, 20], [5, 15, 22])
        assert as_lists(clip(a, 5, 10)) == ([], [])
        assert as_lists(clip(a, 12, 13)) == ([12], [13])
        assert as_lists(clip(a, -100, 100)) == ([0, 10, 20], [5, 15, 25])
        assert as_lists(clip(a, 7, 7)) == ([], [])
        assert as_lists(clip(a, 9, 3)) == ([], [])
        assert_normalized(clip(E(), 0, 10))

    def test_clip_does_not_alias(self):
        s = np.array([0, 10], dtype=I64)
        e = np.array([5, 15], dtype=I64)
        cs, ce = clip((s, e), -1, 100)
        cs[0] = 42
        assert s[0] == 0


@HSETTINGS
@given(raw_intervals())
def test_total_matches_reference(a):
    assert total(a) == len(points(*a))


@HSETTINGS
@given(raw_intervals(), coord, coord)
def test_clip_matches_reference(a, lo, hi):
    out = clip(a, lo, hi)
    assert_normalized(out)
    assert as_lists(out) == from_points({p for p in points(*a) if lo <= p < hi})


# ---------------------------------------------------------------------------
# measure_in_windows
# ---------------------------------------------------------------------------


class TestMeasureInWindowsExamples:
    def test_basic(self):
        a = ([0, 10], [5, 20])
        got = measure_in_windows(a, [0, 3, 12, 5, 0, 30, 7, 15], [100, 12, 13, 10, 0, 40, 3, 15])
        assert got.dtype == I64
        assert got.tolist() == [15, 4, 1, 0, 0, 0, 0, 0]

    def test_overlapping_unsorted_windows(self):
        a = ([0], [10])
        assert measure_in_windows(a, [5, 0, 2], [15, 10, 4]).tolist() == [5, 10, 2]

    def test_empty(self):
        assert measure_in_windows(E(), [0, 1], [5, 6]).tolist() == [0, 0]
        out = measure_in_windows(([0], [5]), [], [])
        assert out.dtype == I64 and out.size == 0

    def test_unnormalized_set(self):
        assert measure_in_windows(([0, 2], [5, 8]), [0], [10]).tolist() == [8]

    def test_window_shape_mismatch(self):
        with pytest.raises(ValueError):
            measure_in_windows(([0], [5]), [0, 1], [5])


@pytest.mark.slow
@HSETTINGS
@given(
    raw_intervals(),
    st.lists(st.tuples(st.integers(-10, COORD_MAX + 10), st.integers(-10, COORD_MAX + 10)), max_size=10),
)
def test_measure_in_windows_matches_reference(a, wins):
    ws = np.array([w[0] for w in wins], dtype=I64)
    we = np.array([w[1] for w in wins], dtype=I64)
    pts = points(*a)
    out = measure_in_windows(a, ws, we)
    assert out.dtype == I64 and out.shape == ws.shape
    assert out.tolist() == [sum(1 for p in pts if lo <= p < hi) for lo, hi in wins]


# ---------------------------------------------------------------------------
# split_by_windows
# ---------------------------------------------------------------------------


class TestSplitByWindowsExamples:
    def test_basic(self):
        a = ([0, 10], [8, 20])
        idx, s, e = split_by_windows(a, [2, 6, 15, 30], [4, 12, 15, 40])
        assert idx.tolist() == [0, 1, 1]
        assert s.tolist() == [2, 6, 10]
        assert e.tolist() == [4, 8, 12]
        assert idx.dtype == I64 and s.dtype == I64 and e.dtype == I64

    def test_touching_windows_not_merged(self):
        idx, s, e = split_by_windows(([0], [10]), [0, 5], [5, 10])
        assert (idx.tolist(), s.tolist(), e.tolist()) == ([0, 1], [0, 5], [5, 10])

    def test_empty(self):
        for args in ((E(), [0], [5]), (([0], [5]), [], [])):
            idx, s, e = split_by_windows(*args)
            assert idx.size == s.size == e.size == 0
            assert idx.dtype == s.dtype == e.dtype == I64

    def test_rejects_overlapping_or_unsorted(self):
        with pytest.raises(ValueError):
            split_by_windows(([0], [10]), [0, 3], [5, 8])  # overlapping
        with pytest.raises(ValueError):
            split_by_windows(([0], [10]), [5, 0], [8, 3])  # unsorted
        with pytest.raises(ValueError):
            split_by_windows(([0], [10]), [5], [3])  # inverted
        with pytest.raises(ValueError):
            split_by_windows(([0], [10]), [5, 6], [3])  # shape mismatch


@HSETTINGS
@given(raw_intervals(), disjoint_windows())
def test_split_by_windows_matches_reference(a, wins):
    ws, we = wins
    idx, s, e = split_by_windows(a, ws, we)
    assert idx.dtype == s.dtype == e.dtype == I64
    assert np.all(e > s)
    pts = points(*a)
    expected: list[tuple[int, int, int]] = []
    for j, (lo, hi) in enumerate(zip(ws.tolist(), we.tolist())):
        rs, re_ = from_points({p for p in pts if lo <= p < hi})
        expected.extend((j, x, y) for x, y in zip(rs, re_))
    assert list(zip(idx.tolist(), s.tolist(), e.tolist())) == expected


# ---------------------------------------------------------------------------
# coverage_count
# ---------------------------------------------------------------------------


class TestCoverageCountExamples:
    def test_empty(self):
        b, c = coverage_count([], [])
        assert b.size == 0 and c.size == 0
        assert b.dtype == I64 and c.dtype == I64
        b, c = coverage_count([3], [3])
        assert b.size == 0 and c.size == 0

    def test_basic(self):
        b, c = coverage_count([0, 2, 10], [5, 4, 12])
        assert b.tolist() == [0, 2, 4, 5, 10, 12]
        assert c.tolist() == [1, 2, 1, 0, 1]

    def test_identical_counted_separately(self):
        b, c = coverage_count([0, 0, 0], [5, 5, 5])
        assert (b.tolist(), c.tolist()) == ([0, 5], [3])

    def test_touching_is_canonical(self):
        b, c = coverage_count([0, 5], [5, 10])
        assert (b.tolist(), c.tolist()) == ([0, 10], [1])

    def test_only_one_running(self):
        b, c = coverage_count([0, 3], [6, 9])
        sel = c == 1
        assert as_lists((b[:-1][sel], b[1:][sel])) == ([0, 6], [3, 9])


@HSETTINGS
@given(raw_intervals())
def test_coverage_count_matches_reference(a):
    b, c = coverage_count(*a)
    assert b.dtype == I64 and c.dtype == I64
    ref = [0] * (COORD_MAX + 2)
    for s, e in zip(a[0].tolist(), a[1].tolist()):
        for p in range(s, e):
            ref[p] += 1
    got = [0] * (COORD_MAX + 2)
    if b.size:
        assert c.size == b.size - 1
        assert np.all(np.diff(b) > 0)
        assert c[0] != 0 and c[-1] != 0  # canonical: ends are covered
        assert np.all(c[1:] != c[:-1])  # canonical: count changes at each boundary
        for lo, hi, k in zip(b[:-1].tolist(), b[1:].tolist(), c.tolist()):
            for p in range(lo, hi):
                got[p] = k
    else:
        assert c.size == 0
    assert got == ref
