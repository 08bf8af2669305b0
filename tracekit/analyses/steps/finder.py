"""Finding the steps of a trace (uncached, :func:`scan`; :func:`tracekit.analyses.steps.resolve.find_steps` caches): the dialects
tried in order, GPU spans paired with their CPU spans, launch windows, empty markers, overlaps, phases, and the
whole trace as one step when no marker is found. The trace's activity and launches are :mod:`.activity`'s; whether
the steps can be trusted, :mod:`.health`'s."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...data import record_hint
from ...errors import MissingDataError
from ...events import gpu_mask
from ...regexes import bounded
from ...trace import Trace
from .activity import Launches, StepActivity
from .health import health_table, kernels_per_step, with_health_warnings
from .model import STEP_COLUMNS, Dialect, StepOptions, StepRules, Steps, step_rules


MARKER_COLUMNS = ["name", "start_ns", "end_ns", "external_id", "device", "phase", "bs", "tokens"]


def _marker_rows(ctx: StepActivity, kind: str | None, match) -> pd.DataFrame:
    """Annotation rows of one kind whose name ``match(name)`` accepts; fields per distinct name (read from the
    name codes of that kind's rows, found once per kind: no boolean filter of the events table, no string per
    row)."""
    ev = ctx.ev
    idx = ctx.annotation_rows(kind) if kind else np.zeros(0, dtype=np.int64)
    if idx.size == 0:
        return pd.DataFrame(columns=MARKER_COLUMNS)
    idx, codes, present, texts = ctx.marker_names(kind)
    parsed = {c: f for c, f in zip(present, map(match, texts)) if f is not None}
    if not parsed:  # no name of this kind is the dialect's (most attempts): its empty table, built once
        return _no_marker_rows(ctx).copy()
    keep = np.isin(codes, np.fromiter(parsed, dtype=np.int64, count=len(parsed)))
    return _marker_frame(ev, idx[keep], codes[keep], parsed)


def _no_marker_rows(ctx: StepActivity) -> pd.DataFrame:
    if ctx.no_marker_rows is None:
        ctx.no_marker_rows = _marker_frame(ctx.ev, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8), {})
    return ctx.no_marker_rows


def _marker_frame(ev: pd.DataFrame, rows: np.ndarray, codes: np.ndarray, parsed: dict) -> pd.DataFrame:
    """The marker table of these rows (their name codes) from the fields ``parsed`` per name code."""
    cats = ev["name"].cat.categories
    names = np.empty(len(cats), dtype=object)
    fields = np.empty((len(cats), 3), dtype=object)
    for c, f in parsed.items():  # per distinct marker name
        names[c], fields[c] = str(cats[c]), f[:3]
    out = pd.DataFrame(
        {
            "name": names[codes],
            "start_ns": ev["start_ns"].to_numpy(np.int64)[rows],
            "end_ns": ev["end_ns"].to_numpy(np.int64)[rows],
            "external_id": ev["external_id"].to_numpy(np.int64)[rows],
            "device": ev["device"].to_numpy(np.int64)[rows],
        }
    )
    out["phase"] = fields[codes, 0].tolist()
    out["bs"] = pd.array(fields[codes, 1].tolist(), dtype="Int64")
    out["tokens"] = pd.array(fields[codes, 2].tolist(), dtype="Int64")
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _dialect_matcher(dialect: Dialect):
    def match(name: str):
        m = dialect.pattern.fullmatch(name)
        return dialect.fields(m) if m else None

    return match


def _name_matcher(step_name: str, names_present: set[str], rules: StepRules):
    """--step-name: the exact name when present, else the name as a regex (full match)."""
    if step_name in names_present:
        how, test = "exact", (lambda n: n == step_name)
    else:
        rx = bounded(step_name, f"--step-name {step_name!r} (not an annotation in the trace, so a regex)")
        how, test = "regex", (lambda n: rx.fullmatch(n) is not None)

    def match(name: str):
        if not test(name):
            return None
        for d in rules.dialects:  # a known dialect still says the phase, bs and tokens
            m = d.pattern.fullmatch(name)
            if m:
                return d.fields(m)
        return ("unknown", None, None)

    return how, match


def one_device(trace: Trace) -> None:
    """The one rule of every analysis that measures against one GPU's timeline (steps, busy time, shares of it): a
    trace whose GPU activity is on several devices is refused, naming them and ``--device N``; pooling two would
    call one GPU's idle time the other's busy time."""
    devices = sorted(int(d) for d in np.unique(trace.events["device"].to_numpy()[gpu_mask(trace.events)]))
    if len(devices) > 1:
        raise MissingDataError(
            f"{trace.path} holds the GPU activity of {len(devices)} devices"
            f" ({', '.join(map(str, devices))}); tracekit analyses one GPU at a time: pass"
            f" --device N (tracekit --device {devices[0]} …, or trace.on_device(N) in Python)"
        )


def scan(trace: Trace, options: StepOptions) -> Steps:
    """Search the trace for its steps (uncached: call :func:`~tracekit.analyses.steps.resolve.find_steps`)."""
    one_device(trace)
    rules = step_rules(options.steps_file)
    ctx = StepActivity(trace, rules)
    tried: list[str] = []
    attempts = [(d.label, d.name, d.kinds, _dialect_matcher(d)) for d in rules.dialects]
    if options.name is not None:
        present = set(_annotation_names(ctx).astype(str).unique())
        how, match = _name_matcher(options.name, present, rules)
        # a name that is a dialect's marker (an annotation's step.name usually is) is read as that dialect reads it:
        # the same kinds, so that a step with the annotation is the step without it (docs/steps.md)
        known = rules.dialect_of(options.name)
        named = (options.name, how, known.kinds if known else ("gpu_annotation", "cpu_annotation"), match)
        attempts = [named] if options.strict else [named, *attempts]
    for label, how, kinds, match in attempts:
        found = _attempt(ctx, options, label, how, kinds, match, tried)
        if found is not None and ctx.reused_ids:
            found.warnings.append(
                f"{trace.path}: {ctx.reused_ids} correlation id(s) are reused by several launches;"
                " each GPU activity belongs to the latest launch of its id before it"
            )
        if found is not None:
            if options.name is not None and label != options.name:  # the annotation's marker is not in the trace
                found.warnings.insert(
                    0,
                    f"{trace.path}: the annotation's step marker {options.name!r} is not in the"
                    f" trace ({tried[0]}); the steps are the {label} markers",
                )
            return found
        if options.name is not None and label == options.name and len(tried) == 0:
            tried.append(f"{label} (absent)")
    if options.name is not None and options.strict:
        raise MissingDataError(_no_steps_message(ctx, options.name, tried))
    return _whole_trace(ctx, options, tried)


def _attempt(ctx: StepActivity, options: StepOptions, label: str, how: str, kinds, match, tried: list[str]):
    # CPU spans always pair with their GPU spans; alone they are steps only where the dialect allows it, or where
    # the trace holds no GPU span at all (its profiler records none: Nsight Systems, rocprofv3), so that the CPU
    # span is all there is of every marker (docs/steps.md)
    g = _marker_rows(ctx, "gpu_annotation" if "gpu_annotation" in kinds else None, match)
    c = _marker_rows(ctx, "cpu_annotation", match)
    no_gpu_spans = ctx.annotation_rows("gpu_annotation").size == 0
    cpu_alone = ("cpu_annotation" in kinds or options.source == "cpu" or no_gpu_spans) and options.source != "gpu"
    if g.empty and (c.empty or not cpu_alone):
        return None
    c_use = c
    lw = ctx.launches_in(c_use["start_ns"].to_numpy(np.int64), c_use["end_ns"].to_numpy(np.int64))
    # pair GPU spans with their CPU spans by External id
    c_by_ext = {x: i for i, x in enumerate(c_use["external_id"].tolist()) if x >= 0}
    pair = np.array([c_by_ext.get(x, -1) if x >= 0 else -1 for x in g["external_id"].tolist()], dtype=np.int64)
    if options.source == "cpu":
        g, pair = g.iloc[0:0], pair[:0]
    cover, outside = _gpu_cover(g, pair, lw)
    rows = [
        _from_gpu_span(ctx, options, r, int(ci), lw, cov, int(out))  # per marker: markers are few
        for r, ci, cov, out in zip(g.to_dict("records"), pair.tolist(), cover.tolist(), outside.tolist())
    ]
    paired = set(pair[pair >= 0].tolist())
    candidates = len(g) + (len(c_use) - len(paired) if cpu_alone else 0)
    for ci in range(len(c_use) if cpu_alone else 0):
        if ci in paired:
            continue
        r = c_use.iloc[ci]
        rows.append(
            {
                "name": r["name"],
                "phase": r["phase"],
                "bs": r["bs"],
                "tokens": r["tokens"],
                "start_ns": int(lw.start[ci]),
                "end_ns": int(lw.end[ci]),
                "source": "cpu_launch_window",
                "cpu": ci,
                "device": -1,
                "gpu_cover": None,
                "switched": False,
                "widened": 0,
                "has_launches": bool(lw.end[ci] > lw.start[ci]),
            }
        )
    steps, empty, health_extra = _drop_empty(ctx, rows, lw)
    if not steps:
        why = f"{empty} span(s), all empty" if empty else "no span with GPU work"
        tried.append(f"{label} ({why}{_under_recorded_note(health_extra)})")
        return None
    table, overlap_warnings = _resolve_overlaps(ctx.trace, pd.DataFrame(steps), label)
    below = int((table["end_ns"] - table["start_ns"] <= options.min_step_ns).sum())
    table = table[table["end_ns"] - table["start_ns"] > options.min_step_ns]
    if table.empty:
        tried.append(f"{label} ({below} step(s), none longer than {options.min_step_ns / 1e6:g} ms)")
        return None
    phases = table["phase"].value_counts().to_dict()
    table, warnings = _select_phase(ctx.trace, table, options, label)
    warnings = overlap_warnings + warnings
    table = table.sort_values("start_ns", kind="stable").reset_index(drop=True)
    table["step"] = np.arange(len(table), dtype=np.int64)
    table["dur_ns"] = table["end_ns"] - table["start_ns"]
    health = health_table(ctx, table, lw, health_extra)
    table["kernels"] = kernels_per_step(ctx, table)
    out = table[STEP_COLUMNS].copy()
    out["bs"] = out["bs"].astype("Int64")
    out["tokens"] = out["tokens"].astype("Int64")
    out["kernels"] = out["kernels"].astype(np.int64)
    st = Steps(
        out,
        marker=label,
        match=how,
        options=options,
        candidates=candidates,
        empty=empty,
        below_floor=below,
        phases={str(k): int(v) for k, v in phases.items()},
        health=health,
        warnings=warnings,
    )
    return with_health_warnings(ctx.trace, st, table)


def _gpu_cover(g: pd.DataFrame, pair: np.ndarray, lw: Launches) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU span: the busy time of the work launched in its CPU span that lies inside it, and how many
    launched activities lie (partly) outside it."""
    n = len(g)
    g_of_c = np.full(lw.busy.size, -1, dtype=np.int64)
    g_of_c[pair[pair >= 0]] = np.flatnonzero(pair >= 0)
    gi = g_of_c[lw.act_span] if lw.act_span.size else np.empty(0, np.int64)
    ok = gi >= 0
    gi, a_s, a_e = gi[ok], lw.act_start[ok], lw.act_end[ok]
    gs, ge = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    covered = iv.measure_by_group(gi, np.maximum(a_s, gs[gi]), np.minimum(a_e, ge[gi]), n)
    outside = np.bincount(gi[(a_s < gs[gi]) | (a_e > ge[gi])], minlength=n)
    return covered, outside


def _from_gpu_span(
    ctx: StepActivity, options: StepOptions, r: dict, ci: int, lw: Launches, covered: int, outside: int
) -> dict:
    s, e = int(r["start_ns"]), int(r["end_ns"])
    row = {
        "name": r["name"],
        "phase": r["phase"],
        "bs": r["bs"],
        "tokens": r["tokens"],
        "start_ns": s,
        "end_ns": e,
        "source": "gpu_annotation",
        "cpu": ci,
        "device": int(r["device"]),
        "gpu_cover": None,
        "switched": False,
        "widened": 0,
        "has_launches": False,
    }
    if ci < 0 or lw.busy[ci] <= 0:
        return row
    row["has_launches"] = True
    row["gpu_cover"] = covered / float(lw.busy[ci])
    if options.source == "auto" and row["gpu_cover"] < ctx.rules.gpu_cover_min:
        row.update(start_ns=int(lw.start[ci]), end_ns=int(lw.end[ci]), source="cpu_launch_window", switched=True)
    elif options.source == "auto" and outside:
        row.update(start_ns=min(s, int(lw.start[ci])), end_ns=max(e, int(lw.end[ci])), widened=outside)
    return row


def _drop_empty(ctx: StepActivity, rows: list[dict], lw: Launches) -> tuple[list[dict], int, dict]:
    """Steps are the candidates that hold GPU work; an empty marker is counted, a lost replay noted."""
    if not rows:
        return [], 0, {"under_recorded_markers": 0}
    ws = np.array([r["start_ns"] for r in rows], dtype=np.int64)
    we = np.array([r["end_ns"] for r in rows], dtype=np.int64)
    valid = we > ws
    busy = np.where(valid, iv.measure_in_windows(ctx.busy_set, np.where(valid, ws, 0), np.where(valid, we, 0)), 0)
    # a marker whose CPU span launched GPU work is judged by that work, not by whatever else ran in its window:
    # an empty run_batch that launches one kernel while the GPU still runs the previous step is still empty
    ci = np.array([r["cpu"] for r in rows], dtype=np.int64)
    own = np.where(ci >= 0, lw.busy[np.clip(ci, 0, None)] if lw.busy.size else 0, 0)
    busy = np.where(own > 0, np.minimum(busy, own), busy)
    lost = np.array([r["cpu"] >= 0 and lw.graphs_empty[r["cpu"]] > 0 for r in rows], dtype=bool)
    phase = np.array([r["phase"] for r in rows], dtype=object)
    keep = busy > 0
    for p in set(phase.tolist()):  # far less than the dialect's other spans of the same phase
        same = (phase == p) & keep & ~lost
        if same.sum() >= 2:
            keep &= ~(same & (busy < ctx.rules.empty_fraction * np.median(busy[same])))
    wall = np.where(valid, we, 0) - np.where(valid, ws, 0)  # a CPU span that launched nothing has no window: 0
    keep |= empty_steps(rows, wall, keep & ~lost, ~lost, ctx.rules.empty_fraction)
    # a step whose graph replays were not recorded stays (and is flagged) as long as something of it is left
    under = int((~keep & lost).sum())
    kept = [r for r, k in zip(rows, keep.tolist()) if k]
    return kept, len(rows) - len(kept), {"under_recorded_markers": under}


def empty_steps(
    rows: list[dict], wall: np.ndarray, work: np.ndarray, eligible: np.ndarray, fraction: float
) -> np.ndarray:
    """Which candidates are empty steps: a GPU span as the marker wrote it (not replaced by a launch window) that
    holds no work of its own (``work`` False) but lasts at least ``fraction`` of the median wall of the candidates of
    its phase that hold work (of all of them when its phase has none). Its window is real GPU time in which the GPU
    ran nothing: idle time a user should see, not a marker to leave out. sglang's idle run_batch markers last a few
    µs against steps of many ms: they stay out (docs/steps.md)."""
    out = np.zeros(len(rows), dtype=bool)
    if not work.any():
        return out
    span = np.array([r["source"] == "gpu_annotation" and not r["switched"] for r in rows], dtype=bool)
    phase = np.array([r["phase"] for r in rows], dtype=object)
    for p in set(phase[span & ~work & eligible].tolist()):  # per phase: phases are few
        ref = work & (phase == p)
        median = float(np.median(wall[ref if ref.any() else work]))
        out |= span & ~work & eligible & (phase == p) & (wall > 0) & (wall >= fraction * median)
    return out


def _under_recorded_note(extra: dict) -> str:
    n = extra.get("under_recorded_markers", 0)
    return f"; {n} of them launched CUDA graphs whose replays left no GPU events (under-recorded)" if n else ""


def _resolve_overlaps(trace: Trace, table: pd.DataFrame, label: str) -> tuple[pd.DataFrame, list[str]]:
    """One rule for markers that overlap, so no nanosecond is in two steps: a window inside another is not a step
    of its own (it is part of the outer one); a window that starts before the previous one ends cuts it there."""
    t = table.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)
    s, e = t["start_ns"].to_numpy(np.int64), t["end_ns"].to_numpy(np.int64)
    # nested: its end is not after the end of every window before it (the last kept one holds that running max)
    before = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], e[:-1]])) if e.size else e
    keep = e > before
    nested = int((~keep).sum())
    t = t[keep].reset_index(drop=True)
    ks, ke = s[keep], e[keep].copy()
    cutting = ke[:-1] > ks[1:]
    ke[:-1] = np.where(cutting, ks[1:], ke[:-1])
    cut = int(cutting.sum())
    t["end_ns"] = ke
    warnings = []
    if nested:
        warnings.append(
            f"{trace.path}: {nested} {label} marker(s) lie inside another one and are part of it, not"
            " steps of their own"
        )
    if cut:
        warnings.append(f"{trace.path}: {cut} {label} window(s) overlap the next one and end where it starts")
    return t, warnings


def _select_phase(trace: Trace, table: pd.DataFrame, options: StepOptions, label: str):
    warnings: list[str] = []
    counts = table["phase"].value_counts()
    if options.phase == "all":
        return table, warnings
    if options.phase == "auto":
        if "decode" in counts.index:
            others = {p: int(n) for p, n in counts.items() if p != "decode"}
            if others:
                warnings.append(
                    f"{trace.path}: analysing the {int(counts['decode'])} decode step(s) of {label};"
                    f" left out {_phase_text(others)} (--phase all keeps them)"
                )
            return table[table["phase"] == "decode"], warnings
        known = {p: int(n) for p, n in counts.items() if p != "unknown"}
        if known:
            warnings.append(
                f"{trace.path}: no decode step among the {label} markers; analysing all"
                f" {len(table)} step(s) ({_phase_text(counts.to_dict())})"
            )
        return table, warnings
    chosen = table[table["phase"] == options.phase]
    if chosen.empty:
        raise MissingDataError(
            f"{trace.path}: no {options.phase} step among the {label} markers (phases present:"
            f" {_phase_text(counts.to_dict())}); pass --phase all or another phase"
        )
    return chosen, warnings


def _phase_text(counts: dict) -> str:
    return ", ".join(f"{int(n)} {p}" for p, n in sorted(counts.items(), key=lambda x: -x[1]))


def _whole_trace(ctx: StepActivity, options: StepOptions, tried: list[str]) -> Steps:
    trace = ctx.trace
    if ctx.gs.size == 0:
        raise MissingDataError(
            f"{trace.path} has no GPU activity (kernel, gpu_memcpy or gpu_memset events), so"
            f" there is no step to analyse; record the trace with {record_hint(trace.meta, 'gpu')}"
        )
    s, e = int(ctx.gs.min()), int(ctx.ge.max())
    table = pd.DataFrame(
        {
            "step": [0],
            "name": ["whole trace"],
            "phase": ["unknown"],
            "bs": pd.array([None], dtype="Int64"),
            "tokens": pd.array([None], dtype="Int64"),
            "start_ns": [s],
            "dur_ns": [e - s],
            "end_ns": [e],
            "source": ["whole_trace"],
            "cpu": [-1],
            "gpu_cover": [None],
            "switched": [False],
            "widened": [0],
        }
    )
    lw = ctx.launches_in(np.empty(0, np.int64), np.empty(0, np.int64))
    health = health_table(ctx, table, lw, {})
    table["kernels"] = kernels_per_step(ctx, table)
    detail = f" ({'; '.join(tried)})" if tried else ""
    warn = (
        f"{trace.path}: no step marker{detail}; the whole GPU span ({(e - s) / 1e6:,.3f} ms) is analysed as one"
        f" step; annotations present: {_annotations_present(ctx)} (pass --step-name NAME to use one)"
    )
    st = Steps(
        table[STEP_COLUMNS].copy(),
        marker="whole trace",
        match="whole_trace",
        options=options,
        health=health,
        warnings=[warn],
        phases={"unknown": 1},
    )
    return with_health_warnings(trace, st, table)


def _annotation_names(ctx: StepActivity) -> pd.Series:
    """The name of every annotation event (GPU and CPU spans), in the events' order."""
    rows = np.union1d(ctx.annotation_rows("gpu_annotation"), ctx.annotation_rows("cpu_annotation"))
    return ctx.ev["name"].take(rows)


def _annotations_present(ctx: StepActivity) -> str:
    counts = _annotation_names(ctx).astype(str).value_counts()
    present = ", ".join(f"{n} ({c})" for n, c in counts.head(12).items()) or "none"
    if len(counts) > 12:
        present += f", … ({len(counts)} distinct)"
    return present


def _no_steps_message(ctx: StepActivity, step_name: str, tried: list[str]) -> str:
    trace = ctx.trace
    present = _annotations_present(ctx)
    detail = f" ({'; '.join(tried)})" if tried else ""
    return (
        f"{trace.path} has no step marked '{step_name}'{detail}; annotations present: {present};"
        " pass another --step-name (exact, or a regex matching the whole name) or none to use the dialects"
    )
