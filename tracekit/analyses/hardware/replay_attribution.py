"""Which op each kernel that a CUDA/HIP graph replayed came from: the attribution of replayed kernels, decided here
once and used by every analysis through :func:`.kernel_ops.kernel_ops` (docs/replay.md).

A graph launch replays kernels that have no launching op. Their op is found in the trace of the graph's **capture**
(:mod:`tracekit.ingest.captures`), where each kernel was launched by an op with its ``Input Dims``, ``Input type``
and ``nn.Module`` scope, or in an eager (graph-off) trace of the same model. Sources, best first:

1. ``node_id``: the replayed kernels' graph node ids (the events table's ``graph_node_id``, Kineto's ``graph node
   id`` arg) joined to the capture launches' node ids: exact, where the kernel names agree and the node id is in
   one capture only.
2. ``capture``: each replay's kernel sequence (one graph launch, one stream) aligned to the launched-kernel sequence
   of each graph the captures hold (one per ``…BeginCapture`` … ``…EndCapture``; a capture without those markers
   is one graph). The alignment (a longest common subsequence of the name codes, then each
   kernel left over matched to a launch of the same name within :data:`REORDER_WINDOW` launches of where the
   alignment puts it) tolerates kernels the profiler dropped, launch records the capture lost or wrote out of
   order, copies and memsets (neither side holds them: they are not kernel launches) and launches of other
   streams. PIECEWISE replays (several graphs per step, eager attention between) are each aligned to the piece they
   match; where pieces tie (identical layers), the piece whose place in the capture is the replay's place in its
   step. Each distinct sequence is aligned once, however many steps replay it; the kernels are then assigned with
   arrays.
3. ``eager_map``: an eager (graph-off) trace of the same model (``--eager-map``): the replayed kernels of each step
   aligned as one sequence to the kernels of the eager trace's first step, each taking the op that launched its
   eager counterpart.

A capture is used for a replay only if its batch size is the replay's: the replay's from the step annotation that
holds the graph launch (vLLM's ``execute_32_…``), the capture's from ``execution_details.json`` or its own
annotation (``capture_32_FULL``) — patterns in ``tracekit/data/replay.json``; with grids on both sides, the grids of
the aligned kernels must agree. An alignment that matches under ``min_score`` of the replay's kernels, or captures
of different batch sizes that align equally well, are refused with a sentence, never guessed; what is not attributed
is counted and why.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...launch_apis import is_graph_launch
from ...errors import DataFileError, InputError
from ...ingest.captures import RECORD_HINT, CaptureRef, CaptureTrace, find_captures, load_capture
from ...ingest.graph_annotations import (
    ANNOTATIONS_KEY,
    REPLAY_DERIVED,
    GraphAnnotations,
    find_annotations,
    read_annotations,
    use_graph_annotations,
)
from ...trace import Trace

LCS_CELLS = 16_000_000  # sequence x target sizes aligned exactly (an int32 table of 64 MB at most)
REORDER_WINDOW = 2  # a leftover kernel matches a same-name launch at most this many launches from its expected place
SOURCES_KEY = "replay_sources"
DERIVED_KEYS = REPLAY_DERIVED


@dataclass(frozen=True)
class ReplayRules:
    """``tracekit/data/replay.json``, compiled."""

    replay_batch: tuple[re.Pattern, ...]
    capture_batch: tuple[re.Pattern, ...]
    min_score: float
    grid_agree: float


@lru_cache(maxsize=1)
def replay_rules() -> ReplayRules:
    """The batch-size patterns and thresholds of the attribution (``tracekit/data/replay.json``), checked."""
    src = "tracekit/data/replay.json"
    try:
        doc = json.loads(resources.files("tracekit.data").joinpath("replay.json").read_text(encoding="utf-8"))
        rules = ReplayRules(
            tuple(re.compile(p["pattern"]) for p in doc["replay_batch"]),
            tuple(re.compile(p["pattern"]) for p in doc["capture_batch"]),
            float(doc["min_score"]),
            float(doc["grid_agree"]),
        )
        if any(p.groups < 1 for p in rules.replay_batch + rules.capture_batch):
            raise ValueError("a pattern has no group for the batch size")
    except (KeyError, TypeError, ValueError, re.error) as exc:
        raise DataFileError(f"{src} is invalid ({exc}); see docs/replay.md") from exc
    return rules


def batch_size_of(name: str, patterns) -> int:
    """The batch size the first matching pattern's group 1 names in ``name`` (-1: none matches)."""
    for p in patterns:
        m = p.search(name)
        if m:
            return int(m.group(1))
    return -1


@dataclass(frozen=True)
class ReplaySources:
    """Where replayed kernels' ops come from: ``capture`` paths (files or folders; empty: ``capture_traces/`` beside
    the trace) and ``eager_map`` (an eager trace of the same model, or None)."""

    capture: tuple[str, ...] = ()
    eager_map: str | None = None
    cache: bool = field(default=True, compare=False)
    cache_dir: str | None = field(default=None, compare=False)


def use_replay_sources(
    trace: Trace, capture=None, eager_map=None, *, cache: bool = True, cache_dir=None, graph_annotations=None
) -> None:
    """Resolve the replay sources of ``trace`` once (the API's ``capture=`` and ``eager_map=``, the CLI's
    ``--capture`` and ``--eager-map``); what was derived with other sources is dropped. ``graph_annotations`` (a
    side file, ``--graph-annotations``): see :func:`use_graph_annotations` (None: as set before)."""
    if graph_annotations is not None:
        use_graph_annotations(trace, graph_annotations)
    if capture is None:
        paths: tuple[str, ...] = ()
    elif isinstance(capture, (str, Path)):
        paths = (str(capture),)
    else:
        paths = tuple(str(p) for p in capture)
    if eager_map is not None and not Path(eager_map).is_file():
        raise InputError(f"--eager-map {eager_map}: no such file; pass an eager (graph-off) trace of the same model")
    src = ReplaySources(
        paths, None if eager_map is None else str(eager_map), cache, None if cache_dir is None else str(cache_dir)
    )
    if trace.derived.get(SOURCES_KEY, ReplaySources()) != src:
        for k in DERIVED_KEYS:
            trace.derived.pop(k, None)
        trace.derived[SOURCES_KEY] = src
    elif SOURCES_KEY not in trace.derived:
        trace.derived[SOURCES_KEY] = src


@dataclass
class ReplayAttribution:
    """Per replayed kernel (``pos``: positions in the kernel rows of :func:`.linking.launching_ops`, in row order):
    the source it was attributed from (``capture``: an index into ``captures``, -1: none; the eager trace of
    ``--eager-map`` is one of them, with ``ref.source == "eager_map"``), that trace's launch and op rows, how
    (``by``: "node_id", "capture", "eager_map" or None), the agreement score of its replay's alignment (1.0 for a
    node id), and why not where it was not. ``groups``: one row per (graph launch, stream)."""

    pos: np.ndarray
    capture: np.ndarray
    launch_row: np.ndarray
    op_row: np.ndarray
    by: np.ndarray
    score: np.ndarray
    why: np.ndarray
    captures: list[CaptureTrace] = field(default_factory=list)
    groups: pd.DataFrame | None = None
    hint: str | None = None  # one sentence when nothing could be attributed at all
    module: np.ndarray | None = None  # per replayed kernel: its module from PyTorch's graph annotations, or None
    annotations: GraphAnnotations | None = None  # the graph kernel annotations read (None: no side file)

    @property
    def attributed(self) -> np.ndarray:
        return self.capture >= 0


def _empty(pos: np.ndarray, why: str | None, hint: str | None, captures=()) -> ReplayAttribution:
    n = pos.size
    return ReplayAttribution(
        pos,
        np.full(n, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.full(n, None, dtype=object),
        np.full(n, np.nan),
        np.full(n, why, dtype=object),
        list(captures),
        None,
        hint,
    )


def graph_kernels(ev: pd.DataFrame, launch: np.ndarray) -> np.ndarray:
    """Per kernel (its launch row, -1: none): whether a graph launch (``cudaGraphLaunch``, ``hipGraphLaunch``)
    replayed it; decided per distinct launch name."""
    out = np.zeros(launch.size, dtype=bool)
    has = launch >= 0
    if has.any():
        col = ev["name"]
        if not isinstance(col.dtype, pd.CategoricalDtype):
            col = col.astype("category")
        codes = col.cat.codes.to_numpy()[launch[has]]
        is_graph = np.array([is_graph_launch(c) for c in col.cat.categories] + [False], dtype=bool)
        out[has] = is_graph[codes]
    return out


def attribute(trace: Trace, krow: np.ndarray, launch: np.ndarray) -> ReplayAttribution:
    """The attribution of the replayed kernels among ``krow`` (launch rows ``launch``), with the trace's sources."""
    pos = np.flatnonzero(graph_kernels(trace.events, launch))
    src = trace.derived.get(SOURCES_KEY, ReplaySources())
    if not pos.size:
        return _empty(pos, None, None)
    refs = find_captures(trace.path, src.capture)
    if not refs and src.eager_map is None:
        hint = f"no capture trace of their graphs is beside the trace; {RECORD_HINT}"
        return _with_annotations(trace, krow, _empty(pos, "no capture trace", hint))
    caps = [load_capture(r, cache=src.cache, cache_dir=src.cache_dir) for r in refs]
    vocab: dict[str, int] = {}
    rep = _Replays(trace, krow, launch, pos, vocab)
    res = _empty(pos, "no capture trace" if not caps else None, None, caps)
    n_groups = rep.n_groups
    gcol: dict[str, np.ndarray] = {
        "capture": np.full(n_groups, None, dtype=object),
        "graph": np.full(n_groups, None, dtype=object),
        "score": np.full(n_groups, np.nan),
        "why": np.full(n_groups, None, dtype=object),
    }
    if caps:
        index = [_CaptureIndex(c, vocab) for c in caps]
        _by_node_id(res, rep, index)
        _by_capture(res, rep, index, gcol)
    if src.eager_map is not None:
        _by_eager_map(res, rep, src, gcol)
    res.groups = pd.DataFrame(
        {
            "launch_row": rep.launch_of_group,
            "stream": rep.stream_of_group,
            "kernels": np.bincount(rep.group, minlength=n_groups).astype(np.int64),
            "matched": np.bincount(rep.group[res.capture >= 0], minlength=n_groups).astype(np.int64),
            **gcol,
        }
    )
    return _with_annotations(trace, krow, res)


# ----------------------------------------------------------------------------------------------- the replays


class _Replays:
    """The replayed kernels of a trace grouped per (graph launch, stream), kernels in time (row) order within each:
    name codes (shared with the captures through ``vocab``), grids, node ids, and per group the batch size its step
    annotation names, the step and the launch's place among its step's graph launches."""

    def __init__(self, trace: Trace, krow, launch, pos, vocab: dict[str, int]) -> None:
        ev = trace.events
        self.ev = ev
        self.rows = krow[pos]
        lr = launch[pos]
        self.lr = lr
        stream = ev["stream"].to_numpy()[self.rows]
        col = ev["name"] if isinstance(ev["name"].dtype, pd.CategoricalDtype) else ev["name"].astype("category")
        cats = col.cat.categories
        codes = col.cat.codes.to_numpy()[self.rows]
        used = np.unique(codes[codes >= 0])
        cat_id = np.full(len(cats) + 1, -1, dtype=np.int64)
        for c in used.tolist():  # the distinct replayed kernel names, not the kernels
            cat_id[c] = vocab.setdefault(str(cats[c]), len(vocab))
        self.ids = cat_id[codes]
        self.grid = np.stack([ev[f"grid_{a}"].to_numpy()[self.rows] for a in "xyz"], axis=1)
        self.node = (
            ev["graph_node_id"].to_numpy()[self.rows]
            if "graph_node_id" in ev.columns
            else np.full(self.rows.size, -1, dtype=np.int64)
        )
        # groups numbered in order of first appearance; per kernel its group and its place in it
        self.group = pd.factorize(lr.astype(np.int64) * (1 << 20) + (stream & ((1 << 20) - 1)))[0].astype(np.int64)
        self.order = np.argsort(self.group, kind="stable")  # the kernels group by group, each in row order
        self.count = np.bincount(self.group).astype(np.int64)
        self.start = np.concatenate(([0], np.cumsum(self.count)[:-1])).astype(np.int64)  # group's first in order
        self.n_groups = int(self.count.size)
        self.within = np.empty(self.rows.size, dtype=np.int64)
        self.within[self.order] = np.arange(self.rows.size) - np.repeat(self.start, self.count)
        first = self.order[self.start]
        self.launch_of_group = lr[first].astype(np.int64)
        self.stream_of_group = stream[first].astype(np.int64)
        at = ev["start_ns"].to_numpy()[self.launch_of_group]
        self.hint, self.step = _step_of(ev, at)
        self.ordinal = _ordinal(self.step, at, self.launch_of_group)
        self.kernel_hint = self.hint[self.group]

    def part(self, gi: int) -> np.ndarray:
        """The kernels (positions) of group ``gi``, in row order."""
        return self.order[self.start[gi] : self.start[gi] + self.count[gi]]


def _step_of(ev: pd.DataFrame, at_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per graph launch time: (the batch size the step annotation holding it names, the annotation's row); -1, -1
    where no annotation that names a batch size holds it."""
    bs_out = np.full(at_ns.size, -1, dtype=np.int64)
    step_out = np.full(at_ns.size, -1, dtype=np.int64)
    ann = np.flatnonzero((ev["kind"] == "cpu_annotation").to_numpy())
    if not ann.size:
        return bs_out, step_out
    pats = replay_rules().replay_batch
    col = ev["name"] if isinstance(ev["name"].dtype, pd.CategoricalDtype) else ev["name"].astype("category")
    codes = col.cat.codes.to_numpy()[ann]
    used = np.unique(codes[codes >= 0])
    by_code = np.full(len(col.cat.categories) + 1, -1, dtype=np.int64)
    for c in used.tolist():  # per distinct annotation name, not per annotation
        by_code[c] = batch_size_of(str(col.cat.categories[c]), pats)
    bs = by_code[codes]
    keep = bs >= 0
    if not keep.any():
        return bs_out, step_out
    rows = ann[keep]
    s, e, b = ev["start_ns"].to_numpy()[rows], ev["end_ns"].to_numpy()[rows], bs[keep]
    order = np.argsort(s, kind="stable")
    rows, s, e, b = rows[order], s[order], e[order], b[order]
    j = np.searchsorted(s, at_ns, side="right") - 1
    ok = (j >= 0) & (e[np.clip(j, 0, None)] >= at_ns)
    bs_out[ok] = b[j[ok]]
    step_out[ok] = rows[j[ok]]
    return bs_out, step_out


def _ordinal(step: np.ndarray, at: np.ndarray, launch: np.ndarray) -> np.ndarray:
    """Per group: the place of its graph launch among the distinct graph launches of its step (-1: no step)."""
    out = np.full(step.size, -1, dtype=np.int64)
    has = step >= 0
    if not has.any():
        return out
    key = pd.DataFrame({"step": step[has], "at": at[has], "launch": launch[has]})
    distinct = key.drop_duplicates("launch").sort_values(["step", "at"], kind="stable")
    distinct["ordinal"] = distinct.groupby("step").cumcount()
    out[has] = key["launch"].map(distinct.set_index("launch")["ordinal"]).to_numpy()
    return out


# ----------------------------------------------------------------------------------------------- the captures


class _CaptureIndex:
    """One capture (or eager trace) made ready to align: its batch size, its launches' name codes, grids, node ids
    and launching ops, and its graphs (one per Begin/EndCapture, in capture order)."""

    def __init__(self, c: CaptureTrace, vocab: dict[str, int], *, whole: bool = False) -> None:
        from .linking import ops_holding

        self.cap = c
        ev = c.trace.events
        rows = c.launch_rows
        self.bs = c.ref.batch_size if c.ref.batch_size is not None else _capture_batch(ev)
        self.ids = np.array([vocab.setdefault(n, len(vocab)) for n in c.launch_kernel.tolist()], dtype=np.int64)
        self.grid = np.stack([ev[f"grid_{a}"].to_numpy()[rows] for a in "xyz"], axis=1)
        self.ops = ops_holding(ev, rows) if rows.size else np.empty(0, dtype=np.int64)
        self.node = c.launch_node
        self.graphs = [] if whole else _segments(ev, rows)


def _capture_batch(ev: pd.DataFrame) -> int | None:
    """The batch size a capture trace's own annotation names (vLLM's ``capture_32_FULL``), or None."""
    ann = ev.loc[(ev["kind"] == "cpu_annotation").to_numpy(), "name"]
    pats = replay_rules().capture_batch
    for name in pd.unique(ann.astype(str)).tolist():  # a handful of distinct annotation names
        bs = batch_size_of(name, pats)
        if bs >= 0:
            return bs
    return None


def _segments(ev: pd.DataFrame, rows: np.ndarray) -> list[np.ndarray]:
    """The launches of each captured graph (positions into ``rows``), in capture order."""
    if not rows.size:
        return []
    start = ev["start_ns"].to_numpy()[rows]
    names = ev["name"].astype(str).to_numpy()
    rt = np.flatnonzero((ev["kind"] == "runtime").to_numpy())
    begin = rt[np.char.find(names[rt].astype(str), "BeginCapture") >= 0]
    end = rt[np.char.find(names[rt].astype(str), "EndCapture") >= 0]
    if not begin.size:
        return [np.arange(rows.size)]
    b = np.sort(ev["start_ns"].to_numpy()[begin])
    e = np.sort(ev["end_ns"].to_numpy()[end]) if end.size else np.full(b.size, np.iinfo(np.int64).max)
    seg = np.searchsorted(b, start, side="right") - 1
    close = np.searchsorted(e, b[np.clip(seg, 0, None)], side="left")
    inside = (seg >= 0) & ((close >= e.size) | (start <= e[np.clip(close, 0, max(e.size - 1, 0))]))
    seg = np.where(inside, seg, -1)
    return [np.flatnonzero(seg == s) for s in np.unique(seg[seg >= 0]).tolist()]


def _lcs(seq: np.ndarray, target: np.ndarray) -> np.ndarray:
    """A longest common subsequence of two code sequences, as ``seq``'s positions' indices into ``target`` (-1:
    unmatched): the table a row at a time in numpy, then one walk back (matches preferred, latest first)."""
    n, m = seq.size, target.size
    table = np.zeros((n + 1, m + 1), dtype=np.int32)
    for i in range(1, n + 1):  # one numpy pass per kernel of the (short) sequence
        prev = table[i - 1]
        row = np.maximum(prev[1:], np.where(target == seq[i - 1], prev[:-1] + 1, 0))
        table[i, 1:] = np.maximum.accumulate(row)
    to = np.full(n, -1, dtype=np.int64)
    i, j = n, m
    while i > 0 and j > 0:
        if seq[i - 1] == target[j - 1] and table[i, j] == table[i - 1, j - 1] + 1:
            to[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif table[i - 1, j] >= table[i, j - 1]:
            i -= 1
        else:
            j -= 1
    return to


def align(seq: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per position of ``seq`` (name codes) the index into ``target`` it aligns to (-1: none): a longest common
    subsequence (for sequences over :data:`LCS_CELLS` cells, the longest matching blocks of
    :class:`difflib.SequenceMatcher`), then each kernel left over matched to an unused ``target`` position with its
    name within :data:`REORDER_WINDOW` of where its aligned neighbours put it (a launch recorded out of order)."""
    if seq.size * target.size <= LCS_CELLS:
        to = _lcs(seq, target)
    else:
        sm = difflib.SequenceMatcher(None, seq.tolist(), target.tolist(), autojunk=False)
        to = np.full(seq.size, -1, dtype=np.int64)
        for a, b, size in sm.get_matching_blocks():
            to[a : a + size] = np.arange(b, b + size)
    left = np.flatnonzero(to < 0)
    if not left.size or left.size == seq.size:
        return to
    used = np.zeros(target.size, dtype=bool)
    used[to[to >= 0]] = True
    ok = np.flatnonzero(to >= 0)
    for i in left.tolist():  # the few kernels the blocks left over
        k = np.searchsorted(ok, i)
        before = int(to[ok[k - 1]]) + (i - int(ok[k - 1])) if k > 0 else int(to[ok[0]]) - (int(ok[0]) - i)
        lo, hi = max(before - REORDER_WINDOW - 1, 0), min(before + REORDER_WINDOW + 1, target.size)
        cand = lo + np.flatnonzero((target[lo:hi] == seq[i]) & ~used[lo:hi])
        if cand.size:
            j = int(cand[np.argmin(np.abs(cand - before))])
            to[i] = j
            used[j] = True
    return to


# ----------------------------------------------------------------------------------------------- the sources


def _by_node_id(res: ReplayAttribution, rep: _Replays, index: list[_CaptureIndex]) -> None:
    """Source 1: each replayed kernel whose graph node id is one capture launch's, with the same kernel name (and no
    other batch size than the replay's): exact."""
    want = np.flatnonzero(rep.node >= 0)
    if not want.size:
        return
    ci = np.concatenate([np.full(ix.node.size, k, dtype=np.int64) for k, ix in enumerate(index)])
    li = np.concatenate([np.arange(ix.node.size, dtype=np.int64) for ix in index])
    node = np.concatenate([ix.node for ix in index])
    ids = np.concatenate([ix.ids for ix in index])
    keep = node >= 0
    if not keep.any():
        return
    ci, li, node, ids = ci[keep], li[keep], node[keep], ids[keep]
    uniq, first, count = np.unique(node, return_index=True, return_counts=True)
    k = np.searchsorted(uniq, rep.node[want])
    k = np.clip(k, 0, uniq.size - 1)
    hit = (uniq[k] == rep.node[want]) & (count[k] == 1)  # a node id in two captures (two processes): not exact
    j = first[k]
    bs = np.array([-1 if ix.bs is None else ix.bs for ix in index], dtype=np.int64)[ci[j]]
    hint = rep.kernel_hint[want]
    hit &= (ids[j] == rep.ids[want]) & ((hint < 0) | (bs < 0) | (bs == hint))
    at, j = want[hit], j[hit]
    for c in np.unique(ci[j]).tolist():  # per capture used
        m = ci[j] == c
        res.capture[at[m]] = c
        res.launch_row[at[m]] = index[c].cap.launch_rows[li[j[m]]]
        res.op_row[at[m]] = index[c].ops[li[j[m]]]
    res.by[at] = "node_id"
    res.score[at] = 1.0
    res.why[at] = None


@dataclass
class _Graph:
    ci: int
    seg: int
    at: np.ndarray  # positions into the capture's launches
    ids: np.ndarray
    grid: np.ndarray
    names: frozenset
    key: bytes = b""  # ``ids`` as bytes: graphs of the same sequence share their alignments


def _by_capture(res: ReplayAttribution, rep: _Replays, index: list[_CaptureIndex], gcol: dict) -> None:
    """Source 2: each replay that has kernels left aligned to the captured graph it matches (see the module); each
    distinct (sequence, batch size, place in the step) aligned once, its kernels in every step assigned at once."""
    graphs = [
        _Graph(c, s, at, ix.ids[at], ix.grid[at], frozenset(ix.ids[at].tolist()), ix.ids[at].tobytes())
        for c, ix in enumerate(index)
        for s, at in enumerate(ix.graphs)
    ]
    left = np.bincount(rep.group[res.capture < 0], minlength=rep.n_groups) > 0
    gcol["score"][~left] = 1.0  # every kernel joined by its node id
    key, key_groups = _sequence_keys(rep, left)
    todo = np.flatnonzero((res.capture < 0) & (key[rep.group] >= 0))
    kkey = key[rep.group[todo]]
    by_key = np.split(
        todo[np.argsort(kkey, kind="stable")], np.cumsum(np.bincount(kkey, minlength=len(key_groups)))[:-1]
    )
    memo: dict[tuple, np.ndarray] = {}  # one alignment per distinct (sequence, captured graph's sequence)
    for sel, kern in zip(key_groups, by_key):  # per distinct sequence: its groups, and their kernels left
        first = rep.part(int(sel[0]))
        hint, ordinal = int(rep.hint[sel[0]]), int(rep.ordinal[sel[0]])
        gsel, to, score, why = _choose(rep.ids[first], rep.grid[first], graphs, index, hint, ordinal, memo)
        res.score[kern] = score
        gcol["score"][sel] = score
        if gsel is None:
            res.why[kern] = why
            gcol["why"][sel] = why
            continue
        g = graphs[gsel]
        ix = index[g.ci]
        t = to[rep.within[kern]]
        ok = t >= 0
        at = kern[ok]
        lpos = g.at[t[ok]]
        res.capture[at] = g.ci
        res.launch_row[at] = ix.cap.launch_rows[lpos]
        res.op_row[at] = ix.ops[lpos]
        res.by[at] = "capture"
        res.why[at] = None
        res.why[kern[~ok]] = "not in the capture (aligned around)"
        gcol["capture"][sel] = ix.cap.ref.path.name
        gcol["graph"][sel] = g.seg


def _sequence_keys(rep: _Replays, left: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per group: which distinct (kernel sequence, batch size hint, place in the step) it has among the groups in
    ``left`` (-1: not in ``left``), numbered in order of first appearance; and each key's groups, ascending. Groups
    are keyed by their length and two polynomial hashes of their name codes, all at once, and every group's sequence
    is then compared with its key's first group's, kernel by kernel: a hash collision falls back to keying each
    group by its bytes."""
    key = np.full(rep.n_groups, -1, dtype=np.int64)
    gl = np.flatnonzero(left)
    if not gl.size:
        return key, []
    ids = rep.ids[rep.order]  # the kernels group by group
    w = rep.within[rep.order]
    code = ids.astype(np.uint64) + np.uint64(1)
    mix = np.uint64(0x100000001B3)
    h = np.zeros(gl.size, dtype=np.uint64)  # uint64 arithmetic wraps: the hash is an exact function of the key
    for col in (rep.count[gl], rep.hint[gl], rep.ordinal[gl]):
        h = h * mix + col.astype(np.uint64)
    for base in (1_000_003, 0x9E3779B97F4A7C15):  # two polynomial hashes of the sequence
        tab = np.ones(int(rep.count.max()), dtype=np.uint64)  # base ** position
        tab[1:] = np.cumprod(np.full(tab.size - 1, base, dtype=np.uint64), dtype=np.uint64)
        h = h * mix + np.add.reduceat(code * tab[w], rep.start)[gl]
    kl = pd.factorize(h)[0].astype(np.int64)  # numbered in order of first appearance
    key[gl] = kl
    head = gl[np.unique(kl, return_index=True)[1]]  # each key's first group
    hg = head[kl]
    same = all(np.array_equal(c[gl], c[hg]) for c in (rep.count, rep.hint, rep.ordinal))
    j = np.flatnonzero(key[rep.group[rep.order]] >= 0)  # every kernel of a left group, in group order
    ref = rep.start[head[key[rep.group[rep.order[j]]]]] + w[j]
    if not (same and np.array_equal(ids[j], ids[ref])):  # a collision: key by the sequences' bytes instead
        key[:] = -1
        seen: dict[tuple, int] = {}
        for gi in gl.tolist():
            k = (rep.ids[rep.part(gi)].tobytes(), int(rep.hint[gi]), int(rep.ordinal[gi]))
            key[gi] = seen.setdefault(k, len(seen))
    order = np.argsort(key[gl], kind="stable")
    groups = np.split(gl[order], np.cumsum(np.bincount(key[gl], minlength=int(key.max()) + 1))[:-1])
    return key, groups


def _choose(
    seq, kgrid, graphs: list[_Graph], index: list[_CaptureIndex], hint_bs: int, ordinal: int, memo: dict | None = None
):
    """The captured graph a replay sequence came from: (graph index or None, alignment, score, why not); ``memo``
    keeps each (sequence, graph sequence) alignment for the next sequence that asks."""
    rules = replay_rules()
    if not graphs:
        return None, None, np.nan, "the capture traces hold no kernel launches"
    cand = list(range(len(graphs)))
    sizes = {index[graphs[i].ci].bs for i in cand}
    if hint_bs >= 0 and sizes - {None}:
        cand = [i for i in cand if index[graphs[i].ci].bs in (hint_bs, None)]
        if not cand:
            known = ", ".join(str(s) for s in sorted(sizes - {None}))
            return None, None, np.nan, f"no capture of batch size {hint_bs} (captures: {known})"
    present = set(seq.tolist())
    scored = []
    for i in cand:
        g = graphs[i]
        if present.isdisjoint(g.names):
            continue
        if memo is None:
            to = align(seq, g.ids)
        else:
            mk = (seq.tobytes(), g.key)
            to = memo.get(mk)
            if to is None:
                to = memo[mk] = align(seq, g.ids)
        ok = to >= 0
        both = ok.copy()
        both[ok] = (kgrid[ok] >= 0).all(axis=1) & (g.grid[to[ok]] >= 0).all(axis=1)
        agree = float((kgrid[both] == g.grid[to[both]]).all(axis=1).mean()) if both.any() else np.nan
        scored.append((float(ok.sum()) / max(seq.size, 1), agree, i, to))
    if not scored:
        return None, None, 0.0, "no captured graph launches these kernels"
    grid_ok = [s for s in scored if not (s[1] == s[1]) or s[1] >= rules.grid_agree]
    if not grid_ok:
        best = max(s[0] for s in scored)
        return None, None, best, "the captures' grids differ from the replay's (another batch size)"
    grid_ok.sort(
        key=lambda s: (-s[0], -(s[1] if s[1] == s[1] else 0.0), graphs[s[2]].seg != ordinal, s[2]),
    )
    best = grid_ok[0]
    if best[0] < rules.min_score:
        name = index[graphs[best[2]].ci].cap.ref.path.name
        return None, None, best[0], f"the best capture ({name}) aligns only {100 * best[0]:.0f} % of the kernels"
    ties = [s for s in grid_ok if s[0] == best[0] and (s[1] == best[1] or not (s[1] == s[1]))]
    tied_sizes = {index[graphs[s[2]].ci].bs for s in ties}
    if len(tied_sizes) > 1 and hint_bs < 0 and not (best[1] == best[1]):
        shown = ", ".join(str(s) for s in sorted(tied_sizes, key=lambda x: (x is None, x or 0)))
        return None, None, best[0], f"captures of batch sizes {shown} align equally and the replay names no batch size"
    return best[2], best[3], best[0], None


def _by_eager_map(res: ReplayAttribution, rep: _Replays, src: ReplaySources, gcol: dict) -> None:
    """Source 3: the replayed kernels of each step aligned to the kernels of the eager trace's first step."""
    from ...ingest import load
    from .linking import launching_ops

    path = Path(src.eager_map)
    et = load(path, cache=src.cache, cache_dir=src.cache_dir)
    ek, el, eo = launching_ops(et)
    ev = et.events
    has = np.flatnonzero(eo >= 0)
    bs_e, step_e = _step_of(ev, ev["start_ns"].to_numpy()[el[has]]) if has.size else (has, has)
    if has.size and (step_e >= 0).any():
        first = step_e[step_e >= 0][np.argmin(ev["start_ns"].to_numpy()[step_e[step_e >= 0]])]
        keep = step_e == first
        has, bs = has[keep], int(bs_e[keep][0])
    else:
        bs = -1
    vocab: dict[str, int] = {}
    names = ev["name"].astype(str).to_numpy()[ek[has]] if has.size else np.empty(0, dtype=object)
    cap = CaptureTrace(
        CaptureRef(path, bs if bs >= 0 else None, None, "eager_map"),
        et,
        el[has],
        names.astype(object),
        np.full(has.size, -1, dtype=np.int64),
    )
    res.captures.append(cap)
    ci = len(res.captures) - 1
    target = np.array([vocab.setdefault(n, len(vocab)) for n in names.tolist()], dtype=np.int64)
    rep_names = names_of(rep.ev, rep.rows)
    codes = np.array([vocab.get(n, -2 - i) for i, n in enumerate(rep_names.tolist())], dtype=np.int64)
    unit = np.where(rep.step >= 0, rep.step, -2 - np.arange(rep.step.size))  # a step, else the replay itself
    rules = replay_rules()
    memo: dict[bytes, tuple] = {}
    for u in pd.unique(unit).tolist():
        groups = np.flatnonzero(unit == u)
        p = np.sort(np.concatenate([rep.part(g) for g in groups.tolist()]))
        todo = res.capture[p] < 0
        if not todo.any():
            continue
        hint = int(rep.hint[groups[0]])
        seq = codes[p]
        if not has.size:
            why, to, score = f"the eager trace {path.name} has no kernel launched by an op", None, np.nan
        elif bs >= 0 and hint >= 0 and bs != hint:
            why, to, score = f"the eager trace {path.name} ran batch size {bs}, the replay {hint}", None, np.nan
        else:
            key = seq.tobytes()
            if key not in memo:
                t = align(seq, target)
                memo[key] = (t, float((t >= 0).sum()) / max(seq.size, 1))
            to, score = memo[key]
            why = (
                None
                if score >= rules.min_score
                else f"the eager trace {path.name} aligns only {100 * score:.0f} % of the replayed kernels"
            )
        res.score[p[todo]] = score
        if why is not None:
            res.why[p[todo]] = why
            gcol["why"][groups] = why
            continue
        ok = todo & (to >= 0)
        at = p[ok]
        res.capture[at] = ci
        res.launch_row[at] = el[has][to[ok]]
        res.op_row[at] = eo[has][to[ok]]
        res.by[at] = "eager_map"
        res.why[at] = None
        res.why[p[todo & (to < 0)]] = "not in the eager trace (aligned around)"
        gcol["why"][groups] = None
        gcol["capture"][groups] = path.name
        gcol["score"][groups] = score


# ----------------------------------------------------------------------------------------------- annotations


def _with_annotations(trace: Trace, krow: np.ndarray, res: ReplayAttribution) -> ReplayAttribution:
    """Source ``annotation``: each replayed kernel whose graph node id the side file annotates takes the annotation's
    module (exact: the key is the node id); a kernel no other source gave an op is attributed ``annotation`` (a
    module, no op or shapes)."""
    paths = find_annotations(trace.path, trace.derived.get(ANNOTATIONS_KEY))
    if not paths or not res.pos.size:
        return res
    ann = read_annotations(paths)
    res.annotations = ann
    ev = trace.events
    if "graph_node_id" not in ev.columns:
        return res
    idx = ann.lookup(ev["graph_node_id"].to_numpy()[krow[res.pos]].astype(np.int64))
    has = idx >= 0
    has[has] = ann.name[idx[has]] != None  # noqa: E711 (elementwise, object array)
    if not has.any():
        return res
    res.module = np.full(res.pos.size, None, dtype=object)
    res.module[has] = ann.name[idx[has]]
    only = has & (res.capture < 0)
    res.by[only] = "annotation"
    res.score[only] = 1.0
    res.hint = None
    return res


def replayed_modules(attr: ReplayAttribution) -> np.ndarray:
    """Per replayed kernel its module: the graph annotation's FQN where the side file names one, else the
    ``nn.Module`` path of its attributed op in the capture (:func:`op_context`); None where neither is known."""
    out = np.full(attr.pos.size, None, dtype=object)
    for ci, cap in enumerate(attr.captures):  # per capture, not per kernel
        m = (attr.capture == ci) & (attr.op_row >= 0)
        if m.any():
            out[m] = op_context(cap, attr.op_row[m])
    if attr.module is not None:
        got = attr.module != None  # noqa: E711 (elementwise, object array)
        out[got] = attr.module[got]
    return out


def names_of(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The names of event rows as an object array of str, through the categorical codes."""
    col = ev["name"] if isinstance(ev["name"].dtype, pd.CategoricalDtype) else ev["name"].astype("category")
    cats = np.append(col.cat.categories.to_numpy(dtype=object).astype(str).astype(object), None)
    return cats[col.cat.codes.to_numpy()[rows]]


def op_context(cap: CaptureTrace, op_rows: np.ndarray) -> np.ndarray:
    """Per op row of a capture: its ``nn.Module`` path (outermost first, ``/``-joined; None where none is
    recorded), from the ``nn.Module: …`` python events on the op's thread that hold it."""
    ev = cap.trace.events
    out = np.full(op_rows.size, None, dtype=object)
    names = ev["name"].astype(str)
    mrow = np.flatnonzero(((ev["kind"] == "python") & names.str.startswith("nn.Module: ")).to_numpy())
    ok = op_rows >= 0
    if not mrow.size or not ok.any():
        return out
    s, e = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    tid, pid = ev["tid"].to_numpy(), ev["pid"].to_numpy()
    label = np.array([n[len("nn.Module: ") :] for n in names.to_numpy()[mrow]], dtype=object)
    uq, inv = np.unique(op_rows[ok], return_inverse=True)
    hold = (
        (s[mrow][None, :] <= s[uq][:, None])
        & (e[mrow][None, :] >= e[uq][:, None])
        & (tid[mrow][None, :] == tid[uq][:, None])
        & (pid[mrow][None, :] == pid[uq][:, None])
    )  # distinct ops x module spans: a capture's few hundred ops, not the replay's kernels
    paths = np.array([("/".join(label[h]) or None) for h in hold], dtype=object)
    out[ok] = paths[inv]
    return out


def replay_counts(attr: ReplayAttribution, dur: np.ndarray) -> dict[str, Any]:
    att = attr.attributed
    total = int(dur.sum())
    return {
        "replayed_kernels": int(attr.pos.size),
        "replayed_ns": total,
        "attributed_kernels": int(att.sum()),
        "attributed_ns": int(dur[att].sum()),
        "attributed_pct": 100.0 * float(dur[att].sum()) / total if total else None,
    }


__all__ = [
    "LCS_CELLS",
    "REORDER_WINDOW",
    "ReplayAttribution",
    "ReplayRules",
    "ReplaySources",
    "align",
    "attribute",
    "batch_size_of",
    "graph_kernels",
    "names_of",
    "op_context",
    "replay_counts",
    "replay_rules",
    "replayed_modules",
    "use_graph_annotations",
    "use_replay_sources",
]
