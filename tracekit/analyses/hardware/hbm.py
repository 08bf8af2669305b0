"""The per-GPU per-step HBM bytes table (the study's "how many bytes does one card touch per step").

Each row comes from the annotation's ``hbm`` list, by one of three rules:

* ``bytes``: a formula of bs, q_len, the annotation's constants and ``--var`` values, once per step
  (e.g. MLA KV = layers x requests x context x bytes per token);
* ``tags``: per step, every kernel of these op tags counts the bytes of one kernel of its tag (its
  ``op_shapes`` GEMM traffic or ``op_traffic`` formula, as in `tracekit roofline`); with ``mbu``, it
  counts its time x mbu x the HBM peak instead (routed experts: GEMM time x an assumed MBU);
* ``allgather``: per step, the full bytes (PtoP bytes x G/(G−1)) of the weight AllGathers of these types
  (``[]``: all types) — the sharded weights every layer reads back in full.

The result is per step and per row, the median over steps, and the time the total would take at the
HBM peak.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ...annotation import Annotation, as_annotation
from ...errors import DataFileError, MissingDataError
from ...gpu_specs import HardwareProfile, resolve_profile, with_hbm
from ...result import Result, trace_input
from ...data import record_hint
from ...trace import Trace
from ..comm.segments import segment_allgathers
from ..options import AllGatherOptions
from ..steps.keywords import options_as_objects
from ..steps.resolve import annotated_steps
from .roofline import as_number, eval_formula, formula_env, op_traffic, shape_options, step_batch_sizes
from .replay_attribution import use_replay_sources
from .shapes import kernel_shapes
from ..steps.resolve import find_steps, median_ns
from ...result import merge_warnings


def _rule(row, src: str, i: int) -> str:
    given = [
        k
        for k, v in (
            ("bytes", row.bytes is not None),
            ("tags", bool(row.tags)),
            ("allgather", row.allgather is not None),
        )
        if v
    ]
    if len(given) != 1:
        raise DataFileError(
            f"{src}: $.hbm[{i}] ({row.name}) must give exactly one of bytes, tags, allgather"
            f" (it gives {', '.join(given) or 'none'})"
        )
    if row.mbu is not None and given[0] != "tags":
        raise DataFileError(f"{src}: $.hbm[{i}].mbu goes with tags only")
    if row.mbu is not None and not 0 < row.mbu <= 1:
        raise DataFileError(f"{src}: $.hbm[{i}].mbu must be in (0, 1], not {row.mbu}")
    return given[0] if given[0] != "tags" or row.mbu is None else "tags×mbu"


@options_as_objects
def hbm_bytes(
    trace: Trace,
    ann: Annotation | str | None = None,
    hw: HardwareProfile | str | None = None,
    *,
    bs: float | None = None,
    q_len: float | None = None,
    variables=None,
    hbm_gbps: float | str | None = None,
    steps=None,
    capture=None,
    eager_map=None,
) -> Result:
    """`tracekit hbm`: per-GPU per-step HBM bytes by row of the annotation's ``hbm`` table (the arguments are
    :func:`tracekit.roofline`'s)."""
    use_replay_sources(trace, capture, eager_map)
    if as_annotation(ann) is None:
        profile = with_hbm(resolve_profile(hw, trace.meta, what="hbm"), hbm_gbps)
        return shapes_hbm(trace, profile, steps=find_steps(trace, steps))
    ann, hw, variables = shape_options(trace, ann, hw, what="hbm", hbm_gbps=hbm_gbps, variables=variables)
    src = ann.source or ann.name
    if not ann.hbm:
        raise MissingDataError(f"annotation {src} has no 'hbm' rows; add them (docs/roofline.md)")
    rules = [_rule(r, src, i) for i, r in enumerate(ann.hbm)]
    st, a = annotated_steps(trace, ann, steps=steps, what="hbm")
    steps = st.table
    q = q_len if q_len is not None else ann.constants.get("q_len", 1)
    step_bs, bs_from = step_batch_sizes(steps, bs, ann)
    warnings = list(trace.report.warnings) + a.warnings
    sources = _RowSources(*_tag_counts(a.events), ag_full=None)
    if any(r == "allgather" for r in rules):
        ag = segment_allgathers(trace, ag=AllGatherOptions().with_annotation(ann), steps=st)
        warnings = merge_warnings(warnings, ag.warnings)
        sources = sources._replace(ag_full=ag.per_ag.groupby(["step", "type"])["full_bytes"].sum())
    per_step = _per_step_bytes(ann, rules, steps["step"].to_numpy(), step_bs, q, variables, hw, sources)
    for i, row in enumerate(ann.hbm):
        if rules[i] != "bytes" and per_step.loc[per_step["row"] == row.name, "bytes"].isna().all():
            warnings.append(
                f"hbm row {row.name!r} is unknown (–) in every step: its tags or AllGather types matched nothing"
            )
    per_row, med_total = _per_row_table(per_step, [(row.name, rules[i], row.note) for i, row in enumerate(ann.hbm)], hw)
    walls = steps["dur_ns"].to_numpy()
    summary = {
        "annotation": ann.name,
        **hw.summary(),
        "steps": int(len(steps)),
        "bs_from": bs_from,
        "bs": as_number(float(np.median(step_bs))) if len(step_bs) else None,
        "q_len": as_number(q),
        "total_bytes_per_step": med_total,
        "time_at_peak_ns": int(round(med_total / hw.hbm_bytes_per_s * 1e9)) if med_total is not None else None,
        "median_wall_ns": median_ns(walls),
        "rows_unknown": int(per_row["bytes"].isna().sum()),
    }
    return Result(
        command="hbm",
        inputs=[trace_input(trace)],
        params={
            "annotation": ann.ref,
            "hw": hw.name,
            "hbm_gbps": hw.hbm_gbps,
            "bs": bs,
            "q_len": q_len,
            "vars": dict(variables or {}),
            **st.options.as_params(),
        },
        summary=summary,
        tables={"per_row": per_row, "per_step": per_step},
        warnings=warnings,
    )


class _RowSources(NamedTuple):
    """What the rows of the hbm table count, per (step, op tag) and per (step, AllGather type)."""

    tag_count: pd.Series  # kernels
    tag_time: pd.Series  # their time, ns
    ag_full: pd.Series | None  # full AllGather bytes; None when no row counts AllGathers


def _tag_counts(ev: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """The kernels inside a step per (step, op tag): how many, and their time."""
    k = ev[(ev["kind"] == "kernel") & (ev["step"] >= 0) & ev["op_tag"].notna()]
    k = k.assign(op_tag=k["op_tag"].astype(str))
    return k.groupby(["step", "op_tag"]).size(), k.groupby(["step", "op_tag"])["dur_ns"].sum()


def _per_step_bytes(
    ann: Annotation,
    rules: list[str],
    step_ids: np.ndarray,
    step_bs: np.ndarray,
    q,
    variables,
    hw: HardwareProfile,
    sources: _RowSources,
) -> pd.DataFrame:
    """The bytes of every row of the annotation's hbm table in every step."""
    src = ann.source or ann.name
    rows = []
    for i, (row, rule) in enumerate(zip(ann.hbm, rules)):
        for sid, b in zip(step_ids.tolist(), step_bs.tolist()):
            env = formula_env(ann, bs=b, q_len=q, variables=variables)
            v = _row_bytes(ann, row, rule, sid, env, hw, sources, f"{src}: $.hbm[{i}]")
            rows.append({"step": sid, "row": row.name, "rule": rule, "bytes": None if v is None else int(round(v))})
    out = pd.DataFrame(rows, columns=["step", "row", "rule", "bytes"])
    out["bytes"] = out["bytes"].astype(object).where(out["bytes"].notna(), None)
    return out


def _row_bytes(
    ann: Annotation, row, rule: str, sid: int, env: dict, hw: HardwareProfile, sources: _RowSources, where: str
) -> float:
    """One row's bytes in step ``sid`` by its rule: a formula, the AllGathers' full bytes, or its tags' kernels;
    None (unknown, not 0) when the step holds none of the row's AllGathers or tagged kernels."""
    if rule == "bytes":
        return eval_formula(row.bytes, env, f"{where}.bytes")
    if rule == "allgather":
        sel = sources.ag_full[sources.ag_full.index.get_level_values("step") == sid]
        if row.allgather:
            sel = sel[sel.index.get_level_values("type").isin(row.allgather)]
        return float(sel.sum()) if len(sel) else None
    v = 0.0
    for tag in row.tags:
        if rule == "tags×mbu":
            v += float(sources.tag_time.get((sid, tag), 0)) * 1e-9 * row.mbu * hw.hbm_bytes_per_s
            continue
        tr = op_traffic(ann, tag, env)
        if tr is None:
            raise DataFileError(
                f"{where}.tags names {tag!r}, which has no op_shapes or op_traffic entry (or give the row an mbu)"
            )
        v += int(sources.tag_count.get((sid, tag), 0)) * tr["bytes"]
    return v if any((sid, tag) in sources.tag_count.index for tag in row.tags) else None


def _per_row_table(
    per_step: pd.DataFrame, rows: list[tuple[str, str, str]], hw: HardwareProfile
) -> tuple[pd.DataFrame, int | None]:
    """Per row (name, rule, note) its median bytes over the steps, its share of the median total and the time it
    would take at the HBM peak; and the median total."""
    known = per_step.assign(bytes=pd.to_numeric(per_step["bytes"], errors="coerce"))
    totals = known.groupby("step")["bytes"].sum()  # the known rows: an unknown row is left out, not counted as 0
    med_total = median_ns(totals.to_numpy())
    per_row = []
    for name, rule, note in rows:
        vals = known.loc[known["row"] == name, "bytes"].dropna().to_numpy()
        med = median_ns(vals) if len(vals) else None
        per_row.append(
            {
                "row": name,
                "rule": rule,
                "bytes": med,
                "share_pct": 100.0 * med / med_total if med_total and med is not None else None,
                "time_at_peak_ns": int(round(med / hw.hbm_bytes_per_s * 1e9)) if med is not None else None,
                "note": note,
            }
        )
    return pd.DataFrame(per_row, columns=["row", "rule", "bytes", "share_pct", "time_at_peak_ns", "note"]), med_total


FAMILY_ROWS = {
    "gemm": "GEMM operands (recorded shapes)",
    "attention": "attention q, k, v, out (recorded shapes)",
    "elementwise": "elementwise in + out (recorded shapes)",
    "reduction": "norms and reductions (recorded shapes)",
    "copy": "copies and fills (recorded shapes)",
}


def shapes_hbm(trace: Trace, hw: HardwareProfile, *, steps) -> Result:
    """`tracekit hbm TRACE` without an annotation: per step, the compulsory HBM bytes of the kernels whose launching
    op has a recorded shape, by family of op model (docs/roofline.md, "Shapes from the trace")."""
    ks = kernel_shapes(trace)
    if not ks.shaped:
        why = ks.why or (
            f"its kernels are replayed from CUDA graphs, which have no launching op; {ks.replay_hint}"
            if ks.graph_kernels
            else "no kernel's launching op has a model in tracekit/data/op_models.json"
        )
        raise MissingDataError(
            f"hbm needs an annotation with hbm rows (-a ANN) or a trace with recorded shapes"
            f" ({record_hint(trace.meta, 'shapes')}): {trace.path}: {why}"
        )
    st = steps
    t = ks.table
    ev = trace.events
    rows_ev = t["row"].to_numpy()
    start = ev["start_ns"].to_numpy()[rows_ev]
    dur = ev["dur_ns"].to_numpy()[rows_ev]
    step = st.step_of(start)
    ins = step >= 0
    carries = t["carries"].to_numpy(dtype=bool)
    fam = t["family"].to_numpy(dtype=object)
    nbytes = t["bytes"].to_numpy(dtype=float)
    sel = ins & carries & ~np.isnan(nbytes)
    d = pd.DataFrame({"step": step[sel], "row": [FAMILY_ROWS.get(f, str(f)) for f in fam[sel]], "bytes": nbytes[sel]})
    step_ids = st.table["step"].to_numpy()
    order = [FAMILY_ROWS[f] for f in FAMILY_ROWS if FAMILY_ROWS[f] in set(d["row"])]
    grid = (
        d.groupby(["step", "row"])["bytes"]
        .sum()
        .reindex(pd.MultiIndex.from_product([step_ids, order], names=["step", "row"]), fill_value=0.0)
    )
    per_step = pd.DataFrame(
        {
            "step": grid.index.get_level_values("step").to_numpy(),
            "row": grid.index.get_level_values("row").to_numpy(),
            "rule": "shapes",
            "bytes": np.rint(grid.to_numpy()).astype(np.int64),
        }
    )
    per_row, med_total = _per_row_table(per_step, [(name, "shapes", "") for name in order], hw)
    no_model = ins & t["model"].isna().to_numpy()
    if no_model.any():  # their bytes are unknown: a row that says so, never 0
        per_row.loc[len(per_row)] = {
            "row": f"ops with no model ({int(no_model.sum())} kernels)",
            "rule": "shapes",
            "bytes": None,
            "share_pct": None,
            "time_at_peak_ns": None,
            "note": "unknown, not in the total",
        }
    k_ns = int(dur[ins].sum())
    shaped_ns = int(dur[ins & carries].sum())
    warnings = merge_warnings(trace.report.warnings, st.warnings, ks.warnings)
    pct = 100.0 * shaped_ns / k_ns if k_ns else 0.0
    if pct < 50:
        warnings.append(
            f"only {pct:.1f} % of the kernel time inside the steps has a shape: the bytes are a lower bound"
            + (f" ({ks.why})" if ks.why else "")
        )
    walls = st.table["dur_ns"].to_numpy()
    summary = {
        "annotation": None,
        **hw.summary(),
        "steps": int(len(st.table)),
        "bs_from": None,
        "bs": None,
        "q_len": None,
        "total_bytes_per_step": med_total,
        "time_at_peak_ns": int(round(med_total / hw.hbm_bytes_per_s * 1e9)) if med_total is not None else None,
        "median_wall_ns": median_ns(walls),
        "shaped_pct": pct,
        "kernels": int(ins.sum()),
        "shaped_kernels": int((ins & carries).sum()),
        "graph_kernels": ks.graph_kernels,
        "rows_unknown": int(per_row["bytes"].isna().sum()),
        "kernels_without_model": int(no_model.sum()),
    }
    return Result(
        command="hbm",
        inputs=[trace_input(trace)],
        params={
            "annotation": None,
            "hw": hw.name,
            "hbm_gbps": hw.hbm_gbps,
            "bs": None,
            "q_len": None,
            "vars": {},
            **st.options.as_params(),
        },
        summary=summary,
        tables={"per_row": per_row, "per_step": per_step},
        warnings=warnings,
    )
