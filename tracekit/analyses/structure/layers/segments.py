"""Automatic layers, steps 1-2 of docs/layers.md: cut every step at one boundary kernel and phase the segments.

Every step's main-stream kernels are cut at each occurrence of the boundary kernel; each segment is labelled by its
exact sequence of kernel names (``_labels``: a hash of the codes, checked against the segment before it); labels that
recur within a step and follow each other are linked, and the gcd of the label graph's cycle lengths gives ``k``, the
segments per layer, and each label its phase (``_label_phases``): ``phased_segments`` gives all of it for one
boundary kernel (``Phased``). ``groups`` and ``first_of`` are the one-sort groupings (``np.unique`` without its
overhead) these passes and the layer table run several times per candidate."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .sequences import Context, Flat

K_MAX = 16  # at most this many segments per layer
HASH_LENGTH = 0xD6E8FEB86659FD93  # a segment's length enters its hash times this (odd) constant


def groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What ``np.unique(key, return_index=True, return_inverse=True)`` gives as (first, inverse), from one stable
    argsort and without its checks and copies (it runs several times per boundary candidate), and that argsort's
    order: ``key[order]`` is sorted, equal keys in index order (so it also sorts the inverse stably). Also the mask
    of the sorted positions that open a group: ``key[order][new]`` are the distinct keys."""
    order = np.argsort(key, kind="stable")
    sk = key[order]
    new = np.empty(sk.size, dtype=bool)
    new[:1] = True
    np.not_equal(sk[1:], sk[:-1], out=new[1:])
    inv = np.empty(sk.size, dtype=np.int64)
    inv[order] = np.cumsum(new) - 1
    return order[new], inv, order, new


def first_of(key: np.ndarray) -> np.ndarray:
    """``np.unique(key, return_index=True)[1]``: the first position of each distinct key, in order of the keys."""
    order = np.argsort(key, kind="stable")
    sk = key[order]
    new = np.empty(sk.size, dtype=bool)
    new[:1] = True
    np.not_equal(sk[1:], sk[:-1], out=new[1:])
    return order[new]


def _phases(edges: set[tuple[int, int]]) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Per label: its component and its potential; per component: k (the gcd of the cycle lengths)."""
    adj: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for a, b in edges:
        adj[a].append((b, 1))
        adj[b].append((a, -1))
    comp: dict[int, int] = {}
    pot: dict[int, int] = {}
    gcds: dict[int, int] = {}
    for root in sorted(adj):
        if root in comp:
            continue
        cid = len(gcds)
        comp[root], pot[root] = cid, 0
        stack, g = [root], 0
        while stack:
            v = stack.pop()
            for w, d in adj[v]:
                if w not in comp:
                    comp[w], pot[w] = cid, pot[v] + d
                    stack.append(w)
                else:
                    g = math.gcd(g, abs(pot[v] + d - pot[w]))
        gcds[cid] = g
    return comp, pot, gcds


class LabelSeqs:
    """Label id -> its kernel name codes (a tuple), read from the label's first segment when first asked for."""

    def __init__(self, codes: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        self._codes, self._lo, self._hi = codes, lo, hi
        self._got: dict[int, tuple] = {}

    def __getitem__(self, lid: int) -> tuple:
        got = self._got.get(lid)
        if got is None:
            got = self._got[lid] = tuple(self._codes[self._lo[lid] : self._hi[lid]].tolist())
        return got

    def __len__(self) -> int:
        return len(self._lo)

    def lengths(self) -> np.ndarray:
        """Each label's length in kernels."""
        return self._hi - self._lo


@dataclass
class Segs:
    """The segments of every step for one boundary kernel, in order: kernel bounds a:b (positions in ctx.flat),
    the step (index into ctx.seqs), the label, whether the label recurs in the step, the phase (-1: none) and the
    component and its k (-1 and 0: none) of the label."""

    a: np.ndarray
    b: np.ndarray
    step: np.ndarray
    ids: np.ndarray
    rec: np.ndarray
    n_labels: int
    ph: np.ndarray = None
    comp: np.ndarray = None
    k: np.ndarray = None
    first: np.ndarray = None  # label id -> its first segment


def _segments(ctx: Context, token: int) -> Segs:
    """Every step cut at each occurrence of the token (and at its own ends), and each segment labelled by its exact
    sequence of kernel names: label ids in order of first appearance (_labels)."""
    fl = ctx.flat
    bounds = np.concatenate([fl.lo, fl.positions(token)])  # np.union1d of the two, without its unique's overhead
    bounds.sort(kind="stable")  # two sorted runs: merged in one pass (quicksort took 5-9x as long)
    bounds = bounds[np.concatenate([[True], bounds[1:] != bounds[:-1]])] if bounds.size else bounds
    a, b = bounds[:-1], bounds[1:]
    step = np.searchsorted(fl.lo, a, side="right") - 1
    ids, n_labels, first = _labels(fl, a, b)
    # a label recurs when it occurs at least twice in the step
    key = step * max(n_labels, 1) + ids
    if len(ctx.seqs) * n_labels <= 4 * key.size + 4096:  # few enough (step, label) pairs to count in one array
        rec = np.bincount(key, minlength=1)[key] >= 2
    else:
        _, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
        rec = counts[inv.reshape(-1)] >= 2
    return Segs(a, b, step, ids, rec, n_labels, first=first)


def _labels(fl: Flat, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Label ids 0.. in order of first appearance of the segments a:b (which tile fl.codes), equal ids for equal
    name sequences: grouped by a hash of the codes and the length, then every segment checked against the one before it
    in its group (Flat.equal); a hash collision (never seen) falls back to a dict of the code bytes. Also the first
    segment of each label."""
    if not a.size:
        return np.zeros(0, np.int64), 0, np.zeros(0, np.int64)
    size = (b - a).astype(np.uint64)
    # uint64 arrays wrap silently (no overflow check on integer arrays: no np.errstate needed)
    key = (fl.h_pre[b] - fl.h_pre[a]) * fl.h_pow[a] + size * np.uint64(HASH_LENGTH)
    first, inv, order, new = groups(key)  # order: the segments grouped, in order within a group
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first)] = np.arange(first.size, dtype=np.int64)
    ids = rank[inv]
    if np.array_equal(size[first][inv], size):
        # every segment equals the one before it in its group (and so the group's first): grouped, in order
        later = np.flatnonzero(~new[1:]) + 1
        j, before = order[later], order[later - 1]
        if fl.equal(a[j], b[j] - a[j], a[j] - a[before]):
            return ids, int(first.size), np.sort(first)
    labels: dict[bytes, int] = {}
    raw, width = fl.raw, fl.codes.itemsize
    ids = np.fromiter(
        (labels.setdefault(raw[x * width : y * width], len(labels)) for x, y in zip(a.tolist(), b.tolist())),
        dtype=np.int64,
        count=a.size,
    )
    return ids, len(labels), np.unique(ids, return_index=True)[1]


def _label_seqs(ctx: Context, segs: Segs) -> LabelSeqs:
    first = segs.first  # label ids are 0.. in order of first appearance
    return LabelSeqs(ctx.flat.codes, segs.a[first], segs.b[first])


def _edges(segs: Segs) -> set[tuple[int, int]]:
    """The label graph: consecutive recurring segments of a step, inserted in order of first occurrence (the set's
    iteration order, and so the components' numbering, is that of inserting every pair in segment order: a pair
    already in the set leaves it as it is, so every pair is inserted, repeats included)."""
    ids = segs.ids
    j = np.flatnonzero(segs.rec[:-1] & segs.rec[1:] & (segs.step[:-1] == segs.step[1:]))
    if j.size > 256:  # many pairs: their first occurrences only (the same set), found by one sort
        j = j[np.sort(first_of(ids[j] * max(int(ids.max(initial=0)) + 1, 1) + ids[j + 1]))]
    return set(zip(ids[j].tolist(), ids[j + 1].tolist()))


def _label_phases(ctx: Context, segs: Segs, n_labels: int):
    """Per label its component, k and phase (-1, 0, -1 outside every component with a period): the phase holding
    the mixer kernels' time opens a layer (else the phase that comes first in most steps)."""
    comp, pot, gcds = _phases(_edges(segs))
    k_of = {c: (g if 1 <= g <= K_MAX else 0) for c, g in gcds.items()}
    comp_l, pot_l = np.full(n_labels, -1, np.int64), np.zeros(n_labels, np.int64)
    if comp:
        lids = np.fromiter(comp.keys(), dtype=np.int64, count=len(comp))
        comp_l[lids] = np.fromiter(comp.values(), dtype=np.int64, count=len(comp))
        pot_l[lids] = np.fromiter((pot[x] for x in comp), dtype=np.int64, count=len(comp))
    k_arr = np.array([k_of[c] for c in range(len(gcds))] + [0], dtype=np.int64)
    k_l = k_arr[comp_l]  # comp -1 reads the trailing 0
    ids = segs.ids
    v = np.flatnonzero(segs.rec & (k_l[ids] > 0))
    c_v, k_v = comp_l[ids[v]], k_l[ids[v]]
    key = c_v * K_MAX + pot_l[ids[v]] % k_v
    mixer = (ctx.flat.mixer_cumsum[segs.b[v]] - ctx.flat.mixer_cumsum[segs.a[v]]).astype(np.float64)
    mixer_time = np.bincount(key, weights=mixer, minlength=len(gcds) * K_MAX)  # summed in segment order
    first = first_of(segs.step[v] * max(len(gcds), 1) + c_v)  # per step, each component's
    first_phase = np.bincount(key[first], minlength=len(gcds) * K_MAX)  # first segment
    start = np.zeros(len(gcds) + 1, dtype=np.int64)
    for c, k in k_of.items():
        if k:
            times = mixer_time[c * K_MAX : c * K_MAX + k]
            firsts = first_phase[c * K_MAX : c * K_MAX + k]
            start[c] = int(np.argmax(times)) if times.max() > 0 else int(np.argmax(firsts))
    phase_l = np.where(k_l > 0, (pot_l - start[comp_l]) % np.maximum(k_l, 1), -1)
    return comp_l, k_l, phase_l, k_of


@dataclass
class Phased:
    """One boundary kernel's segments with their labels and phases (steps 1-2): what ``_cover_bound`` reads and
    ``assemble`` goes on from."""

    token: int
    segs: Segs
    label_seq: LabelSeqs
    comp_l: np.ndarray
    phase_l: np.ndarray
    k_of: dict[int, int]


def phased_segments(ctx: Context, token: int) -> Phased:
    segs = _segments(ctx, token)
    label_seq = _label_seqs(ctx, segs)
    comp_l, k_l, phase_l, k_of = _label_phases(ctx, segs, segs.n_labels)
    segs.ph = np.where(segs.rec, phase_l[segs.ids], -1)
    segs.comp, segs.k = comp_l[segs.ids], k_l[segs.ids]
    return Phased(token, segs, label_seq, comp_l, phase_l, k_of)
