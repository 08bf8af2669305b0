"""`tracekit suggest`: an annotation written from the automatic layers, checked by running the engine on it.

What it infers (docs/layers.md):

* **step**: the marker the steps were found by (``--step-name`` when given; else ``null``: the dialects, which
  found them); ``min_ms`` as used.
* **blocks.boundary**: the layers' first kernels and the first kernels of the windows after each run of layers.
  The boundary kernel gets one rule that skips the second half of a layer (``unless_after`` the layers' mixer
  kernels) and the norm right after a layer opened by another kernel (``unless_block_starts_with``); other
  opening kernels fire at their n-th occurrence in the step only (``skip: n-1`` with ``unless_after: "."``). The
  annotation is then run through the engine on the trace and every rule that opens a wrong block is replaced by
  n-th occurrence rules, until the blocks equal the layers (or three rounds pass, with a warning).
* **blocks.types**: a decision list of ``contains`` rules, each with the most expensive kernel that every layer of
  its type has and no later type has; ``position`` types the head, the tail and what lies between runs. Types the
  finder split by duration only cannot be told apart by a rule: they share one block type (a warning says so).
* **op_tags**: every kernel (any stream) that every layer of a type has, tagged ``<category>`` or
  ``<category>_<n>`` (the n-th of that category in the layer), by exact name and ordinal within the block.
* **allgather**: with PtoP copies, each weight AllGather's full size, keyed by the type of the layer that starts
  after it (the layer it prefetches), and the group size.

Comments go into ``_doc`` fields where the annotation format accepts them; otherwise (the format forbids unknown
fields) they are returned in the Result (``tables.inferred``) and summarised in ``description``.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...annotation import annotate
from ...annotation.spec import parse_annotation
from ...errors import DataFileError, MissingDataError
from ...result import Result, trace_input
from ...trace import Trace
from ..categories import resolve_categories, trace_categories
from .layers import BETWEEN, HEAD, TAIL, LayerFinding, find_layers
from ..steps.keywords import options_as_objects
from ...result import merge_warnings

MAX_ROUNDS = 3
HEAD_TYPE, TAIL_TYPE, BETWEEN_TYPE = HEAD, TAIL, BETWEEN


def doc_fields_supported() -> bool:
    """Whether the annotation format accepts ``_doc`` keys (tracekit.annotation.spec)."""
    try:
        parse_annotation(b'{"name": "probe", "_doc": "x", "step": {"_doc": "x"}}', "<probe>")
        return True
    except DataFileError:
        return False


def strip_docs(obj):
    """The annotation without its ``_doc`` keys (for engines that forbid unknown fields)."""
    if isinstance(obj, dict):
        return {k: strip_docs(v) for k, v in obj.items() if k != "_doc"}
    if isinstance(obj, list):
        return [strip_docs(v) for v in obj]
    return obj


_META = re.compile(r"([.^$*+?{}\[\]\\|()])")


def _escape(name: str) -> str:
    """re.escape, but only the characters that are special in a pattern (names stay readable)."""
    return _META.sub(r"\\\1", name)


def _exact(name: str) -> str:
    return "^" + _escape(name) + "$"


def _alternation(names) -> str:
    return "^(?:" + "|".join(_escape(n) for n in sorted(set(names))) + ")$"


# --------------------------------------------------------------------------------------------------
# boundaries
# --------------------------------------------------------------------------------------------------


def _main_occurrence(ev: pd.DataFrame, found: LayerFinding) -> pd.DataFrame:
    """Main-stream kernels inside steps: row, step, name and the occurrence index of its name in the step."""
    dev, stream = found.main_stream
    k = ev[(ev["kind"] == "kernel").to_numpy() & (ev["device"].to_numpy() == dev) & (ev["stream"].to_numpy() == stream)]
    step = found.steps.step_of(k["start_ns"].to_numpy(np.int64))
    out = pd.DataFrame(
        {
            "row": np.flatnonzero(
                (ev["kind"] == "kernel").to_numpy()
                & (ev["device"].to_numpy() == dev)
                & (ev["stream"].to_numpy() == stream)
            ),
            "step": step,
            "name": k["name"].astype(str).to_numpy(),
            "start_ns": k["start_ns"].to_numpy(np.int64),
        }
    )
    out = out[out["step"] >= 0].reset_index(drop=True)
    out["occ"] = out.groupby(["step", "name"]).cumcount() + 1
    prev = out.groupby("step")["name"].shift(1)
    out["run_start"] = (prev != out["name"]).to_numpy()
    out["run_occ"] = out["run_start"].astype(np.int64).groupby([out["step"], out["name"]]).cumsum()
    return out


def _desired(found: LayerFinding) -> pd.DataFrame:
    """The windows that must be blocks: those holding kernels, with their first main-stream kernel."""
    w = found.windows
    return w[w["kernels"] > 0].reset_index(drop=True)


def _boundary_rules(
    found: LayerFinding, occ: pd.DataFrame, mixer_names: list[str], ordinal_names: set[str], warnings: list[str]
) -> list:
    w = _desired(found)
    opening = w[(w["kind"] != HEAD) & (w["first_kernel"] >= 0)]
    by_row = occ.set_index("row")
    starts = by_row.loc[opening["first_kernel"].to_numpy()]
    token = found.boundary
    rules: list = []
    other_openers = sorted({n for n in starts["name"] if n != token and n not in ordinal_names})
    per_name: dict[str, list[set]] = {
        name: [set(g["occ"]) for _, g in grp.groupby("step")] for name, grp in starts.groupby("name")
    }
    per_run: dict[str, list[set]] = {
        name: [set(g.loc[g["run_start"], "run_occ"]) for _, g in grp.groupby("step")]
        for name, grp in starts.groupby("name")
    }
    inside_runs = starts[~starts["run_start"].to_numpy()]
    for name in sorted(set(inside_runs["name"])):
        warnings.append(
            f"the kernel {name[:60]!r} opens a block right after another instance of itself; no boundary"
            " rule can pick that instance (the engine lacks a rule on the previous kernel, `after`)"
        )
    names_in_order = sorted(per_name, key=lambda n: (n != token, n))
    for name in names_in_order:
        sets = per_name[name]
        if len({frozenset(s) for s in sets}) > 1:
            warnings.append(
                f"the kernel {name[:60]!r} opens blocks at different occurrences in different steps;"
                " the suggestion uses the first step's"
            )
        if name == token and name not in ordinal_names:
            rule: dict = {"pattern": _exact(name)}
            if (found.segments_per_layer or 1) > 1 and mixer_names:
                rule["unless_after"] = _alternation(mixer_names)
            if other_openers:
                rule["unless_block_starts_with"] = _alternation(other_openers)
            rule["_doc"] = (
                "the boundary kernel: it opens every layer; the same kernel inside a layer (after its"
                " mixer kernels ran) and right after a layer opened by another kernel opens nothing"
            )
            rules.append(rule)
            continue
        all_occ = occ[occ["name"] == name].groupby("step")["occ"].max()
        wanted = sorted(sets[0])
        if name not in ordinal_names and len(wanted) == int(all_occ.min()) == int(all_occ.max()):
            rules.append({"pattern": _exact(name), "_doc": "opens a block at every occurrence"})
            continue
        for n in sorted(per_run[name][0]):
            r = {"pattern": _exact(name), "first_of_run": True, "unless_after": "."}
            if n > 1:
                r["skip"] = n - 1
            r["_doc"] = (
                f"only the start of the {n}. run of this kernel in the step opens a block (first_of_run,"
                " skip: n-1, then nothing after it)"
            )
            rules.append(r)
    return rules


# --------------------------------------------------------------------------------------------------
# types
# --------------------------------------------------------------------------------------------------


def _window_names(ev: pd.DataFrame, w: pd.DataFrame) -> list[dict[str, int]]:
    """Per window: its kernels (any stream, by start) as name -> total ns."""
    kern = np.flatnonzero((ev["kind"] == "kernel").to_numpy())
    s = ev["start_ns"].to_numpy(np.int64)[kern]
    order = np.argsort(w["start_ns"].to_numpy(np.int64), kind="stable")
    k = iv.window_of(s, w["start_ns"].to_numpy(np.int64)[order], w["end_ns"].to_numpy(np.int64)[order])
    out: list[dict[str, int]] = [dict() for _ in range(len(w))]
    names = ev["name"].astype(str).to_numpy()[kern]
    durs = ev["dur_ns"].to_numpy(np.int64)[kern]
    for i in np.flatnonzero(k >= 0).tolist():
        d = out[order[k[i]]]
        d[names[i]] = d.get(names[i], 0) + int(durs[i])
    return out


def _type_rules(w: pd.DataFrame, wnames: list[dict[str, int]], positional: set[str], warnings: list[str]):
    """A decision list of (type, kernel name) and the default type, so that the engine types every window."""
    cls = [t if k == "layer" else k for k, t in zip(w["kind"], w["base_type"])]
    classes = [c for c in dict.fromkeys(cls) if c not in positional]
    sets = {c: [set(wnames[i]) for i in range(len(w)) if cls[i] == c] for c in classes}
    cost = {c: Counter() for c in classes}
    for i in range(len(w)):
        if cls[i] in cost:
            cost[cls[i]].update(wnames[i])
    default = BETWEEN_TYPE if BETWEEN_TYPE in classes else None
    remaining = [c for c in classes if c != default]
    rules = []
    while remaining:
        picked = None
        for c in remaining:
            common = set.intersection(*sets[c]) if sets[c] else set()
            others = [s for o in remaining + ([default] if default else []) if o != c for s in sets[o]]
            cands = [n for n in common if not any(n in s for s in others)]
            if cands:
                best = max(cands, key=lambda n: (cost[c][n], n))
                if picked is None or cost[c][best] > picked[2]:
                    picked = (c, best, cost[c][best])
        if picked is None:
            if default is None and len(remaining) == 1:
                default = remaining[0]
                break
            warnings.append(
                f"no kernel tells the block types {', '.join(remaining)} apart; the engine will type them"
                f" as {remaining[0]}"
            )
            rules.append((remaining[0], None))
            break
        rules.append((picked[0], picked[1]))
        remaining.remove(picked[0])
    return rules, default


# --------------------------------------------------------------------------------------------------
# op tags and AllGather sizes
# --------------------------------------------------------------------------------------------------


def _op_tags(ev: pd.DataFrame, w: pd.DataFrame, cats: pd.Categorical) -> list[dict]:
    kern = np.flatnonzero((ev["kind"] == "kernel").to_numpy())
    s = ev["start_ns"].to_numpy(np.int64)[kern]
    lw = w[w["kind"] == "layer"].sort_values("start_ns", kind="stable")
    k = iv.window_of(s, lw["start_ns"].to_numpy(np.int64), lw["end_ns"].to_numpy(np.int64))
    names = ev["name"].astype(str).to_numpy()[kern]
    kc = np.asarray(cats)[kern]
    types = lw["base_type"].to_numpy()
    per_window: dict[int, list[tuple[str, int, str]]] = defaultdict(list)
    seen: dict[tuple[int, str], int] = defaultdict(int)
    for i in np.flatnonzero(k >= 0).tolist():
        win = int(k[i])
        seen[(win, names[i])] += 1
        per_window[win].append((names[i], seen[(win, names[i])], str(kc[i])))
    tags = []
    for t in dict.fromkeys(types):
        wins = [j for j in range(len(lw)) if types[j] == t]
        common = set.intersection(*(set((n, o) for n, o, _ in per_window[j]) for j in wins)) if wins else set()
        ref = per_window[wins[0]] if wins else []
        max_occ = Counter()
        for n, o, _ in ref:
            max_occ[n] = max(max_occ[n], o)
        ordered = [(n, o, c) for n, o, c in ref if (n, o) in common]
        per_cat = Counter(c for _, _, c in ordered)
        idx = Counter()
        for n, o, c in ordered:
            idx[c] += 1
            tag = c if per_cat[c] == 1 else f"{c}_{idx[c]}"
            rule = {"tag": tag, "block_type": t, "pattern": _exact(n)}
            if max_occ[n] > 1:
                rule["ordinal"] = o
            tags.append(rule)
    return tags


def _allgather_sizes(trace: Trace, found: LayerFinding, warnings: list[str]) -> dict | None:
    ev = trace.events
    if not (ev["copy_kind"] == "PtoP").any():
        return None
    from ..comm.segments import segment_allgathers

    try:
        ag = segment_allgathers(trace, steps=found.steps)
    except MissingDataError:
        return None
    per = ag.per_ag
    lw = found.windows[found.windows["kind"] == "layer"].sort_values("start_ns", kind="stable")
    ls, lt = lw["start_ns"].to_numpy(np.int64), lw["base_type"].to_numpy()
    nxt = np.searchsorted(ls, per["end_ns"].to_numpy(np.int64), side="left")
    ok = nxt < ls.size
    consumer = np.where(ok, lt[np.clip(nxt, 0, max(ls.size - 1, 0))], None) if ls.size else np.full(len(per), None)
    by_size: dict[int, Counter] = defaultdict(Counter)
    for size, t in zip(per["full_bytes"].to_numpy(np.int64).tolist(), consumer.tolist()):
        if t is not None:
            by_size[int(size)][t] += 1
    sizes = {}
    for size, cnt in sorted(by_size.items(), key=lambda x: -sum(x[1].values())):
        types = sorted(t for t, n in cnt.items() if n >= 0.1 * sum(cnt.values()))
        key = ",".join(types) or "unknown"
        if key in sizes:
            warnings.append(
                f"the AllGathers before {key} layers have several sizes; the suggestion keeps the most"
                f" common ({sizes[key]} B)"
            )
            continue
        sizes[key] = size
    return {
        "group_size": int(ag.group_size),
        "sizes": sizes,
        "_doc": "each weight AllGather's full size, named by the type of the layer that starts after it (the"
        " layer whose weights it prefetches)",
    }


# --------------------------------------------------------------------------------------------------
# the suggestion and its check
# --------------------------------------------------------------------------------------------------


def _check(trace: Trace, found: LayerFinding, ann_dict: dict) -> tuple[pd.DataFrame, list[int], object]:
    ann = parse_annotation(json.dumps(strip_docs(ann_dict)).encode(), "<suggested annotation>")
    a = annotate(trace, ann, found.steps.table)
    b = a.blocks
    w = _desired(found)
    rows, bad = [], []
    for step in found.steps.table["step"].tolist():
        want = w[w["step"] == step]
        got = b[b["step"] == step]
        exp = list(zip(want["start_ns"].tolist(), want["end_ns"].tolist(), want["base_type"].tolist()))
        have = list(zip(got["start_ns"].tolist(), got["end_ns"].tolist(), got["block_type"].astype(str).tolist()))
        same = exp == have
        first = next((i for i, (x, y) in enumerate(zip(exp, have)) if x != y), min(len(exp), len(have)))
        rows.append(
            {
                "step": int(step),
                "windows": len(exp),
                "blocks": len(have),
                "equal": same,
                "first_difference": None if same else int(first),
            }
        )
        if not same:
            bad.append(int(step))
    return pd.DataFrame(rows, columns=["step", "windows", "blocks", "equal", "first_difference"]), bad, a


def _misfiring(found: LayerFinding, a, occ: pd.DataFrame) -> set[str]:
    """Names of the kernels at block starts that are wrong (extra or missing) in the engine's result."""
    w = _desired(found)
    want = set(zip(w["step"], w["start_ns"]))
    b = a.blocks
    have = set(zip(b["step"], b["start_ns"]))
    wrong = want ^ have
    at = occ.set_index(["step", "start_ns"])["name"]
    out = set()
    for key in wrong:
        if key in at.index:
            v = at.loc[key]
            out.update([v] if isinstance(v, str) else list(v))
    return out


@options_as_objects
def suggest(
    trace: Trace, *, steps=None, categories=None, name: str | None = None, doc: bool | None = None
) -> tuple[dict, Result]:
    """An annotation for the trace's automatic layers (a dict for ``parse_annotation``), and a Result saying what
    was inferred and how it was checked (``summary.check``): whether the engine reproduces the layers with it
    (``reproduces_layers``: the finder's own cut, no independent check) and whether the layers agree with the
    structure counted without the boundary kernel (``structure_agrees``: layers per step = attention -> MLP/MoE
    transitions per step, one in every layer). ``summary.verified`` is true only when both hold.

    ``doc``: write ``_doc`` comment fields (default: when the annotation format accepts them).
    """
    cr = resolve_categories(categories)
    found = find_layers(trace, steps=steps, categories=cr)
    if found.layers.empty:
        raise MissingDataError(
            f"{trace.path}: no layers were found automatically (no decoder stack on the main"
            " stream), so there is nothing to write an annotation for; see `tracekit layers`"
        )
    with_doc = doc_fields_supported() if doc is None else doc
    ev = trace.events
    warnings: list[str] = list(found.warnings)
    st = found.steps
    w = _desired(found)
    occ = _main_occurrence(ev, found)
    cats = trace_categories(trace, cr)
    lw = w[w["kind"] == "layer"]
    wn = _window_names(ev, w)
    mixer_names = _mixer_names(ev, cats, cr, lw, wn, set(occ["name"]))
    position, positional = _positions(w, len(st.table))
    type_rules, default = _type_rules(w, wn, positional, warnings)
    if default:
        position["default"] = default
    split = sorted(set(lw["layer_type"]) - set(lw["base_type"]))
    if split:
        warnings.append(
            f"the layer types {', '.join(split)} differ only in kernel durations; no contains rule tells"
            " them apart, so the annotation gives them their common type (the engine lacks type rules"
            " by duration)"
        )
    expect = {t: int(v) for t, v in w.groupby("step")["base_type"].value_counts().groupby(level=1).median().items()}
    op_tags = _op_tags(ev, w, cats)
    ag = _allgather_sizes(trace, found, warnings)
    ann = _annotation_head(trace, found, name, lw, op_tags)
    blocks = {
        "types": [{"type": t, "contains": _exact(n)} for t, n in type_rules if n],
        "position": position,
        "expect": expect,
    }
    check, bad = _fit_boundary(trace, found, ann, blocks, occ, mixer_names, with_doc, warnings)
    if not found.check.get("agrees"):
        warnings.append(
            "not verified: the layers this annotation cuts are not confirmed by an independent count of"
            f" the structure ({found.check.get('layers_per_step')} layers vs"
            f" {found.check.get('transitions_per_step')} attention -> MLP/MoE transitions per step)"
        )
    if bad:
        warnings.append(
            f"the engine does not reproduce the automatic layers of step(s) {bad[:8]} with the suggested"
            " annotation; check blocks -a against layers"
        )
    if ag:
        ann["allgather"] = ag
    ann["_doc"] = (
        "written by `tracekit suggest` from the automatic layers (docs/layers.md); block types are"
        " named from kernel categories; op tags are <category>[_n] by exact kernel name and ordinal"
    )
    out = ann if with_doc else strip_docs(ann)
    types_table = (
        lw.groupby(["step", "base_type"])
        .size()
        .rename("layers")
        .reset_index()
        .rename(columns={"base_type": "block_type"})
    )
    summary = _suggest_summary(ann, found, bad, lw, type_rules, op_tags, ag, with_doc)
    res = Result(
        command="suggest",
        inputs=[trace_input(trace)],
        params={**st.options.as_params(), "name": ann["name"], "categories": list(cr.sources[:-1]) or None},
        summary=summary,
        tables={"check": check, "types": types_table, "inferred": _inferred(ann, type_rules, position, op_tags, ag)},
        warnings=merge_warnings(trace.report.warnings, warnings),
    )
    return out, res


def _mixer_names(ev: pd.DataFrame, cats, cr, lw: pd.DataFrame, wn, main_names: set) -> list[str]:
    """The main-stream kernel names of the layers that are mixers (attention, linear attention, state space)."""
    mixer_cats = {c for c in cr.order if cr.info(c).layer_role == "mixer"}
    cat_of_name = dict(zip(ev["name"].astype(str), np.asarray(cats, dtype=object)))
    return sorted({n for i in lw.index for n in wn[i] if n in main_names and cat_of_name.get(n) in mixer_cats})


def _positions(w: pd.DataFrame, n_steps: int) -> tuple[dict, set]:
    """The position rules: a head (tail) type when every step opens (ends) with a head (tail) window."""
    first_kind = w.groupby("step")["kind"].first()
    last_kind = w.groupby("step")["kind"].last()
    position: dict = {}
    positional = set()
    if len(first_kind) == n_steps and (first_kind == HEAD).all():
        position["first"] = HEAD_TYPE
        positional.add(HEAD)
    if len(last_kind) == n_steps and (last_kind == TAIL).all():
        position["last"] = TAIL_TYPE
        positional.add(TAIL)
    return position, positional


def _annotation_head(trace: Trace, found: LayerFinding, name: str | None, lw: pd.DataFrame, op_tags: dict) -> dict:
    """The annotation's name, description, step options and op tags (its blocks come after)."""
    st = found.steps
    opts = st.options
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", Path(str(trace.path)).name.split(".")[0]).strip("_") or "trace"
    return {
        "name": name or f"auto_{stem}",
        "description": (
            f"suggested by tracekit from {Path(str(trace.path)).name}: {len(lw)} layers in"
            f" {len(st.table)} step(s), types {', '.join(sorted(set(lw['base_type'])))}; boundary kernel"
            f" {found.boundary}"
        ),
        "step": {
            "name": opts.name,
            "min_ms": opts.min_step_ns / 1e6,
            "_doc": f"steps found by {st.marker} ({st.match}); null = tracekit's step dialects",
        },
        "main_stream": "auto",
        "blocks": {},
        "op_tags": op_tags,
    }


def _fit_boundary(
    trace: Trace,
    found: LayerFinding,
    ann: dict,
    blocks: dict,
    occ: pd.DataFrame,
    mixer_names: list[str],
    with_doc: bool,
    warnings: list[str],
) -> tuple[pd.DataFrame, list[int]]:
    """The boundary rules, checked against the engine: a kernel name whose occurrences misfire gets an ordinal rule,
    for up to MAX_ROUNDS rounds. Sets ``ann["blocks"]``; returns the check table and the steps not reproduced."""
    ordinal_names: set[str] = set()
    check = pd.DataFrame()
    bad: list[int] = []
    for round_ in range(MAX_ROUNDS + 1):
        rules = _boundary_rules(found, occ, mixer_names, ordinal_names, warnings if round_ == 0 else [])
        ann["blocks"] = {
            "boundary": rules if with_doc else strip_docs(rules),
            **blocks,
            "_doc": (
                f"layers cut at {found.boundary[:80]!r} ({found.segments_per_layer} segment(s) per layer);"
                " each type by the most expensive kernel its layers have and later types lack"
            ),
        }
        check, bad, a = _check(trace, found, ann)
        if not bad:
            break
        wrong = _misfiring(found, a, occ) - ordinal_names
        if not wrong or round_ == MAX_ROUNDS:
            break
        ordinal_names |= wrong
    return check, bad


def _inferred(ann: dict, type_rules, position: dict, op_tags: dict, ag: dict | None) -> pd.DataFrame:
    """What was inferred, field by field, and why."""
    return pd.DataFrame(
        [
            {"field": "step", "value": json.dumps(strip_docs(ann["step"])), "why": ann["step"]["_doc"]},
            {
                "field": "blocks.boundary",
                "value": f"{len(ann['blocks']['boundary'])} rule(s)",
                "why": ann["blocks"]["_doc"],
            },
            *[
                {
                    "field": "blocks.types",
                    "value": f"{t}: {n}",
                    "why": "every layer of the type holds it; later types do not",
                }
                for t, n in type_rules
                if n
            ],
            {"field": "blocks.position", "value": json.dumps(position), "why": "head / tail when every step has one"},
            {"field": "op_tags", "value": f"{len(op_tags)} tag(s)", "why": "kernels every layer of a type has"},
            *([{"field": "allgather", "value": json.dumps(strip_docs(ag)), "why": ag["_doc"]}] if ag else []),
        ],
        columns=["field", "value", "why"],
    )


def _suggest_summary(
    ann: dict,
    found: LayerFinding,
    bad: list[int],
    lw: pd.DataFrame,
    type_rules,
    op_tags: dict,
    ag: dict | None,
    with_doc: bool,
) -> dict:
    independent = found.check
    reproduces = not bad
    return {
        "annotation": ann["name"],
        "verified": reproduces and bool(independent.get("agrees")),
        "check": {
            "reproduces_layers": reproduces,
            "structure_agrees": bool(independent.get("agrees")),
            "layers_per_step": independent.get("layers_per_step"),
            "transitions_per_step": independent.get("transitions_per_step"),
            "compared": independent.get("compared"),
        },
        "steps": len(found.steps.table),
        "layers_per_step": int(round(float(np.median(lw.groupby("step").size())))) if len(lw) else 0,
        "block_types": sorted(set(lw["base_type"])),
        "boundary_rules": len(ann["blocks"]["boundary"]),
        "type_rules": len(type_rules),
        "op_tags": len(op_tags),
        "allgather_sizes": dict(ag["sizes"]) if ag else None,
        "doc_fields": with_doc,
    }


@options_as_objects
def suggested_annotation(trace: Trace, *, steps=None, categories=None, name: str | None = None) -> Result:
    """`tracekit suggest` as one Result (the annotation itself is what :func:`suggest` returns first)."""
    return suggest(trace, steps=steps, categories=categories, name=name)[1]
