"""`tracekit annotations`: the shipped annotations, and with a trace how well each one fits it (docs/annotation-fit.md).

Each annotation is run through the block engine (:func:`tracekit.analyses.structure.blocks.annotated_steps`) and judged by
parts, each a number in [0, 1] or None (not judged):

* ``marker`` — the annotation's step marker is in the trace (one naming no marker: a step dialect found steps);
* ``typed`` — median over steps of the share of the step's main-stream kernel time that lies in typed body blocks
  (typed by a rule or the default; not ``untyped``, and not the head/tail blocks that ``position`` types);
* ``tags`` — median over steps of the share of the annotation's op tags that tag at least one kernel;
* ``layers`` — how the body blocks per step agree with the automatic layers (:mod:`tracekit.analyses.structure.layers`):
  min/max of the two counts, the layers counted once or once per segment (an attention and an MLP block per layer);
* ``expect`` — median over steps of the share of ``blocks.expect`` counts met (within fit.json's
  ``expect_tolerance``: a per-layer type one layer either way, :func:`tracekit.annotation.blocks.expect_met`);
* ``comm`` — the share of the annotation's ``comm_patterns`` that match a kernel in the steps;
* ``allgather`` — the share of the trace's weight AllGathers, cut with the annotation's ``allgather`` options, whose
  full size is one of its ``allgather.sizes`` (judged when it has sizes and the trace has sized AllGathers);
* ``hardware`` / ``framework`` — the GPU vendor and serving framework the annotation's text names against the
  trace's (detected hardware profile or runtime calls; the step dialect that found the steps).

The score is the weighted mean of the judged parts; the weights, the words and the threshold above which an
annotation "fits" are data (``tracekit/data/fit.json``). An annotation the engine refuses (no ``blocks``, its main
stream absent, …) is not scored (score and parts null) and says why; one scored that does not fit names the parts that
fell short (:func:`shortfall`).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from ...annotation import Annotation, as_annotation
from ...annotation.blocks import UNTYPED, expect_met
from ...annotation.spec import shipped
from ...errors import TracekitError, UsageError
from ...events import kinds_mask
from ...result import Result, trace_input
from ...trace import Trace
from ..steps.resolve import annotated_steps
from ..steps.resolve import Steps, find_steps
from ...result import merge_warnings
from ..steps.keywords import options_as_objects
from ...errors import check_argument

RULES_FILE = "tracekit/data/fit.json"
PARTS = ("marker", "typed", "tags", "layers", "expect", "comm", "allgather", "hardware", "framework")
FIT_COLUMNS = [
    "rank",
    "name",
    "score",
    "fits",
    *PARTS,
    "steps",
    "blocks_per_step",
    "body_blocks_per_step",
    "auto_layers_per_step",
    "declared_hardware",
    "trace_hardware",
    "declared_framework",
    "trace_framework",
    "reason",
    "file",
]
LIST_COLUMNS = ["name", "description", "hardware", "frameworks", "blocks_per_step", "aliases", "file"]


@lru_cache(maxsize=1)
def fit_rules() -> dict:
    """The weights, words and threshold of ``tracekit/data/fit.json``."""
    return json.loads(resources.files("tracekit.data").joinpath("fit.json").read_text(encoding="utf-8"))


def fits_above() -> float:
    """The score an annotation must exceed to fit a trace."""
    return float(fit_rules()["fits_above"])


# --------------------------------------------------------------------------------------------------
# what an annotation says it covers
# --------------------------------------------------------------------------------------------------


def _text(ann: Annotation) -> str:
    return " ".join([ann.name, *ann.aliases, ann.description])


def declared_hardware(ann: Annotation) -> list[str]:
    """The GPU vendors the annotation's name, aliases and description name (fit.json ``hardware`` and the shipped
    hardware profile names)."""
    from ...gpu_specs import shipped_profiles

    text = _text(ann)
    found = [r["vendor"] for r in fit_rules()["hardware"] if re.search(r["pattern"], text, re.I)]
    for p in shipped_profiles().values():
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(p.name)}(?![A-Za-z0-9])", text, re.I):
            found.append(p.vendor)
    return sorted(set(found))


def declared_frameworks(ann: Annotation) -> list[str]:
    """The serving frameworks the annotation's text names (fit.json ``frameworks``)."""
    text = _text(ann)
    return sorted({r["framework"] for r in fit_rules()["frameworks"] if re.search(r["pattern"], text, re.I)})


def _expected_blocks(ann: Annotation) -> int | None:
    return int(sum(ann.blocks.expect.values())) if ann.blocks is not None and ann.blocks.expect else None


def _candidates(annotations) -> list[tuple[str, Annotation | None, str, str]]:
    """(name, annotation or None, file, reason) for the given annotations, or every shipped one (one per file)."""
    if annotations is None:
        files = sorted(set(shipped().values()), key=lambda p: p.stem)
        refs: list = [str(p) for p in files]
    elif isinstance(annotations, (str, Path, Annotation)):
        refs = [annotations]
    else:
        refs = list(annotations)
    out = []
    for ref in refs:
        try:
            ann = as_annotation(ref, name="annotations")
        except UsageError:
            raise
        except TracekitError as exc:  # a shipped file that does not parse is listed with its reason
            out.append((Path(str(ref)).stem, None, str(ref), str(exc)))
            continue
        out.append((ann.name, ann, ann.source, ""))
    return out


def _listing(cands) -> pd.DataFrame:
    rows = []
    for name, ann, file, reason in cands:
        if ann is None:
            rows.append(
                {
                    "name": name,
                    "aliases": [],
                    "hardware": [],
                    "frameworks": [],
                    "blocks_per_step": None,
                    "description": reason,
                    "file": file,
                }
            )
            continue
        rows.append(
            {
                "name": name,
                "aliases": list(ann.aliases),
                "hardware": declared_hardware(ann),
                "frameworks": declared_frameworks(ann),
                "blocks_per_step": _expected_blocks(ann),
                "description": ann.description,
                "file": file,
            }
        )
    return pd.DataFrame(rows, columns=LIST_COLUMNS)


# --------------------------------------------------------------------------------------------------
# what the trace is
# --------------------------------------------------------------------------------------------------


def trace_vendor(trace: Trace) -> str | None:
    """The GPU vendor of a trace: its detected hardware profile's, else from its runtime calls (hipLaunchKernel)."""
    from ...gpu_specs import detect_profile

    prof = detect_profile(trace.meta)
    if prof is not None:
        return prof.vendor
    names = _names_of_kind(trace, "runtime")
    for r in fit_rules()["runtime_vendor"]:
        if any(re.search(r["pattern"], n) for n in names):
            return r["vendor"]
    return None


def _names_at(ev: pd.DataFrame, rows: np.ndarray) -> list[str]:
    """The distinct names of the rows (a mask), from the name column's codes: no string column is made."""
    col = ev["name"]
    codes = col.cat.codes.to_numpy()[rows]
    cats = col.cat.categories
    # the sorted distinct codes by one count per category (np.unique sorted every row's code)
    used = np.flatnonzero(np.bincount(codes[codes >= 0].astype(np.int64), minlength=len(cats)))
    return [str(cats[c]) for c in used.tolist()]


def _names_of_kind(trace: Trace, kind: str) -> list[str]:
    """The distinct names of one kind of event (kernel, runtime, ...), once per trace (``trace.derived``)."""
    key = ("names_of_kind", kind, len(trace.events))
    hit = trace.derived.get(key)
    if hit is None:
        ev = trace.events
        hit = trace.derived[key] = _names_at(ev, kinds_mask(ev, (kind,)))
    return hit


def trace_framework(st: Steps) -> str | None:
    """The serving framework of a trace, from the step dialect that found its steps (None: no dialect did)."""
    for r in fit_rules()["dialect_framework"]:
        if re.search(r["pattern"], st.match or ""):
            return r["framework"]
    return None


def _marker_found(trace: Trace, ann: Annotation, st: Steps) -> float:
    """1 when the annotation's step marker is in the trace (exact name, else a regex matching a whole name); an
    annotation naming no marker: 1 when a step dialect found the steps (not the whole-trace fallback)."""
    if ann.step.name is None:
        return 0.0 if st.match == "whole_trace" else 1.0
    names = [str(c) for c in trace.events["name"].cat.categories]
    if ann.step.name in names:
        return 1.0
    try:
        rx = re.compile(ann.step.name)
    except re.error:
        return 0.0
    return 1.0 if any(rx.fullmatch(n) for n in names) else 0.0


def _auto_layers(trace: Trace, st: Steps, layers) -> tuple[float | None, int | None]:
    """(automatic layers per step, segments per layer), from a ``tracekit.layers`` Result when given."""
    if layers is None:
        from .layers import layers as find

        try:
            layers = find(trace, steps=st)
        except TracekitError:
            return None, None
    s = layers.summary
    n = s.get("layers_per_step")
    return (float(n) if n else None), s.get("segments_per_layer")


# --------------------------------------------------------------------------------------------------
# judging one annotation
# --------------------------------------------------------------------------------------------------


def _median(values) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.median(v)) if v else None


def _cuts_no_block(trace: Trace, ann: Annotation, main_names: dict) -> str:
    """Why the engine would cut no block ('' when it would): no kernel of the main stream matches a boundary.
    Checked on the distinct names, so that an annotation of another model costs no engine run."""
    if ann.blocks is None:
        return ""  # the engine says why
    from ...annotation.blocks import resolve_main_stream
    from ...regexes import bounded
    from .layers import auto_main_stream

    key = ann.main_stream if isinstance(ann.main_stream, int) else None
    if key not in main_names:
        ev = trace.events
        # no stream named: the automatic layers' main stream, found once per events table
        dev, stream = resolve_main_stream(ev, ann) if key is not None else auto_main_stream(trace)
        on = kinds_mask(ev, ("kernel",)) & (ev["device"].to_numpy() == dev) & (ev["stream"].to_numpy() == stream)
        main_names[key] = ((dev, stream), _names_at(ev, on))
    (dev, stream), names = main_names[key]
    for rule in ann.blocks.boundary:
        rx = bounded(rule if isinstance(rule, str) else rule.pattern, "blocks.boundary")
        if any(rx.search(n) for n in names):
            return ""
    return (
        f"no kernel of the main stream (device {dev}, stream {stream}) matches its blocks.boundary, so it cuts no block"
    )


def _judge(trace: Trace, ann: Annotation, steps, auto: tuple[float | None, int | None]) -> dict:
    st, a = annotated_steps(trace, ann, steps=steps, what="annotations", keep=False)
    b = a.blocks
    ev = a.events
    spec = ann.blocks
    step_ids = st.table["step"].to_numpy()
    # body blocks: typed by a rule or the default, not the head/tail that position sets
    last = b.groupby("step")["block"].transform("max") if len(b) else pd.Series(dtype=np.int64)
    pos_first = (b["block"] == 0) & bool(spec.position.first)
    pos_last = (b["block"] == last) & bool(spec.position.last)
    body = ~(pos_first | pos_last) & (b["block_type"] != UNTYPED)
    is_kernel = (ev["kind"] == "kernel").to_numpy()
    dev, stream = a.main_stream
    main = (
        is_kernel
        & (ev["device"].to_numpy() == dev)
        & (ev["stream"].to_numpy() == stream)
        & (ev["step"].to_numpy() >= 0)
    )
    dur = ev["dur_ns"].to_numpy()
    step_col = ev["step"].to_numpy()
    ev_block = ev["block"].to_numpy()
    width = int(max(b["block"].max() if len(b) else 0, ev_block.max() if len(ev_block) else 0)) + 1
    body_keys = b.loc[body, "step"].to_numpy(np.int64) * width + b.loc[body, "block"].to_numpy(np.int64)
    in_body = np.isin(step_col[main].astype(np.int64) * width + ev_block[main].astype(np.int64), body_keys) & (
        ev_block[main] >= 0
    )
    tot = pd.Series(dur[main]).groupby(step_col[main]).sum()
    typed_ns = pd.Series(dur[main] * in_body).groupby(step_col[main]).sum()
    typed = _median([(typed_ns.get(s, 0) / tot[s]) if tot.get(s, 0) > 0 else 0.0 for s in step_ids])
    tags = None
    want = sorted({r.tag for r in ann.op_tags})
    if want:
        tagged = ev.loc[is_kernel & ev["op_tag"].notna().to_numpy() & (step_col >= 0), ["step", "op_tag"]]
        per = tagged.astype({"op_tag": str}).drop_duplicates().groupby("step")["op_tag"].nunique()
        tags = _median([per.get(s, 0) / len(want) for s in step_ids])
    expect = None
    if spec.expect:
        counts = b.groupby(["step", "block_type"]).size()
        expect = _median(
            [np.mean([bool(expect_met(counts.get((s, t), 0), n)) for t, n in spec.expect.items()]) for s in step_ids]
        )
    comm = None
    if ann.comm_patterns:  # the communication kernels the annotation adds: found in the steps at all
        from ...events import name_mask

        in_steps = is_kernel & (step_col >= 0)
        comm = float(np.mean([bool((name_mask(ev, r.pattern) & in_steps).any()) for r in ann.comm_patterns]))
    body_per_step = _median([int(((b["step"] == s) & ~(pos_first | pos_last)).sum()) for s in step_ids])
    n_auto, k = auto
    layers = None
    if n_auto and body_per_step is not None:
        ratios = [min(body_per_step, n_auto * m) / max(body_per_step, n_auto * m) for m in {1, k or 1}]
        layers = max(ratios) if body_per_step else 0.0
    blocks_per_step = _median([int((b["step"] == s).sum()) for s in step_ids])
    return {
        "marker": _marker_found(trace, ann, st),
        "typed": typed,
        "tags": tags,
        "layers": layers,
        "expect": expect,
        "comm": comm,
        "allgather": _allgather_share(trace, ann, st),
        "steps": int(len(st.table)),
        "blocks_per_step": blocks_per_step,
        "body_blocks_per_step": body_per_step,
        # what the engine says of the annotation; the step finder's notes (phases left out, ...) are the trace's
        "warnings": [w for w in a.warnings if w not in st.warnings],
    }


def _allgather_share(trace: Trace, ann: Annotation, st: Steps) -> float | None:
    """The share of the trace's weight AllGathers (cut with the annotation's ``allgather`` options, in its steps'
    table) whose full size is one of its ``allgather.sizes``; None when it gives no sizes or the trace has no
    AllGather with a known size."""
    if not ann.allgather.sizes:
        return None
    from ..comm.segments import UNKNOWN_SIZE, UNMATCHED, segment_allgathers
    from ..options import AllGatherOptions

    try:
        ag = segment_allgathers(trace, ag=AllGatherOptions().with_annotation(ann), steps=st)
    except TracekitError:  # no PtoP copies: nothing to judge
        return None
    types = ag.per_ag["type"]
    known = types[types != UNKNOWN_SIZE]
    return float((known != UNMATCHED).mean()) if len(known) else None


def _any_name(trace: Trace, pattern: str, where: str) -> bool:
    """Whether the pattern matches some kernel name of the trace: once per distinct pattern and trace
    (``trace.derived``; annotations share their patterns, and a pattern that fails is not remembered)."""
    from ...regexes import bounded

    key = ("kernel_name_hit", pattern, len(trace.events))
    hit = trace.derived.get(key)
    if hit is None:
        rx = bounded(pattern, where)
        hit = trace.derived[key] = any(rx.search(n) for n in _names_of_kind(trace, "kernel"))
    return hit


def _ceiling(trace: Trace, ann: Annotation, st: Steps, row: dict, auto: tuple[float | None, int | None]) -> float:
    """The most the annotation can score on the trace, judged without the block engine: the marker, hardware and
    framework parts as they are, and every part the engine would judge at its best that the kernel names allow
    (a part at 1 never lowers a weighted mean of parts in [0, 1], so this bounds the score from above):

    * ``typed`` 0 when the annotation has no ``position.default`` and no type rule's ``contains`` matches a kernel
      name (every block is then untyped, or the head or tail), else 1;
    * ``tags`` the share of its op tags with a pattern matching some kernel name;
    * ``expect`` the share of ``blocks.expect`` types that some block can have (a type rule whose ``contains``
      matches a kernel name, a position) or that expect none;
    * ``comm`` the share of ``comm_patterns`` matching some kernel name; ``layers`` 1 when judged; ``allgather`` 1
      when the annotation gives sizes."""
    spec = ann.blocks
    rule_hits = [_any_name(trace, r.contains, f"blocks.types[{i}].contains") for i, r in enumerate(spec.types)]
    typed_ok = bool(spec.position.default) or any(rule_hits)
    parts = {
        "marker": _marker_found(trace, ann, st),
        "typed": 1.0 if typed_ok else 0.0,
        "hardware": row.get("hardware"),
        "framework": row.get("framework"),
        "layers": 1.0 if auto[0] else None,
        "tags": None,
        "expect": None,
        "comm": None,
        "allgather": 1.0 if ann.allgather.sizes else None,  # at best every AllGather matches a size
    }
    want = sorted({r.tag for r in ann.op_tags})
    if want:
        can = {r.tag for i, r in enumerate(ann.op_tags) if _any_name(trace, r.pattern, f"op_tags[{i}].pattern")}
        parts["tags"] = len(can & set(want)) / len(want)
    if spec.expect:
        made = {r.type for r, hit in zip(spec.types, rule_hits) if hit}
        made |= {t for t in (spec.position.first, spec.position.last, spec.position.default, UNTYPED) if t}
        parts["expect"] = float(np.mean([n == 0 or t in made for t, n in spec.expect.items()]))
    if ann.comm_patterns:
        parts["comm"] = float(
            np.mean(
                [_any_name(trace, r.pattern, f"comm_patterns[{i}].pattern") for i, r in enumerate(ann.comm_patterns)]
            )
        )
    return _score(parts)


def _cannot_fit(trace: Trace, ann: Annotation, steps, row: dict, auto) -> str:
    """Why the annotation cannot fit (its ceiling is not above ``fits_above``), or '' when it may: then only the
    block engine can tell."""
    if ann.blocks is None:
        return ""
    try:
        st = find_steps(trace, steps, ann=ann)  # what the engine would use (found once per options)
        if not len(st.table):
            return ""
        top = _ceiling(trace, ann, st, row, auto)
    except TracekitError:
        return ""  # the engine says why
    # the engine's score is at most `top` (up to rounding): it cannot be above the threshold when this is not
    if round(top + 1e-9, 4) <= fits_above():
        return (
            f"cannot fit: at most {top:.2f} from the kernel names, markers and hardware (fitting takes more than"
            f" {fits_above():g})"
        )
    return ""


def shortfall(row: dict) -> str:
    """Why a scored annotation does not fit: the judged parts that fell short (under fit.json's ``shortfall_below``),
    the largest weighted loss first, each in fit.json's ``shortfall`` words (e.g. "its AllGather sizes match none
    of the trace's")."""
    rules = fit_rules()
    words, weights = rules["shortfall"], rules["weights"]
    short = [
        (weights.get(p, 0) * (1 - row[p]), p)
        for p in PARTS
        if row.get(p) is not None and row[p] < rules["shortfall_below"] and weights.get(p, 0) > 0
    ]
    said = []
    for _, p in sorted(short, key=lambda lp: (-lp[0], PARTS.index(lp[1])))[: rules["shortfall_parts"]]:
        text = words.get(f"{p}_none") if row[p] == 0 and f"{p}_none" in words else words[p]
        said.append(
            text.format(
                pct=f"{row[p]:.0%}",
                body=_said(row.get("body_blocks_per_step")),
                auto=_said(row.get("auto_layers_per_step")),
                **{k: _said(row.get(k)) for k in _NAMED},
            )
        )
    return "; ".join(said)


_NAMED = ("declared_hardware", "trace_hardware", "declared_framework", "trace_framework")


def _said(value) -> str:
    """A row's value as words: a list joined with "/", a number without a trailing .0, unknown as "unknown"."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "unknown"
    if isinstance(value, (list, tuple)):
        return "/".join(map(str, value)) or "unknown"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _score(parts: dict) -> float:
    weights = fit_rules()["weights"]
    judged = [(weights[p], parts[p]) for p in PARTS if parts.get(p) is not None and weights.get(p, 0) > 0]
    if not judged:
        return 0.0
    return float(sum(w * v for w, v in judged) / sum(w for w, _ in judged))


def _fit_table(trace: Trace, cands, steps, layers, *, only_fitting: bool = False) -> tuple[pd.DataFrame, Steps]:
    """``only_fitting``: run the engine only on annotations that could fit (:func:`_cannot_fit`); the others are
    unscored, with the reason. The top annotation, when it fits, is the same."""
    base = find_steps(trace, steps)
    auto = _auto_layers(trace, base, layers)
    vendor = trace_vendor(trace)
    framework = trace_framework(base)
    rows = []
    main_names: dict = {}
    for name, ann, file, reason in cands:
        row: dict = {
            "name": name,
            "file": file,
            "reason": reason,
            "trace_hardware": vendor,
            "trace_framework": framework,
            "auto_layers_per_step": auto[0],
        }
        if ann is not None:
            hw, fw = declared_hardware(ann), declared_frameworks(ann)
            row.update(
                declared_hardware=hw,
                declared_framework=fw,
                hardware=None if not hw or vendor is None else float(vendor in hw),
                framework=None if not fw or framework is None else float(framework in fw),
            )
            try:
                row["reason"] = _cuts_no_block(trace, ann, main_names)
                if not row["reason"] and only_fitting:
                    row["reason"] = _cannot_fit(trace, ann, steps, row, auto)
                if not row["reason"]:
                    row.update(_judge(trace, ann, steps, auto))
            except TracekitError as exc:
                row["reason"] = str(exc)
        if row["reason"]:  # not scored: every part and the score unknown (null), the reason says why
            row.update({p: None for p in PARTS}, score=None)
        else:
            row["score"] = round(_score(row), 4)
            said = [shortfall(row)] if row["score"] <= fits_above() else []
            row["reason"] = "; ".join(r for r in [*said, *row.get("warnings", [])[:1]] if r)
        rows.append(row)
    df = pd.DataFrame(rows)
    for c in FIT_COLUMNS:
        if c not in df:
            df[c] = None
    df["score"] = df["score"].astype(float)
    df = df.sort_values(["score", "name"], ascending=[False, True], kind="stable", na_position="last")
    df = df.reset_index(drop=True)
    df["rank"] = np.arange(1, len(df) + 1)
    df["fits"] = df["score"] > fits_above()  # an unscored annotation (NaN) does not fit
    for c in PARTS:
        df[c] = df[c].astype(float).round(4)
    return df[FIT_COLUMNS], base


@options_as_objects
def annotation_fit(trace: Trace | None = None, *, steps=None, annotations=None, layers=None) -> Result:
    """`tracekit annotations [TRACE]`: the shipped annotations (or ``annotations``: names, paths or Annotations) and
    what each covers; with a trace, how well each fits it, ranked (module docstring; docs/annotation-fit.md).

    ``steps`` (Steps, StepOptions or a table): judge every annotation on these steps; None: each on its own step
    options, as ``tracekit blocks -a NAME`` would. ``layers``: a ``tracekit.layers`` Result of the same trace and
    steps, reused instead of finding the automatic layers again. Summary: ``best`` (the top annotation when its
    score is above ``fits_above``, else None), ``best_score`` (the top score), ``annotations`` (how many)."""
    cands = _candidates(annotations)
    threshold = fits_above()
    if trace is None:
        return Result(
            command="annotations",
            inputs=[],
            params={"annotations": _names(annotations)},
            summary={"best": None, "best_score": None, "annotations": len(cands), "fits_above": threshold},
            tables={"annotations": _listing(cands)},
            warnings=[f"{r}" for _, a, _, r in cands if a is None],
        )
    df, base = _fit_table(trace, cands, steps, layers)
    top = df.iloc[0] if len(df) else None
    best = str(top["name"]) if top is not None and bool(top["fits"]) else None
    warnings = list(trace.report.warnings)
    if top is not None and best is None and pd.isna(top["score"]):
        warnings.append(f"no annotation fits {trace.path}: none cuts a block in it: `tracekit suggest` writes one")
    elif top is not None and best is None:
        warnings.append(
            f"no annotation fits {trace.path} (the best, {top['name']}, scores {top['score']:.2f};"
            f" fitting takes more than {threshold:g}): `tracekit suggest` writes one"
        )
    return Result(
        command="annotations",
        inputs=[trace_input(trace)],
        params={"annotations": _names(annotations), **(base.options.as_params() if steps is not None else {})},
        summary={
            "best": best,
            "best_score": float(top["score"]) if top is not None and pd.notna(top["score"]) else None,
            "annotations": len(cands),
            "fits_above": threshold,
        },
        tables={"annotations": df},
        warnings=merge_warnings(warnings),
    )


def _names(annotations) -> list[str] | None:
    if annotations is None:
        return None
    refs = [annotations] if isinstance(annotations, (str, Path, Annotation)) else list(annotations)
    return [r.name if isinstance(r, Annotation) else str(r) for r in refs]


def best_fit(trace: Trace, steps=None, *, layers=None) -> tuple[str, float] | None:
    """(name, score) of the shipped annotation that fits the trace, or None when none scores above ``fits_above``.
    What ``report`` says when it runs without an annotation; pass its ``layers`` Result to reuse the automatic
    layers it found."""
    check_argument(trace, "trace", "a loaded Trace (tracekit.load)", Trace)
    try:  # only the annotations that could fit go through the block engine: the top one is the same
        df, _ = _fit_table(trace, _candidates(None), steps, layers, only_fitting=True)
    except TracekitError:  # a suggestion never fails the report
        return None
    if not len(df) or not bool(df.iloc[0]["fits"]):
        return None
    return str(df.iloc[0]["name"]), float(df.iloc[0]["score"])


__all__ = [
    "annotation_fit",
    "best_fit",
    "shortfall",
    "declared_frameworks",
    "declared_hardware",
    "fit_rules",
    "fits_above",
    "trace_framework",
    "trace_vendor",
]
