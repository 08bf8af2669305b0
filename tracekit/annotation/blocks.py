"""The annotation engine: step, block, block_type, layer and op_tag columns (A3).

A block starts at a boundary kernel on the main stream; every kernel or copy of any stream that
starts inside the block's window belongs to it (that is how a side-stream local copy lands in the
block running then). The segment of a step before its first boundary kernel is a block too. Block
types come from the annotation: by position (first, last), by a kernel the block contains (its name,
launch grid and duration, and every other such block by parity), and a default for untyped blocks
between the first and the last. Op tags pick the n-th kernel matching a pattern within a block, since
one GEMM kernel name serves several ops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from .. import intervals as iv
from ..events import categorical_at, main_stream, name_mask
from ..errors import MissingDataError
from ..trace import Trace
from .rulematch import matching_rules
from .spec import Annotation

UNTYPED = "untyped"


@dataclass(frozen=True)
class AnnotatedEvents:
    """The events with annotation columns, and one row per block."""

    events: pd.DataFrame
    blocks: pd.DataFrame  # step, block, block_type, layer, type_layer, start_ns, end_ns, kernels, kernel_ns
    main_stream: tuple[int, int]
    annotation: Annotation
    warnings: list[str] = field(default_factory=list)


def resolve_main_stream(events: pd.DataFrame, ann: Annotation) -> tuple[int, int]:
    """The annotation's main stream, or (``auto``) the one with the most kernel time outside communication kernels
    (:func:`tracekit.events.main_stream`)."""
    return main_stream(events, ann.main_stream if isinstance(ann.main_stream, int) else None)


def annotate(trace: Trace, ann: Annotation, steps: pd.DataFrame, *, keep: bool = True) -> AnnotatedEvents:
    """Add the block columns to the events (a new table sharing the input's columns, copy-on-write: the input is not
    changed). Computed once per trace, annotation and steps (kept in ``trace.derived``: a report asks for it three
    times); ``keep=False`` (the annotation fit, which judges one annotation after the other) uses a kept result but
    keeps none."""
    key = (
        "annotate",
        id(ann),
        steps["step"].to_numpy().tobytes(),
        steps["start_ns"].to_numpy().tobytes(),
        steps["end_ns"].to_numpy().tobytes(),
    )
    hit = trace.derived.get(key)
    if hit is None or hit[0] is not ann:  # the entry holds the annotation, so its id cannot be reused meanwhile
        hit = (ann, _annotate(trace, ann, steps))
        if keep:
            trace.derived[key] = hit
    a = hit[1]
    return AnnotatedEvents(
        events=a.events, blocks=a.blocks, main_stream=a.main_stream, annotation=ann, warnings=list(a.warnings)
    )


def _annotate(trace: Trace, ann: Annotation, steps: pd.DataFrame) -> AnnotatedEvents:
    if ann.blocks is None:
        raise MissingDataError(f"annotation {ann.source or ann.name} has no 'blocks' section, so blocks cannot be cut")
    ev = trace.events
    spec = ann.blocks
    dev, stream = resolve_main_stream(ev, ann)
    start = ev["start_ns"].to_numpy()
    kind = ev["kind"].to_numpy()
    ss, se, sid = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy(), steps["step"].to_numpy()
    k = iv.window_of(start, ss, se)  # the one rule for which step an event is in (Steps.step_of)
    in_step = k >= 0
    step = np.where(in_step, sid[np.clip(k, 0, None)], -1)

    on_main = (ev["device"].to_numpy() == dev) & (ev["stream"].to_numpy() == stream) & (kind == "kernel")
    boundary = _boundaries(ev, spec.boundary, on_main & in_step, step)
    # block starts: each step's start, plus every boundary kernel (a boundary at the step start is one)
    b_start = np.concatenate([ss, start[boundary]])
    b_step = np.concatenate([sid, step[boundary]])
    order = np.lexsort((b_start, b_step))
    b_start, b_step = b_start[order], b_step[order]
    dup = np.concatenate([[False], (b_step[1:] == b_step[:-1]) & (b_start[1:] == b_start[:-1])])
    b_start, b_step = b_start[~dup], b_step[~dup]
    step_end = dict(zip(sid.tolist(), se.tolist()))
    nxt_same = np.concatenate([b_step[1:] == b_step[:-1], [False]])
    b_end = np.where(nxt_same, np.roll(b_start, -1), np.array([step_end[s] for s in b_step.tolist()], dtype=np.int64))
    # blocks without kernels (an empty head, say) are dropped below; their copies get no block
    block_of = np.searchsorted(b_start, start, side="right") - 1
    member = in_step & (block_of >= 0)
    member &= np.where(member, start < b_end[np.clip(block_of, 0, None)], False)
    is_kernel = kind == "kernel"
    counted = member & is_kernel
    n_blocks = len(b_start)
    kernels = np.bincount(block_of[counted], minlength=n_blocks)
    kernel_ns = np.bincount(block_of[counted], weights=ev["dur_ns"].to_numpy()[counted], minlength=n_blocks)
    keep_block = kernels > 0
    btype, type_warnings = _block_types(ev, spec, b_step, block_of, counted, keep_block)
    # renumber the blocks that hold kernels: block = index within the step, layer = within its type
    blocks = pd.DataFrame(
        {
            "step": b_step,
            "start_ns": b_start,
            "end_ns": b_end,
            "block_type": btype,
            "kernels": kernels,
            "kernel_ns": kernel_ns.astype(np.int64),
            "_id": np.arange(n_blocks),
        }
    )
    blocks = blocks[keep_block].reset_index(drop=True)
    blocks["block"] = blocks.groupby("step").cumcount()
    blocks["layer"] = blocks["block"]
    blocks["type_layer"] = blocks.groupby(["step", "block_type"]).cumcount()
    remap = np.full(n_blocks, -1, dtype=np.int64)
    remap[blocks["_id"].to_numpy()] = np.arange(len(blocks))
    row_block = np.where(member, remap[np.clip(block_of, 0, None)], -1)
    has_block = row_block >= 0

    out = ev.copy(deep=False)  # the columns are shared (pandas copy-on-write): no copy of the events table
    out["step"] = step.astype(np.int64)
    out["block"] = np.where(has_block, blocks["block"].to_numpy()[np.clip(row_block, 0, None)], -1)
    out["block_type"] = categorical_at(blocks["block_type"].to_numpy(dtype=object), row_block)
    out["layer"] = out["block"]
    tl = blocks["type_layer"].to_numpy()
    out["type_layer"] = np.where(has_block, tl[np.clip(row_block, 0, None)], -1)
    out["op_tag"] = _op_tags(out, ann, row_block)
    blocks = blocks[
        ["step", "block", "block_type", "layer", "type_layer", "start_ns", "end_ns", "kernels", "kernel_ns"]
    ]
    warnings = type_warnings + _check_expectations(blocks, ann)
    n_untyped = int((blocks["block_type"] == UNTYPED).sum())
    if n_untyped:
        sample = blocks.loc[blocks["block_type"] == UNTYPED, ["step", "block"]].head(5).values.tolist()
        warnings.append(
            f"{n_untyped} block(s) match no type rule and no position (untyped); first (step, block): {sample}"
        )
    return AnnotatedEvents(events=out, blocks=blocks, main_stream=(dev, stream), annotation=ann, warnings=warnings)


def _block_types(
    ev: pd.DataFrame, spec, b_step: np.ndarray, block_of: np.ndarray, counted: np.ndarray, keep_block: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """Each block's type: position first/last per step (judged among blocks that hold kernels), then the type
    rules (the first a block matches wins), then the default for untyped blocks between them; ``untyped``
    otherwise. Also the warnings of duration rules that found no clear gap."""
    n_blocks = len(b_step)
    kept_idx = np.flatnonzero(keep_block)
    first_kept = np.zeros(n_blocks, dtype=bool)
    last_kept = np.zeros(n_blocks, dtype=bool)
    if kept_idx.size:
        ks = b_step[kept_idx]
        first_kept[kept_idx[np.concatenate([[True], ks[1:] != ks[:-1]])]] = True
        last_kept[kept_idx[np.concatenate([ks[1:] != ks[:-1], [True]])]] = True
    btype = np.full(n_blocks, None, dtype=object)
    warnings: list[str] = []
    clusters: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # short and long blocks of one population
    for i, rule in enumerate(spec.types):
        has = _type_rule_blocks(ev, rule, i, b_step, block_of, counted, n_blocks, clusters, warnings)
        btype = np.where((btype == None) & has, rule.type, btype)  # noqa: E711 - elementwise
    pos = spec.position
    if pos.first:
        btype = np.where(first_kept, pos.first, btype)
    if pos.last:
        btype = np.where(last_kept & ~(first_kept & bool(pos.first)), pos.last, btype)
    untyped = keep_block & (btype == None)  # noqa: E711
    if pos.default:
        btype = np.where(untyped, pos.default, btype)
    btype = np.where(btype == None, UNTYPED, btype)  # noqa: E711
    return btype, warnings


def _type_rule_blocks(
    ev: pd.DataFrame,
    rule,
    i: int,
    b_step: np.ndarray,
    block_of: np.ndarray,
    counted: np.ndarray,
    n_blocks: int,
    clusters: dict,
    warnings: list[str],
) -> np.ndarray:
    """The blocks one type rule matches, whatever the other rules do (TypeRule; docs/annotations.md)."""
    hits = name_mask(ev, rule.contains, where=f"blocks.types[{i}].contains") & counted
    if rule.grid is not None:
        for col, want in zip(("grid_x", "grid_y", "grid_z"), rule.grid):
            if want is not None:
                hits &= ev[col].to_numpy() == want
    holds = np.bincount(block_of[hits], minlength=n_blocks) > 0
    has = holds
    if rule.duration is not None or rule.min_us is not None or rule.max_us is not None:
        # the block's time in the matching kernels (all streams)
        t_ns = np.bincount(block_of[hits], weights=ev["dur_ns"].to_numpy()[hits].astype(np.float64), minlength=n_blocks)
        if rule.min_us is not None:
            has = has & (t_ns >= rule.min_us * 1000.0)
        if rule.max_us is not None:
            has = has & (t_ns <= rule.max_us * 1000.0)
        if rule.duration is not None:
            key = (rule.contains, None if rule.grid is None else tuple(rule.grid), rule.gap_ratio)
            if key not in clusters:
                short, long_, warning = _duration_clusters(t_ns, holds, b_step, rule.gap_ratio)
                clusters[key] = (short, long_)
                if warning:
                    warnings.append(
                        f"blocks.types[{i}] ({rule.type!r}, duration {rule.duration!r}): the blocks' time"
                        f" in kernels matching {rule.contains!r}{_grid_text(rule.grid)} {warning}; those"
                        " steps' blocks are typed by no duration rule of that pattern"
                    )
            has = has & clusters[key][0 if rule.duration == "short" else 1]
    if rule.parity is not None:
        ids = np.flatnonzero(has)  # block ids run in (step, start) order
        st = b_step[ids]
        first = np.concatenate([[True], st[1:] != st[:-1]]) if ids.size else np.zeros(0, dtype=bool)
        rank = np.arange(ids.size) - np.maximum.accumulate(np.where(first, np.arange(ids.size), 0))
        has = np.zeros(n_blocks, dtype=bool)
        has[ids[rank % 2 == (0 if rule.parity == "even" else 1)]] = True
    return has


def _grid_text(grid) -> str:
    if grid is None:
        return ""
    return " with grid [" + ", ".join("any" if g is None else str(g) for g in grid) + "]"


def _duration_clusters(
    t_ns: np.ndarray, pop: np.ndarray, b_step: np.ndarray, gap_ratio: float
) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Within each step, the blocks of ``pop`` split by their time ``t_ns`` into a short and a long cluster at the
    largest gap between sorted times, where that gap is more than ``gap_ratio`` times the wider cluster's range
    (max - min). Steps without such a gap (or with fewer than two blocks) put no block in either; the warning
    (or None) says how many and why."""
    n_blocks = len(t_ns)
    short = np.zeros(n_blocks, dtype=bool)
    long_ = np.zeros(n_blocks, dtype=bool)
    ids = np.flatnonzero(pop)
    if ids.size == 0:
        return short, long_, None
    o = np.lexsort((t_ns[ids], b_step[ids]))
    ids = ids[o]
    s, d = b_step[ids], t_ns[ids]
    n = ids.size
    g_start = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    g_last = np.concatenate([g_start[1:], [n]]) - 1
    n_groups = g_start.size
    # the largest gap of each step (the first of equal ones): positions p with d[p], d[p + 1] in one step
    p = np.flatnonzero(s[1:] == s[:-1])
    gaps = d[p + 1] - d[p]
    g_of_p = np.searchsorted(g_start, p, side="right") - 1
    best = np.full(n_groups, -1, dtype=np.int64)
    if p.size:
        o2 = np.lexsort((-gaps, g_of_p))
        lead = np.concatenate([[True], g_of_p[o2][1:] != g_of_p[o2][:-1]])
        best[g_of_p[o2][lead]] = p[o2][lead]
    two = best >= 0
    b = np.where(two, best, 0)
    gap = np.where(two, d[np.minimum(b + 1, n - 1)] - d[b], 0.0)
    spread = np.where(two, np.maximum(d[b] - d[g_start], d[g_last] - d[np.minimum(b + 1, n - 1)]), 0.0)
    clear = two & (gap > 0) & (gap > gap_ratio * spread)
    g_of = np.repeat(np.arange(n_groups), g_last - g_start + 1)
    pos = np.arange(n)
    short[ids[clear[g_of] & (pos <= best[g_of])]] = True
    long_[ids[clear[g_of] & (pos > best[g_of])]] = True
    if clear.all():
        return short, long_, None
    bad = np.flatnonzero(~clear)
    g = int(bad[0])
    size = int(g_last[g] - g_start[g] + 1)
    if not two[g]:
        why = f"only {size} block holds such a kernel"
    else:
        why = (
            f"{size} blocks, largest gap {gap[g] / 1000:.3g} µs, not more than gap_ratio {gap_ratio:g} x the wider"
            f" cluster's range of {spread[g] / 1000:.3g} µs"
        )
    example = int(s[g_start[g]])
    return short, long_, f"has no clear short/long gap in {bad.size} of {n_groups} step(s) (e.g. step {example}: {why})"


def _boundaries(ev: pd.DataFrame, rules: list, main_in_step: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Rows of main-stream kernels that start a block, rule by rule (see BoundaryRule)."""
    idx = np.flatnonzero(main_in_step)  # main-stream kernels inside steps, in start order
    st = step[idx]
    new_step = np.concatenate([[True], st[1:] != st[:-1]])
    cand = np.zeros(idx.size, dtype=bool)
    conditional: list[tuple[np.ndarray, object]] = []
    for i, rule in enumerate(rules):
        pattern = rule if isinstance(rule, str) else rule.pattern
        m = name_mask(ev, pattern)[idx]
        if not isinstance(rule, str):
            if rule.first_of_run:
                m = m & ~(np.concatenate([[False], m[:-1]]) & ~new_step)
            if rule.after:  # the previous main-stream kernel of the step matches
                prev = name_mask(ev, rule.after, where=f"blocks.boundary[{i}].after")[idx]
                m = m & np.concatenate([[False], prev[:-1]]) & ~new_step
            if rule.skip:
                rank = pd.Series(m.astype(np.int64)).groupby(st).cumsum().to_numpy() - m
                m = m & (rank >= rule.skip)
            if rule.unless_after or rule.unless_block_starts_with:
                conditional.append((m, rule))
                continue
        cand |= m
    accepted = cand.copy()
    if conditional:
        accepted = _resolve_conditions(ev, idx, new_step, cand, conditional)
    out = np.zeros(len(ev), dtype=bool)
    out[idx[accepted]] = True
    return out


def _resolve_conditions(ev, idx, new_step, cand, conditional) -> np.ndarray:
    """Accept conditional boundaries in order: a loop over candidate boundaries, not over events."""
    accepted = cand.copy()
    all_cand = cand.copy()
    for m, _ in conditional:
        all_cand |= m
    tests = []
    for m, rule in conditional:
        after = name_mask(ev, rule.unless_after)[idx] if rule.unless_after else None
        starts = name_mask(ev, rule.unless_block_starts_with)[idx] if rule.unless_block_starts_with else None
        tests.append([m, np.cumsum(after) if after is not None else None, starts, -1])
    block_start = 0  # position (in idx) of the kernel that opened the running block
    for pos in np.flatnonzero(all_cand | new_step).tolist():
        if new_step[pos]:
            block_start = pos
            for t in tests:
                t[3] = -1  # previous match of each rule, within the step
        if cand[pos]:
            accepted[pos] = True
            block_start = pos
            continue
        ok = False
        for t in tests:
            m, after_cum, starts, prev = t
            if not m[pos]:
                continue
            blocked = False
            if after_cum is not None and prev >= 0:
                blocked |= after_cum[pos - 1] - after_cum[prev] > 0
            if starts is not None:  # only the rule's first match after the opening kernel
                blocked |= bool(starts[block_start]) and block_start != pos and prev < block_start
            t[3] = pos
            ok |= not blocked
        if ok:
            accepted[pos] = True
            block_start = pos
    return accepted


def _op_tags(ev: pd.DataFrame, ann: Annotation, row_block: np.ndarray) -> pd.Categorical:
    """Each kernel's op tag: the first rule that tags it wins (int codes per row; the tags are few). The rules are
    matched once per distinct name (:func:`matching_rules`: literals through one trie walk); a rule without an
    ordinal then applies per (name, block type), one with an ordinal per block, on its own matching kernels only."""
    rules = ann.op_tags
    tag_names = list(dict.fromkeys(rule.tag for rule in rules))
    tag_of = {t: i for i, t in enumerate(tag_names)}
    tags = np.full(len(ev), -1, dtype=np.int64)
    col = ev["name"]
    if not rules or len(col.cat.categories) == 0:
        return categorical_at(np.array(tag_names, dtype=object), tags)
    codes = col.cat.codes.to_numpy().astype(np.int64)
    bt_codes = ev["block_type"].cat.codes.to_numpy().astype(np.int64)
    bt_index = {str(c): i for i, c in enumerate(ev["block_type"].cat.categories)}
    rule_bt = np.array([-1 if r.block_type is None else bt_index.get(r.block_type, -2) for r in rules], dtype=np.int64)
    rule_tag = np.array([tag_of[r.tag] for r in rules], dtype=np.int64)
    ordinal = [r.ordinal for r in rules]
    eligible = np.flatnonzero((ev["kind"] == "kernel").to_numpy() & (row_block >= 0) & (codes >= 0))
    if eligible.size == 0:
        return categorical_at(np.array(tag_names, dtype=object), tags)
    # only the names of the kernels that can take a tag are matched
    used = np.unique(codes[eligible])
    cats = col.cat.categories
    found = matching_rules(
        [r.pattern for r in rules],
        (cats[c] for c in used.tolist()),
        [f"$.op_tags[{i}].pattern" for i in range(len(rules))],
    )
    none = len(rules)
    winner = np.full(len(ev), none, dtype=np.int64)  # the first rule that tags each row
    # rules without an ordinal: the first one of each (name, block type) that occurs
    n_bt = max(len(bt_index), 1)
    pair = codes[eligible] * n_bt + bt_codes[eligible]
    pairs, inverse = np.unique(pair, return_inverse=True)
    slot = {c: i for i, c in enumerate(used.tolist())}
    first = np.full(pairs.size, none, dtype=np.int64)
    for j, (c, b) in enumerate(zip((pairs // n_bt).tolist(), (pairs % n_bt).tolist())):
        for r in found[slot[c]]:
            if ordinal[r] is None and (rule_bt[r] == -1 or rule_bt[r] == b):
                first[j] = r
                break
    winner[eligible] = first[inverse]
    # rules with an ordinal: the n-th of the rule's own kernels in each block (rows are in start order)
    by_rule: dict[int, list[int]] = {}
    for c, rs in zip(used.tolist(), found):
        for r in rs:
            if ordinal[r] is not None:
                by_rule.setdefault(r, []).append(c)
    if by_rule:
        order = eligible[np.argsort(codes[eligible], kind="stable")]  # eligible rows grouped by name, in row order
        bounds = np.searchsorted(codes[order], np.append(used, used[-1] + 1))
        span = {c: (bounds[i], bounds[i + 1]) for i, c in enumerate(used.tolist())}
        for r, names in by_rule.items():
            idx = np.sort(np.concatenate([order[span[c][0] : span[c][1]] for c in names]))
            if rule_bt[r] != -1:
                idx = idx[bt_codes[idx] == rule_bt[r]]
            blk = row_block[idx]
            o = np.argsort(blk, kind="stable")
            sb = blk[o]
            start = np.concatenate([[True], sb[1:] != sb[:-1]]) if sb.size else np.zeros(0, dtype=bool)
            rank = np.arange(sb.size) - np.maximum.accumulate(np.where(start, np.arange(sb.size), 0))
            pick = idx[o[rank == ordinal[r] - 1]]
            winner[pick] = np.minimum(winner[pick], r)
    tagged = winner < none
    tags[tagged] = rule_tag[winner[tagged]]
    return categorical_at(np.array(tag_names, dtype=object), tags)


@lru_cache(maxsize=1)
def expect_tolerance() -> dict:
    """How far a step's block count may be from ``blocks.expect`` and still meet it (``expect_tolerance`` of
    ``tracekit/data/fit.json``): ``layers`` blocks either way for a type expected at least ``from_count`` times (a
    per-layer type: a run with one layer more or less), none for the others (head, tail, one-off blocks)."""
    rules = json.loads(resources.files("tracekit.data").joinpath("fit.json").read_text(encoding="utf-8"))
    return rules["expect_tolerance"]


def expect_met(got, n: int):
    """Whether a block count (or an array of them) meets the expectation ``n`` (:func:`expect_tolerance`)."""
    tol = expect_tolerance()
    slack = int(tol["layers"]) if n >= int(tol["from_count"]) else 0
    return np.abs(np.asarray(got) - n) <= slack


def _check_expectations(blocks: pd.DataFrame, ann: Annotation) -> list[str]:
    expect = ann.blocks.expect if ann.blocks else {}
    if not expect:
        return []
    counts = blocks.groupby(["step", "block_type"]).size().unstack(fill_value=0)
    warnings = []
    for t, n in expect.items():
        got = counts[t] if t in counts else pd.Series(0, index=counts.index)
        bad = got[~expect_met(got.to_numpy(), n)]
        if len(bad):
            warnings.append(
                f"{len(bad)} step(s) do not have the expected {n} {t} block(s) (e.g. step {bad.index[0]}:"
                f" {int(bad.iloc[0])})"
            )
    return warnings
