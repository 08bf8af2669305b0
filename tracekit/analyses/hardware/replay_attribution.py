"""Which op each kernel that a CUDA/HIP graph replayed came from: the attribution of replayed kernels, decided here
once and used by every analysis through :func:`.kernel_ops.kernel_ops` (docs/replay.md).

A graph launch replays kernels that have no launching op. Their op is found in the trace of the graph's **capture**
(:mod:`tracekit.ingest.captures`), where each kernel was launched by an op with its ``Input Dims``, ``Input type``
and ``nn.Module`` scope. Sources, best first:

1. ``node_id``: the replayed kernels' graph node ids (Kineto's ``graph node id`` arg) joined to the capture launches'
   node ids: exact. The events table keeps no node id today, so this source answers only when it does.
2. ``capture``: each replay's kernel sequence (one graph launch, one stream) aligned to the launched-kernel sequence
   of each graph the captures hold (one per ``hipStreamBeginCapture`` … ``EndCapture``; a capture without those
   markers is one graph). The alignment (longest matching blocks, :class:`difflib.SequenceMatcher` on name codes)
   tolerates kernels the profiler dropped, copies and memsets (neither side holds them: they are not kernel
   launches) and launches of other streams; PIECEWISE replays (several graphs per step, eager attention between) are
   each aligned to the piece they match. Each distinct sequence is aligned once, however many steps replay it; the
   kernels are then assigned with arrays.
3. ``eager_map`` (an eager trace of the same model): not implemented; asked for, it is refused with a sentence.

A capture is used for a replay only if its batch size is the replay's (named by the step annotation, e.g. vLLM's
``execute_32_…``, or ``execution_details.json``; with grids on both sides, the grids of the aligned kernels must
agree). An alignment that matches under :data:`MIN_SCORE` of the replay's kernels, or captures of different batch
sizes that align equally well, are refused with a sentence, never guessed; what is not attributed is counted and why.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...ingest.captures import RECORD_HINT, CaptureTrace, find_captures, load_capture
from ...trace import Trace

MIN_SCORE = 0.9  # matched kernels / replayed kernels under which an alignment is refused
GRID_AGREE = 0.9  # aligned pairs with both grids known: the share that must agree
BATCH_PATTERNS = (r"^execute_(\d+)_", r"(?:^|[_ ])bs[=_ ]?(\d+)\b", r"batch[_ ]?size[=_ ]?(\d+)")
EAGER_REFUSED = (
    "--eager-map is not implemented yet: record the graph capture instead (sglang --enable-profile-cuda-graph with"
    " SGLANG_GRAPH_BATCH_CAPTURE=1; vLLM --profiler-config.capture_torch_profiler) and pass it with --capture"
)
SOURCES_KEY = "replay_sources"
DERIVED_KEYS = ("replay_attribution", "kernel_shapes", "kernel_ops")


@dataclass(frozen=True)
class ReplaySources:
    """Where replayed kernels' ops come from: ``capture`` paths (files or folders; empty: ``capture_traces/`` beside
    the trace) and ``eager_map`` (refused)."""

    capture: tuple[str, ...] = ()
    eager_map: str | None = None
    cache: bool = field(default=True, compare=False)
    cache_dir: str | None = field(default=None, compare=False)


def use_replay_sources(trace: Trace, capture=None, eager_map=None, *, cache: bool = True, cache_dir=None) -> None:
    """Resolve the replay sources of ``trace`` once (the API's ``capture=`` and ``eager_map=``, the CLI's
    ``--capture`` and ``--eager-map``); what was derived with other sources is dropped."""
    if eager_map is not None:
        raise UsageError(EAGER_REFUSED)
    if capture is None:
        paths: tuple[str, ...] = ()
    elif isinstance(capture, (str, Path)):
        paths = (str(capture),)
    else:
        paths = tuple(str(p) for p in capture)
    src = ReplaySources(paths, None, cache, None if cache_dir is None else str(cache_dir))
    if trace.derived.get(SOURCES_KEY, ReplaySources()) != src:
        for k in DERIVED_KEYS:
            trace.derived.pop(k, None)
        trace.derived[SOURCES_KEY] = src
    elif SOURCES_KEY not in trace.derived:
        trace.derived[SOURCES_KEY] = src


@dataclass
class ReplayAttribution:
    """Per replayed kernel (``pos``: positions in the kernel rows of :func:`.linking.launching_ops`, in row order):
    the capture it was attributed from (-1: none), the capture's launch and op rows, how (``by``: "node_id",
    "capture" or None), the agreement score of its replay's alignment, and why not where it was not. ``groups``:
    one row per (graph launch, stream)."""

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
        is_graph = np.array(["GraphLaunch" in str(c) for c in col.cat.categories] + [False], dtype=bool)
        out[has] = is_graph[codes]
    return out


def attribute(trace: Trace, krow: np.ndarray, launch: np.ndarray) -> ReplayAttribution:
    """The attribution of the replayed kernels among ``krow`` (launch rows ``launch``), with the trace's sources."""
    ev = trace.events
    pos = np.flatnonzero(graph_kernels(ev, launch))
    src = trace.derived.get(SOURCES_KEY, ReplaySources())
    if not pos.size:
        return _empty(pos, None, None)
    refs = find_captures(trace.path, src.capture)
    if not refs:
        hint = f"no capture trace of their graphs is beside the trace; {RECORD_HINT}"
        return _empty(pos, "no capture trace", hint)
    caps = [load_capture(r, cache=src.cache, cache_dir=src.cache_dir) for r in refs]
    return _align_all(trace, krow, launch, pos, caps)


# ----------------------------------------------------------------------------------------------- the captures


@dataclass
class _Graph:
    """One captured graph: its capture, its launches' rows / kernel ids / grids / ops, in launch order."""

    cap: int
    seg: int
    rows: np.ndarray
    ids: np.ndarray
    grid: np.ndarray
    ops: np.ndarray


def _capture_graphs(caps: list[CaptureTrace], vocab: dict[str, int]) -> list[_Graph]:
    from .linking import ops_holding

    graphs = []
    for ci, c in enumerate(caps):
        ev = c.trace.events
        rows = c.launch_rows
        if not rows.size:
            continue
        start = ev["start_ns"].to_numpy()[rows]
        names = ev["name"].astype(str).to_numpy()
        rt = np.flatnonzero((ev["kind"] == "runtime").to_numpy())
        begin = rt[np.char.find(names[rt].astype(str), "BeginCapture") >= 0]
        end = rt[np.char.find(names[rt].astype(str), "EndCapture") >= 0]
        if begin.size:
            b = np.sort(ev["start_ns"].to_numpy()[begin])
            e = np.sort(ev["end_ns"].to_numpy()[end]) if end.size else np.full(b.size, np.iinfo(np.int64).max)
            seg = np.searchsorted(b, start, side="right") - 1
            close = np.searchsorted(e, b[np.clip(seg, 0, None)], side="left")
            inside = (seg >= 0) & ((close >= e.size) | (start <= e[np.clip(close, 0, max(e.size - 1, 0))]))
            seg = np.where(inside, seg, -1)
        else:
            seg = np.zeros(rows.size, dtype=np.int64)
        ops = ops_holding(ev, rows)
        ids = np.array([vocab.setdefault(n, len(vocab)) for n in c.launch_kernel.tolist()], dtype=np.int64)
        grid = np.stack([ev[f"grid_{a}"].to_numpy()[rows] for a in "xyz"], axis=1)
        for s in np.unique(seg[seg >= 0]).tolist():
            m = seg == s
            graphs.append(_Graph(ci, int(s), rows[m], ids[m], grid[m], ops[m]))
    return graphs


def _batch_hint(ev: pd.DataFrame, at_ns: np.ndarray) -> np.ndarray:
    """Per graph launch time: the batch size a CPU annotation holding it names (-1: none)."""
    out = np.full(at_ns.size, -1, dtype=np.int64)
    ann = np.flatnonzero((ev["kind"] == "cpu_annotation").to_numpy())
    if not ann.size:
        return out
    names = ev["name"].astype(str).to_numpy()[ann]
    bs = np.full(ann.size, -1, dtype=np.int64)
    for i, n in enumerate(names.tolist()):  # per annotation (one per step), not per kernel
        for p in BATCH_PATTERNS:
            m = re.search(p, n)
            if m:
                bs[i] = int(m.group(1))
                break
    keep = bs >= 0
    if not keep.any():
        return out
    s, e, b = ev["start_ns"].to_numpy()[ann][keep], ev["end_ns"].to_numpy()[ann][keep], bs[keep]
    j = np.searchsorted(s, at_ns, side="right") - 1
    ok = (j >= 0) & (e[np.clip(j, 0, None)] >= at_ns)
    out[ok] = b[j[ok]]
    return out


def _align(seq: np.ndarray, g: _Graph) -> tuple[int, np.ndarray]:
    """(matched, per position of ``seq`` the index into ``g``'s launches, -1: unmatched)."""
    sm = difflib.SequenceMatcher(None, seq.tolist(), g.ids.tolist(), autojunk=False)
    to = np.full(seq.size, -1, dtype=np.int64)
    for a, b, size in sm.get_matching_blocks():
        to[a : a + size] = np.arange(b, b + size)
    return int((to >= 0).sum()), to


def _align_all(trace: Trace, krow, launch, pos, caps: list[CaptureTrace]) -> ReplayAttribution:
    ev = trace.events
    vocab: dict[str, int] = {}
    graphs = _capture_graphs(caps, vocab)
    res = _empty(pos, None, None, caps)
    rows = krow[pos]
    lr = launch[pos]
    stream = ev["stream"].to_numpy()[rows]
    col = ev["name"] if isinstance(ev["name"].dtype, pd.CategoricalDtype) else ev["name"].astype("category")
    cat_id = np.array([vocab.get(str(c), -2 - i) for i, c in enumerate(col.cat.categories)], dtype=np.int64)
    ids = cat_id[col.cat.codes.to_numpy()[rows]]
    kgrid = np.stack([ev[f"grid_{a}"].to_numpy()[rows] for a in "xyz"], axis=1)
    # groups: (graph launch row, stream), kernels in row (time) order within each
    gkey = pd.factorize(lr.astype(np.int64) * (1 << 20) + (stream & ((1 << 20) - 1)))[0]
    order = np.argsort(gkey, kind="stable")
    bounds = np.flatnonzero(np.diff(gkey[order])) + 1
    parts = np.split(order, bounds)
    ustart = ev["start_ns"].to_numpy()[lr[[p[0] for p in parts]]]
    hint = _batch_hint(ev, ustart)
    memo: dict[tuple[bytes, int], tuple] = {}
    group_rows = []
    for gi, p in enumerate(parts):  # per replay (graph launch, stream); each distinct sequence aligned once
        seq = ids[p]
        key = (seq.tobytes(), int(hint[gi]))
        if key not in memo:
            memo[key] = _choose(seq, kgrid[p], graphs, caps, int(hint[gi]))
        gsel, to, score, why = memo[key]
        if gsel is not None:
            g = graphs[gsel]
            ok = to >= 0
            at = p[ok]
            res.capture[at] = g.cap
            res.launch_row[at] = g.rows[to[ok]]
            res.op_row[at] = g.ops[to[ok]]
            res.by[at] = "capture"
            res.why[p[~ok]] = "not in the capture (aligned around)"
        else:
            res.why[p] = why
        res.score[p] = score
        group_rows.append(
            {
                "launch_row": int(lr[p[0]]),
                "stream": int(stream[p[0]]),
                "kernels": int(p.size),
                "matched": int((to >= 0).sum()) if gsel is not None else 0,
                "capture": str(caps[graphs[gsel].cap].ref.path.name) if gsel is not None else None,
                "graph": int(graphs[gsel].seg) if gsel is not None else None,
                "score": float(score) if score == score else None,
                "why": why,
            }
        )
    res.groups = pd.DataFrame(group_rows)
    return res


def _choose(seq, kgrid, graphs: list[_Graph], caps: list[CaptureTrace], hint_bs: int):
    """The captured graph a replay sequence came from: (graph index or None, alignment, score, why not)."""
    if not graphs:
        return None, None, np.nan, "the capture traces hold no kernel launches"
    cand = list(range(len(graphs)))
    sizes = {caps[graphs[i].cap].ref.batch_size for i in cand}
    if hint_bs >= 0 and sizes - {None}:
        cand = [i for i in cand if caps[graphs[i].cap].ref.batch_size in (hint_bs, None)]
        if not cand:
            known = ", ".join(str(s) for s in sorted(sizes - {None}))
            return None, None, np.nan, f"no capture of batch size {hint_bs} (captures: {known})"
    present = set(seq.tolist())
    scored = []
    for i in cand:
        g = graphs[i]
        if not present.intersection(g.ids.tolist()):
            continue
        matched, to = _align(seq, g)
        ok = to >= 0
        both = ok.copy()
        both[ok] = (kgrid[ok] >= 0).all(axis=1) & (g.grid[to[ok]] >= 0).all(axis=1)
        agree = float((kgrid[both] == g.grid[to[both]]).all(axis=1).mean()) if both.any() else np.nan
        scored.append((matched / max(seq.size, 1), agree, i, to))
    if not scored:
        return None, None, 0.0, "no captured graph launches these kernels"
    grid_ok = [s for s in scored if not (s[1] == s[1]) or s[1] >= GRID_AGREE]
    if not grid_ok:
        return (
            None,
            None,
            max(s[0] for s in scored),
            "the captures' grids differ from the replay's (another batch size)",
        )
    grid_ok.sort(key=lambda s: (-s[0], -(s[1] if s[1] == s[1] else 0.0), s[2]))
    best = grid_ok[0]
    if best[0] < MIN_SCORE:
        name = caps[graphs[best[2]].cap].ref.path.name
        return None, None, best[0], f"the best capture ({name}) aligns only {100 * best[0]:.0f} % of the kernels"
    ties = [s for s in grid_ok if s[0] == best[0] and (s[1] == best[1] or not (s[1] == s[1]))]
    tied_sizes = {caps[graphs[s[2]].cap].ref.batch_size for s in ties}
    if len(tied_sizes) > 1 and hint_bs < 0 and not (best[1] == best[1]):
        shown = ", ".join(str(s) for s in sorted(tied_sizes, key=lambda x: (x is None, x or 0)))
        return None, None, best[0], f"captures of batch sizes {shown} align equally and the replay names no batch size"
    return best[2], best[3], best[0], None


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
    "EAGER_REFUSED",
    "MIN_SCORE",
    "ReplayAttribution",
    "ReplaySources",
    "attribute",
    "graph_kernels",
    "op_context",
    "replay_counts",
    "use_replay_sources",
]
