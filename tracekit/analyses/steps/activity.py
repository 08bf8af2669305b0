"""The trace's GPU activity and runtime launches, indexed once per step finding (:class:`StepActivity`), and what
was launched inside each CPU span — a marker's launch window — (:class:`Launches`): first and last GPU time, busy
time, CUDA-graph launches and the launches that left no GPU record. The dialect attempts of :mod:`.finder` and the
health checks of :mod:`.health` read them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ... import intervals as iv
from ... import schema
from ...events import kinds_mask, launch_index
from ...trace import Trace
from .model import StepRules


@dataclass
class Launches:
    """GPU activity launched inside each CPU span, per span."""

    start: np.ndarray  # first GPU start (int64; max int where none)
    end: np.ndarray  # last GPU end
    busy: np.ndarray  # union of the launched activity
    graphs: np.ndarray  # CUDA-graph launches inside the span
    graphs_empty: np.ndarray  # ... whose replay left no GPU event
    launched: np.ndarray  # kernel/copy/memset launches inside the span
    unrecorded: np.ndarray  # ... that left no GPU record
    act_span: np.ndarray  # per launched GPU activity: its span
    act_start: np.ndarray
    act_end: np.ndarray


def name_mask(names: pd.Series, test) -> np.ndarray:
    """``test(name)`` of each row's name as a bool array, evaluated once per distinct name."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    codes, uniques = pd.factorize(names, use_na_sentinel=False)
    hit = np.fromiter((bool(test(str(n))) for n in uniques), dtype=bool, count=len(uniques))
    return hit[codes]


def names_at(ev: pd.DataFrame, rows: np.ndarray, test) -> np.ndarray:
    """:func:`name_mask` of the names of the rows ``rows`` (row numbers), from the name codes: ``test`` runs once
    per name those rows use, and no row's name becomes a Python string."""
    col = ev["name"]
    codes = col.cat.codes.to_numpy()[rows]
    if codes.size == 0:
        return np.zeros(0, dtype=bool)
    cats = col.cat.categories
    # the sorted distinct codes (-1 first) by one count per category: np.unique sorted every row's code
    used = np.flatnonzero(np.bincount(codes.astype(np.int64) + 1, minlength=len(cats) + 1)) - 1
    hit = np.zeros(len(cats) + 1, dtype=bool)  # the last slot: a missing name, tested as its text, as before
    hit[used] = [bool(test(str(cats[c]) if c >= 0 else str(np.nan))) for c in used.tolist()]
    return hit[codes]


def _reused_ids(ids: np.ndarray) -> int:
    """How many ids occur more than once: counted over the ids' range when it is small (the usual correlation
    ids), else by np.unique's sort."""
    if ids.size == 0:
        return 0
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo <= 4 * ids.size + 4096:
        return int((np.bincount(ids - lo) > 1).sum())
    _, per_id = np.unique(ids, return_counts=True)
    return int((per_id > 1).sum())


class StepActivity:
    """Per-trace arrays every dialect attempt and health check uses (built once per compute)."""

    def __init__(self, trace: Trace, rules: StepRules):
        ev = trace.events
        self.trace, self.ev, self.rules = trace, ev, rules
        gpu = kinds_mask(ev, schema.GPU_ACTIVITY_KINDS)
        self.gpu = gpu
        rows = np.flatnonzero(gpu)
        self.gs = ev["start_ns"].to_numpy()[rows]
        self.ge = ev["end_ns"].to_numpy()[rows]
        self.gcorr = ev["correlation"].to_numpy()[rows]
        self.gkernel = kinds_mask(ev, ("kernel",))[rows]
        self.busy_set = iv.normalize(self.gs, self.ge)
        launch_kind = kinds_mask(ev, rules.launch_kinds)
        corr = ev["correlation"].to_numpy()
        lrows = np.flatnonzero(launch_kind & (corr >= 0))
        self.l_corr = corr[lrows].astype(np.int64, copy=False)
        self.l_start = ev["start_ns"].to_numpy()[lrows].astype(np.int64, copy=False)
        # the rules run once per distinct name, not per launch (10^5 launches of a handful of names)
        self.l_graph = names_at(ev, lrows, rules.graph_launch.search)
        self.reused_ids = _reused_ids(self.l_corr)  # ids that more than one launch carries
        self.l_gpu = names_at(ev, lrows, rules.gpu_launch.match)
        self.captures = int(names_at(ev, np.flatnonzero(launch_kind), rules.capture.match).sum())
        self.g_launch = self._match_launches()
        self.l_recorded = np.zeros(self.l_corr.size, dtype=bool)  # launches some GPU activity names
        self.l_recorded[self.g_launch[self.g_launch >= 0]] = True
        self._annotation_rows: dict[str, np.ndarray] = {}
        self._marker_names: dict[str, tuple] = {}
        self.no_marker_rows: pd.DataFrame | None = None  # finder's empty marker table, built once

    def annotation_rows(self, kind: str) -> np.ndarray:
        """Row numbers of the events of one kind (the markers: gpu_annotation, cpu_annotation), found once."""
        if kind not in self._annotation_rows:
            self._annotation_rows[kind] = np.flatnonzero(kinds_mask(self.ev, (kind,)))
        return self._annotation_rows[kind]

    def marker_names(self, kind: str) -> tuple[np.ndarray, np.ndarray, list[int], list[str]]:
        """The rows of one marker kind, their name codes, and the distinct names they use (codes and texts, by
        code), found once: every dialect attempt tests those few names, not the rows."""
        if kind not in self._marker_names:
            idx = self.annotation_rows(kind)
            col = self.ev["name"]
            codes = col.cat.codes.to_numpy()[idx]
            present = np.unique(codes[codes >= 0])  # only the names these rows use, not every kernel name
            texts = list(map(str, col.cat.categories.take(present).tolist()))
            self._marker_names[kind] = (idx, codes, present.tolist(), texts)
        return self._marker_names[kind]

    def _match_launches(self) -> np.ndarray:
        return launch_index(self.gs, self.gcorr, self.l_corr, self.l_start)

    def launch_time_of_gpu(self) -> np.ndarray:
        """Per GPU activity: the start of its launch (-1 when no launch is known)."""
        if self.l_start.size == 0:  # no runtime launch events (a GPU-only or a sampled trace)
            return np.full(self.gs.shape, -1, dtype=np.int64)
        return np.where(self.g_launch >= 0, self.l_start[np.clip(self.g_launch, 0, None)], -1)

    def launches_in(self, s: np.ndarray, e: np.ndarray) -> Launches:
        """Launch windows of CPU spans (sorted by start; they do not overlap in practice)."""
        n = s.size
        if n == 0:
            z = np.zeros(0, dtype=np.int64)
            return Launches(z, z, z, z, z, z, z, z, z, z)
        lt = self.launch_time_of_gpu()
        idx = np.searchsorted(s, lt, side="right") - 1
        inside = (lt >= 0) & (idx >= 0) & (lt < e[np.clip(idx, 0, None)])
        span, a_s, a_e = idx[inside], self.gs[inside], self.ge[inside]
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(first, span, a_s)
        np.maximum.at(last, span, a_e)
        busy = iv.measure_by_group(span, a_s, a_e, n)
        gidx = np.searchsorted(s, self.l_start, side="right") - 1
        ginside = self.l_graph & (gidx >= 0) & (self.l_start < e[np.clip(gidx, 0, None)])
        graphs = np.bincount(gidx[ginside], minlength=n)
        graphs_empty = np.bincount(gidx[ginside & ~self.l_recorded], minlength=n)
        linside = self.l_gpu & (gidx >= 0) & (self.l_start < e[np.clip(gidx, 0, None)])
        launched = np.bincount(gidx[linside], minlength=n)
        unrecorded = np.bincount(gidx[linside & ~self.l_recorded], minlength=n)
        return Launches(first, last, busy, graphs, graphs_empty, launched, unrecorded, span, a_s, a_e)


__all__ = ["Launches", "StepActivity", "name_mask", "names_at"]
