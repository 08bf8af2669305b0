"""Automatic layers: one boundary kernel's layers as arrays (``_LayerTable``), made run by run (``_LayerPieces``).

Every candidate boundary kernel is assembled while the boundary is chosen, and all but one are dropped: their layers
stay arrays (bounds, signature ids, runs) that the choice measures in numpy passes; the ``_Layer`` objects are made
only for the chosen assembly (``_LayerTable.layers``). A signature (the labels of a layer's segments) is a tuple made
once per distinct signature, not once per layer."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


def _groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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


def _first_of(key: np.ndarray) -> np.ndarray:
    """``np.unique(key, return_index=True)[1]``: the first position of each distinct key, in order of the keys."""
    order = np.argsort(key, kind="stable")
    sk = key[order]
    new = np.empty(sk.size, dtype=bool)
    new[:1] = True
    np.not_equal(sk[1:], sk[:-1], out=new[1:])
    return order[new]


@dataclass
class _Layer:
    lo: int  # first main-stream kernel (index into the step's sequence)
    hi: int  # one past the last
    sig: tuple  # the labels of its segments (phase 0 first)
    run: int
    exact: bool = True  # every segment has a recurring label
    note: str = ""


@dataclass
class _LayerTable:
    """Every layer of an assembly in order (by step, in the order of ctx.seqs, then by first kernel): the step (index
    into ctx.seqs), the kernel bounds within the step's sequence, the signature id (sigs[id] is the tuple), the run,
    whether it is exact and its note."""

    step: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sig: np.ndarray
    run: np.ndarray
    exact: np.ndarray
    note: list[str]
    sigs: list[tuple]

    @cached_property
    def sig_first(self) -> np.ndarray:
        """The first layer of each distinct signature (one per layer type)."""
        return _first_of(self.sig)

    def layers(self, step_ids: list[int]) -> dict[int, list[_Layer]]:
        """step id -> its layers (every step, [] without layers)."""
        out: dict[int, list[_Layer]] = {s: [] for s in step_ids}
        sigs = self.sigs
        for st, lo, hi, sg, run, ex, note in zip(
            self.step.tolist(),
            self.lo.tolist(),
            self.hi.tolist(),
            self.sig.tolist(),
            self.run.tolist(),
            self.exact.tolist(),
            self.note,
        ):
            out[step_ids[st]].append(_Layer(lo, hi, sigs[sg], run, ex, note))
        return out


class _LayerPieces:
    """The layers of one assembly as they are cut, run by run (``add``), then one ``_LayerTable`` (``done``)."""

    def __init__(self):
        self.parts: list[tuple] = []
        self.sig_of: dict[tuple, int] = {}
        self.sigs: list[tuple] = []

    def _intern(self, sig: tuple) -> int:
        got = self.sig_of.get(sig)
        if got is None:
            got = self.sig_of[sig] = len(self.sigs)
            self.sigs.append(sig)
        return got

    def sig_ids(self, lab: np.ndarray, starts: np.ndarray, ends: np.ndarray, prefix: tuple) -> np.ndarray:
        """The signature ids of the layers lab[starts[i]:ends[i]] (the first one after ``prefix``): per length, the
        rows keyed by one integer (the labels as digits, when they fit in 62 bits; else numpy's row unique), and
        the distinct rows made into tuples once."""
        lens = ends - starts
        out = np.empty(lens.size, dtype=np.int64)
        base = int(lab.max(initial=0)) + 1
        for m in sorted(set(lens.tolist())):
            rows = np.flatnonzero(lens == m)
            mat = lab[starts[rows][:, None] + np.arange(m)]
            if base**m < 1 << 62:  # exact in int64
                key = mat @ (base ** np.arange(m - 1, -1, -1, dtype=np.int64))
                first, inv, _, _ = _groups(key)
                uniq = mat[first]
            else:
                uniq, inv = np.unique(mat, axis=0, return_inverse=True)
            ids = np.array([self._intern(tuple(r)) for r in uniq.tolist()], dtype=np.int64)
            out[rows] = ids[inv.reshape(-1)]
        if prefix:
            out[0] = self._intern(tuple(prefix) + tuple(lab[starts[0] : ends[0]].tolist()))
        return out

    def add(
        self, step: int, lo: np.ndarray, hi: np.ndarray, sig: np.ndarray, run: int, exact: np.ndarray, note: str
    ) -> None:
        self.parts.append((step, lo, hi, sig, run, exact, note))

    def done(self) -> _LayerTable:
        """The table, sorted by step and first kernel (stable: a run's layers in order)."""
        if not self.parts:
            z = np.zeros(0, np.int64)
            return _LayerTable(z, z, z, z, z, np.zeros(0, bool), [], self.sigs)
        sizes = [p[1].size for p in self.parts]
        step = np.repeat(np.array([p[0] for p in self.parts], np.int64), sizes)
        lo = np.concatenate([p[1] for p in self.parts]).astype(np.int64)
        hi = np.concatenate([p[2] for p in self.parts]).astype(np.int64)
        sig = np.concatenate([p[3] for p in self.parts])
        run = np.repeat(np.array([p[4] for p in self.parts], np.int64), sizes)
        exact = np.concatenate([p[5] for p in self.parts]).astype(bool)
        note = np.full(lo.size, "", dtype=object)
        note[np.cumsum([0] + sizes[:-1])] = [p[6] for p in self.parts]
        order = np.lexsort((lo, step))
        return _LayerTable(
            step[order], lo[order], hi[order], sig[order], run[order], exact[order], note[order].tolist(), self.sigs
        )
