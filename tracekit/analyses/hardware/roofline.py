"""A9 — roofline: bytes moved, FLOPs, MBU and MFU of the op tags that have shapes (docs/roofline.md).

For a GEMM ``out[M, N] = act[M, K] x W[N, K]^T`` (an annotation ``op_shapes`` entry; M may be a formula of
``bs`` and ``q_len``) the bytes are the compulsory HBM traffic, every operand read once and the output
written once: ``M·K·b(dtype) + N·K·b(w_dtype) + M·N·b(out_dtype)``; FLOPs are ``2·M·N·K``. Other kernels
(state updates) take bytes and FLOPs from ``op_traffic`` formulas. With the mean kernel time t:

* achieved bandwidth = bytes / t, MBU = achieved bandwidth / the profile's HBM peak;
* achieved FLOP/s = FLOPs / t, MFU = achieved FLOP/s / the dense peak of the op's dtype;
* arithmetic intensity = FLOPs / bytes; the ridge point = peak FLOP/s / peak bandwidth; an op below the
  ridge is ``memory`` bound, at or above it ``compute`` bound.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from typing import Any, Optional

import numpy as np
import pandas as pd

from ...annotation import Annotation, as_annotation, required_annotation
from ...annotation.spec import OpShape, OpTraffic
from ...errors import DataFileError, InputError, MissingDataError
from ...gpu_specs import HardwareProfile, dtype_bytes, resolve_profile, with_hbm
from .replay_attribution import use_replay_sources
from .shapes import kernel_shapes, names_at, unknown_work, unknown_work_sentence
from ...result import Result, trace_input
from ...data import record_hint
from ...trace import Trace
from ..formulas import as_number, eval_formula, parse_vars  # noqa: F401 (re-exported for hbm and callers)
from ..steps.resolve import annotated_steps
from ..steps.keywords import options_as_objects
from ..steps.model import StepOptions


def formula_env(
    ann: Annotation, *, bs: float | None, q_len: float | None, variables: dict[str, float] | None = None
) -> dict[str, float]:
    """Names a formula may use: the annotation's constants, then bs and q_len, then --var values."""
    env = dict(ann.constants)
    if bs is not None:
        env["bs"] = bs
    if q_len is not None:
        env["q_len"] = q_len
    env.update(variables or {})
    return env


def gemm_traffic(shape: OpShape, env: dict[str, float], where: str) -> dict[str, Any]:
    """M, N, K, bytes and FLOPs of one GEMM of ``shape`` (M evaluated over ``env``)."""
    m = eval_formula(shape.m, env, f"{where}.m")
    if m < 0:
        raise DataFileError(f"{where}.m evaluates to {m}, which is negative")
    n, k = shape.n, shape.k
    b_act = dtype_bytes(shape.dtype, f"{where}.dtype: ")
    b_w = dtype_bytes(shape.w_dtype or shape.dtype, f"{where}.w_dtype: ")
    b_out = dtype_bytes(shape.out_dtype, f"{where}.out_dtype: ")
    if shape.experts is not None:
        return grouped_gemm_traffic(shape, m, env, where, b_act, b_w, b_out)
    nbytes = m * k * b_act + n * k * b_w + m * n * b_out
    return {"m": m, "n": n, "k": k, "dtype": shape.dtype, "bytes": nbytes, "flops": 2.0 * m * n * k, "source": "gemm"}


def grouped_gemm_traffic(
    shape: OpShape, tokens: float, env: dict[str, float], where: str, b_act: float, b_w: float, b_out: float
) -> dict[str, Any]:
    """A routed-expert GEMM: ``tokens`` tokens each routed to ``top_k`` of ``experts`` experts (uniformly), this rank
    holding ``local_experts`` of them. Rows = tokens × top_k × local ÷ experts; an expert is touched when it receives
    at least one row, expected local × (1 − (1 − 1/experts)^(tokens × top_k)); every touched expert reads its whole
    N × K weight. ``m`` in the result is the rows."""
    e = eval_formula(shape.experts, env, f"{where}.experts")
    local = eval_formula(shape.local_experts, env, f"{where}.local_experts") if shape.local_experts is not None else e
    top_k = eval_formula(shape.top_k, env, f"{where}.top_k") if shape.top_k is not None else 1.0
    if not (e >= 1 and 1 <= local <= e and 1 <= top_k <= e):
        raise DataFileError(
            f"{where}: experts {e:g}, local_experts {local:g}, top_k {top_k:g} — need 1 ≤ top_k ≤ "
            "experts and 1 ≤ local_experts ≤ experts"
        )
    routed = tokens * top_k
    rows = routed * local / e
    touched = local * (1.0 - (1.0 - 1.0 / e) ** routed) if routed > 0 else 0.0
    n, k = shape.n, shape.k
    nbytes = rows * k * b_act + touched * n * k * b_w + rows * n * b_out
    return {
        "m": rows,
        "n": n,
        "k": k,
        "dtype": shape.dtype,
        "bytes": nbytes,
        "flops": 2.0 * rows * n * k,
        "source": "grouped_gemm",
        "experts_touched": touched,
        "tokens_per_expert": rows / touched if touched else 0.0,
    }


def formula_traffic(spec: OpTraffic, env: dict[str, float], where: str) -> dict[str, Any]:
    nbytes = eval_formula(spec.bytes, env, f"{where}.bytes")
    flops = None if spec.flops is None else eval_formula(spec.flops, env, f"{where}.flops")
    dtype_bytes(spec.dtype, f"{where}.dtype: ")
    return {"m": None, "n": None, "k": None, "dtype": spec.dtype, "bytes": nbytes, "flops": flops, "source": "formula"}


def op_traffic(ann: Annotation, tag: str, env: dict[str, float]) -> Optional[dict[str, Any]]:
    """Bytes and FLOPs of one kernel of ``tag``, from op_shapes (GEMMs) or op_traffic; None if neither."""
    src = ann.source or ann.name
    if tag in ann.op_shapes:
        return gemm_traffic(ann.op_shapes[tag], env, f"{src}: $.op_shapes.{tag}")
    if tag in ann.op_traffic:
        return formula_traffic(ann.op_traffic[tag], env, f"{src}: $.op_traffic.{tag}")
    return None


def roofline_point(
    nbytes: float, flops: float | None, time_ns: float, hw: HardwareProfile, dtype: str
) -> dict[str, Any]:
    """Achieved TB/s and TFLOP/s, MBU, MFU, intensity, ridge point and binding roof of one op."""
    t = time_ns * 1e-9
    bw = nbytes / t if t > 0 else math.nan
    peak_flops = hw.peak_flops(dtype)
    fl = None if flops is None else flops / t if t > 0 else math.nan
    intensity = None if flops is None or nbytes <= 0 else flops / nbytes
    ridge = None if peak_flops is None else peak_flops / hw.hbm_bytes_per_s
    bound = None
    if intensity is not None and ridge is not None:
        bound = "memory" if intensity < ridge else "compute"
    return {
        "achieved_tbps": bw / 1e12,
        "achieved_tflops": None if fl is None else fl / 1e12,
        "mbu": bw / hw.hbm_bytes_per_s,
        "mfu": None if fl is None or peak_flops is None else fl / peak_flops,
        "intensity": intensity,
        "ridge": ridge,
        "bound": bound,
        "peak_tflops": None if peak_flops is None else peak_flops / 1e12,
    }


@lru_cache(maxsize=1)
def target_rules() -> dict[str, Any]:
    """What a kernel's target time is made of, from tracekit/data/findings.json (docs/findings.md): the fractions of
    the HBM peak and the dense peak a well-tuned kernel sustains (``roofline.achievable_hbm``, ``achievable_flops``)
    and the launch floor per vendor (``launch_floor_us``, its ``default`` where the vendor is unknown)."""
    src = "tracekit/data/findings.json"
    try:
        doc = json.loads(resources.files("tracekit.data").joinpath("findings.json").read_text(encoding="utf-8"))
        floors = {str(k): float(v) for k, v in doc["launch_floor_us"].items() if not str(k).startswith("_")}
        floors["default"]  # noqa: B018 - presence check
        return {
            "achievable_hbm": float(doc["roofline"]["achievable_hbm"]),
            "achievable_flops": float(doc["roofline"]["achievable_flops"]),
            "launch_floor_us": floors,
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataFileError(f"{src} is invalid ({exc}); see docs/findings.md") from exc


def launch_floor_ns(hw) -> float:
    """The least GPU time one kernel launch takes on ``hw``'s vendor (:func:`target_rules`' ``launch_floor_us``; its
    ``default`` where the vendor is unknown): no target time of a kernel is below it, so no gain counts time a launch
    cannot lose."""
    floors = target_rules()["launch_floor_us"]
    vendor = str(getattr(hw, "vendor", "") or "").lower()
    return 1e3 * floors.get(vendor, floors["default"])


def target_ns(nbytes, flops, peak_flops, hw: HardwareProfile):
    """The time a kernel of ``nbytes`` bytes and ``flops`` FLOPs would take at the achievable roofline of ``hw``
    (the slower of its bytes at ``achievable_hbm`` of the HBM peak and its FLOPs at ``achievable_flops`` of
    ``peak_flops``, its dtype's dense peak), never below :func:`launch_floor_ns`: the one target of every kernel, the
    findings' and `tracekit roofline`'s. Arrays or numbers; FLOPs or peak NaN: the bytes alone decide; bytes NaN: NaN
    (unknown)."""
    rules = target_rules()
    f_hbm, f_fl = rules["achievable_hbm"], rules["achievable_flops"]
    by = np.asarray(nbytes, dtype=float)
    fl = np.asarray(flops, dtype=float)
    peak = np.asarray(peak_flops, dtype=float)
    t_mem = by / (f_hbm * hw.hbm_bytes_per_s) * 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        t_fl = np.where(np.isnan(fl) | np.isnan(peak), 0.0, fl / (f_fl * np.where(np.isnan(peak), 1.0, peak)) * 1e9)
    return np.maximum(np.maximum(t_mem, t_fl), launch_floor_ns(hw))


def target_summary(hw: HardwareProfile) -> dict[str, Any]:
    """The summary keys that say what ``target_ns`` is: the launch floor on ``hw`` (integer ns) and the achievable
    fractions of the HBM and dense peaks."""
    rules = target_rules()
    return {
        "launch_floor_ns": int(round(launch_floor_ns(hw))),
        "achievable_hbm": rules["achievable_hbm"],
        "achievable_flops": rules["achievable_flops"],
    }


PER_TAG_COLUMNS = [
    "op_tag",
    "mean_ns",
    "bytes",
    "flops",
    "mbu",
    "mfu",
    "bound",
    "count",
    "bs",
    "q_len",
    "m",
    "n",
    "k",
    "dtype",
    "source",
    "achieved_tbps",
    "achieved_tflops",
    "intensity",
    "ridge",
    "peak_tflops",
    "experts_touched",
    "target_ns",
]


def step_batch_sizes(steps: pd.DataFrame, bs: float | None, ann: Annotation) -> tuple[np.ndarray, str]:
    """The batch size of each step: ``bs`` if given, else the step marker's, else the annotation's constant."""
    n = len(steps)
    if bs is not None:
        return np.full(n, float(bs)), "option"
    marker = pd.to_numeric(steps["bs"], errors="coerce").to_numpy(dtype=float) if "bs" in steps else np.full(n, np.nan)
    if n and not np.isnan(marker).any():
        return marker, "step marker"
    if "bs" in ann.constants:
        return np.full(n, float(ann.constants["bs"])), "annotation constant"
    raise InputError(
        "the batch size is needed for the shapes and the step markers do not carry it;"
        " pass --bs N (requests per rank per step)"
    )


def shape_options(trace: Trace, ann, hw, *, what: str, hbm_gbps, variables):
    """roofline and hbm: the annotation and the profile resolved (a name, a path or the object; no ``hw``: the
    trace's device), ``hbm_gbps`` applied, and ``variables`` (a dict, or the CLI's NAME=NUMBER items) as a dict."""
    ann = required_annotation(ann, what)
    profile = with_hbm(resolve_profile(hw, trace.meta, what=what), hbm_gbps)
    if isinstance(variables, str):
        variables = [variables]
    return (
        ann,
        profile,
        (variables if isinstance(variables, dict) or variables is None else parse_vars(list(variables))),
    )


def explicit_step_name(steps) -> str | None:
    """The marker name the user gave (``StepOptions(name=…)`` from ``--step-name``), not one from an annotation."""
    return steps.name if isinstance(steps, StepOptions) and steps.strict else None


@options_as_objects
def roofline(
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
    """`tracekit roofline` (A9): per op tag with a shape, mean kernel time, bytes, FLOPs, MBU, MFU and bound.

    Steps and op tags come from the annotation (a name, a path or an Annotation); ``hw`` is a profile, its name
    or a JSON file (default: detected from the trace), ``hbm_gbps`` the CLI's ``--hbm-gbps``. M (and any formula)
    is evaluated with each step's batch size (``bs``, else the step marker's, else the annotation's ``bs``
    constant) and ``q_len`` (the CLI's ``--qlen``; else the annotation's constant, else 1); ``variables``: more
    formula names (the CLI's ``--var``: a dict or NAME=NUMBER items); ``steps``: StepOptions, Steps or a table
    (default: the annotation's step options); ``capture`` (paths) and ``eager_map``: where graph-replayed kernels'
    ops come from (docs/replay.md). Rows are per (op tag, batch size); ``mean_ns`` is the mean duration of
    one kernel of the tag. Tags with a shape but no kernel are named in a warning."""
    use_replay_sources(trace, capture, eager_map)
    if as_annotation(ann) is None:
        profile = with_hbm(resolve_profile(hw, trace.meta, what="roofline"), hbm_gbps)
        return shapes_roofline(trace, profile, steps=steps)
    ann, hw, variables = shape_options(trace, ann, hw, what="roofline", hbm_gbps=hbm_gbps, variables=variables)
    shaped = list(ann.op_shapes) + [t for t in ann.op_traffic if t not in ann.op_shapes]
    if not shaped:
        return _recorded_shapes_instead(trace, ann, hw, steps=steps)
    st, a = annotated_steps(trace, ann, steps=steps, what="roofline")
    steps = st.table
    q = q_len if q_len is not None else ann.constants.get("q_len", 1)
    step_bs, bs_from = step_batch_sizes(steps, bs, ann)
    bs_of_step = dict(zip(steps["step"].tolist(), step_bs.tolist()))
    ev = a.events
    k = ev[(ev["kind"] == "kernel") & ev["op_tag"].isin(shaped) & (ev["step"] >= 0)]
    k = k.assign(bs=k["step"].map(bs_of_step), op_tag=k["op_tag"].astype(str))
    rows = _per_tag_rows(k, ann, q, variables, hw)
    warnings = list(trace.report.warnings) + a.warnings
    no_peak = sorted({(r["op_tag"], r["dtype"]) for r in rows if r["flops"] is not None and r["mfu"] is None})
    if no_peak:
        dts = sorted({d for _, d in no_peak})
        warnings.append(
            f"MFU is null for {', '.join(t for t, _ in no_peak)}: hardware profile {hw.name} gives no dense"
            f" peak for {', '.join(dts)} (add peak_dense_tflops.{dts[0]} with --hw FILE)"
        )
    missing = sorted(set(shaped) - set(k["op_tag"].unique()))
    if missing:
        warnings.append(f"op tag(s) with a shape but no kernel inside a step: {', '.join(missing)}")
    if not rows:
        raise MissingDataError(f"{trace.path}: no kernel carries an op tag that has a shape ({', '.join(shaped)})")
    per_tag = _per_tag_table(rows)
    # per kernel name: the annotation's shapes where its tags have them, the trace's recorded shapes elsewhere
    over = _annotation_overrides(k, ann, q, variables) if _rows_are_event_rows(trace, a.events) else None
    per_kernel, _, stats = per_kernel_table(trace, hw, over=over)
    summary = {
        "annotation": ann.name,
        **hw.summary(),
        "steps": int(len(steps)),
        "bs_from": bs_from,
        "q_len": as_number(q),
        "tags": int(per_tag["op_tag"].nunique()),
        "memory_bound": int((per_tag["bound"] == "memory").sum()),
        "compute_bound": int((per_tag["bound"] == "compute").sum()),
        **stats,
        **target_summary(hw),
    }
    return Result(
        command="roofline",
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
        tables={"per_tag": per_tag, "per_kernel": per_kernel},
        warnings=warnings,
    )


def _recorded_shapes_instead(trace: Trace, ann: Annotation, hw: HardwareProfile, *, steps) -> Result:
    """An annotation with no op_shapes or op_traffic: the roofline of the shapes the trace records, said in a
    warning, or a missing-data error when it records none."""
    if kernel_shapes(trace).shaped:
        res = shapes_roofline(trace, hw, steps=steps)
        res.warnings.append(
            f"annotation {ann.source or ann.name} has no op_shapes or op_traffic: the roofline"
            " comes from the shapes the trace records"
        )
        return res
    raise MissingDataError(
        f"annotation {ann.source or ann.name} has no op_shapes or op_traffic, so there is"
        " nothing to put on the roofline; add them (docs/roofline.md)"
    )


def _per_tag_rows(k: pd.DataFrame, ann: Annotation, q, variables, hw: HardwareProfile) -> list[dict[str, Any]]:
    """One row per (op tag, batch size) of the tagged kernels ``k``: the mean kernel time against the bytes and FLOPs
    the annotation's shape gives, as a roofline point."""
    rows = []
    for (tag, b), g in k.groupby(["op_tag", "bs"], sort=True):
        env = formula_env(ann, bs=b, q_len=q, variables=variables)
        tr = op_traffic(ann, tag, env)
        mean = float(g["dur_ns"].mean())
        pt = roofline_point(tr["bytes"], tr["flops"], mean, hw, tr["dtype"])
        nbytes, flops = int(round(tr["bytes"])), None if tr["flops"] is None else int(round(tr["flops"]))
        peak = hw.peak_flops(tr["dtype"])  # the target of the row's bytes and FLOPs, as the table gives them
        target = target_ns(nbytes, math.nan if flops is None else flops, peak or math.nan, hw)
        rows.append(
            {
                "op_tag": tag,
                "mean_ns": mean,
                "bytes": nbytes,
                "flops": flops,
                **pt,
                "count": int(len(g)),
                "bs": as_number(b),
                "q_len": as_number(q),
                "m": as_number(tr["m"]),
                "n": tr["n"],
                "k": tr["k"],
                "dtype": tr["dtype"],
                "source": tr["source"],
                "experts_touched": tr.get("experts_touched"),
                "target_ns": float(target),
            }
        )
    return rows


def _per_tag_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The per-tag rows as a table of PER_TAG_COLUMNS; whole numbers stay integers (null where there is none)."""
    cols = {c: [r[c] for r in rows] for c in PER_TAG_COLUMNS}
    for c in ("flops", "bs", "q_len", "m", "n", "k"):
        if all(v is None or isinstance(v, (int, np.integer)) for v in cols[c]):
            cols[c] = pd.array(cols[c], dtype="Int64")
    return pd.DataFrame(cols)


def _annotation_overrides(k: pd.DataFrame, ann: Annotation, q, variables) -> pd.DataFrame:
    """Per tagged kernel (its events row): the FLOPs, bytes and dtype its tag's shape gives, for the per-kernel
    table to use instead of the recorded shapes."""
    ann_fl = np.full(len(k), np.nan)
    ann_by = np.full(len(k), np.nan)
    ann_dt = np.full(len(k), None, dtype=object)
    for (tag, b), idx in k.groupby(["op_tag", "bs"], sort=False).indices.items():
        tr = op_traffic(ann, tag, formula_env(ann, bs=b, q_len=q, variables=variables))
        ann_fl[idx] = np.nan if tr["flops"] is None else tr["flops"]
        ann_by[idx] = tr["bytes"]
        ann_dt[idx] = tr["dtype"]
    return pd.DataFrame(
        {
            "row": k.index.to_numpy() if "row" not in k else k["row"].to_numpy(),
            "flops": ann_fl,
            "bytes": ann_by,
            "dtype": ann_dt,
            "op": k["op_tag"].to_numpy(),
        }
    )


# ------------------------------------------------------------------------------------------------ shapes


PER_KERNEL_COLUMNS = [
    "name",
    "op",
    "category",
    "calls",
    "shaped_calls",
    "mean_ns",
    "flops",
    "bytes",
    "dtype",
    "mfu",
    "mbu",
    "bound",
    "source",
    "family",
    "total_ns",
    "achieved_tbps",
    "achieved_tflops",
    "intensity",
    "ridge",
    "target_ns",
]


def _rows_are_event_rows(trace: Trace, events: pd.DataFrame) -> bool:
    """Whether ``events`` (an annotated copy of the events) is row-aligned with ``trace.events``."""
    return len(events) == len(trace.events) and events.index.equals(trace.events.index)


def per_kernel_table(trace: Trace, hw: HardwareProfile, over: pd.DataFrame | None = None):
    """One row per kernel name (PER_KERNEL_COLUMNS): the launching op, the calls and those with a shape, the mean
    time of the shaped calls (of all calls where none is shaped), the mean FLOPs and bytes per shaped call, and the
    roofline point they make. ``over``: rows (events rows) whose FLOPs, bytes and dtype the annotation gives
    (``source`` ``annotation``); the rest come from the recorded shapes (``source`` ``shapes``)."""
    from ..categories import trace_categories
    from .shapes import kernel_shapes

    ks = kernel_shapes(trace)
    t = ks.table
    ev = trace.events
    rows = t["row"].to_numpy()
    d = pd.DataFrame(
        {
            "name": names_at(ev, rows),
            "dur": ev["dur_ns"].to_numpy()[rows],
            "op": t["op"].to_numpy(),
            "flops": t["flops"].to_numpy(dtype=float),
            "bytes": t["bytes"].to_numpy(dtype=float),
            "dtype": t["dtype"].to_numpy(),
            "family": t["family"].to_numpy(),
            "shaped": t["carries"].to_numpy(dtype=bool),
            "source": np.where(t["carries"].to_numpy(dtype=bool), "shapes", None),
        }
    )
    d["category"] = np.asarray(trace_categories(trace), dtype=object)[rows]
    if over is not None and len(over):
        pos = pd.Series(np.arange(len(rows)), index=rows).reindex(over["row"].to_numpy()).to_numpy()
        okp = ~np.isnan(pos)
        pos = pos[okp].astype(np.int64)
        o = over[okp]
        d.loc[pos, ["flops", "bytes", "dtype"]] = o[["flops", "bytes", "dtype"]].to_numpy()
        d.loc[pos, "op"] = o["op"].to_numpy()
        d.loc[pos, "shaped"] = True
        d.loc[pos, "source"] = "annotation"
    out = _per_kernel_rows(d, hw)
    tbl = pd.DataFrame(out, columns=PER_KERNEL_COLUMNS)
    if len(tbl):
        tbl = tbl.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    for c in ("flops", "bytes"):
        tbl[c] = pd.array([None if v is None or pd.isna(v) else int(round(v)) for v in tbl[c]], dtype="Int64")
    for c in ("op", "dtype", "bound", "source", "family"):
        tbl[c] = tbl[c].astype(object).where(tbl[c].notna(), None)
    shaped = d["shaped"].to_numpy(dtype=bool)
    total = float(d["dur"].sum())
    stats = {
        **ks.summary(),
        "shaped_kernels": int(shaped.sum()),
        "shaped_pct": 100.0 * float(d["dur"].to_numpy()[shaped].sum()) / total if total else 0.0,
        "shaped_names": int((tbl["shaped_calls"] > 0).sum()),
        "kernel_names": int(len(tbl)),
        "kernel_ns": int(total),
    }
    return tbl, ks, stats


def _group_modes(gid: np.ndarray, col: pd.Series, mask: np.ndarray) -> dict[int, Any]:
    """Per group id the most common value of ``col`` over the rows ``mask`` (missing values left out; the smallest on
    a tie), as ``Series.mode().iloc[0]`` per group gives it: one groupby, not one call per group."""
    sel = np.flatnonzero(mask & (gid >= 0) & col.notna().to_numpy(dtype=bool))
    if not sel.size:
        return {}
    f = pd.DataFrame({"g": gid[sel], "v": col.iloc[sel].reset_index(drop=True)})
    n = f.groupby(["g", "v"], sort=False).size().rename("_n").reset_index()
    n = n.sort_values(["g", "_n", "v"], ascending=[True, False, True], kind="stable").drop_duplicates("g")
    return dict(zip(n["g"].tolist(), n["v"].tolist()))


def _per_kernel_rows(d: pd.DataFrame, hw: HardwareProfile) -> list[dict[str, Any]]:
    """The rows of :func:`per_kernel_table`, one per kernel name (in order of first appearance): the groups cut from
    one sort of the name codes and read as numpy slices, the most common values counted in one groupby each."""
    gid = pd.factorize(d["name"])[0]  # a missing name is -1: in no group, as groupby leaves it out
    rows = np.flatnonzero(gid >= 0)
    order = rows[np.argsort(gid[rows], kind="stable")]  # each group's rows in table order
    bounds = np.concatenate(([0], np.cumsum(np.bincount(gid[rows]))))
    shaped = d["shaped"].to_numpy(dtype=bool)
    has_sh = np.bincount(gid[rows], weights=shaped[rows]) > 0 if rows.size else np.zeros(0, dtype=bool)
    base = shaped | ~has_sh[np.clip(gid, 0, None)] if rows.size else shaped  # the shaped calls, else all of them
    modes = {c: _group_modes(gid, d[c], base if c == "op" else shaped) for c in ("op", "family", "dtype", "source")}
    dur, fl, by = d["dur"].to_numpy(), d["flops"].to_numpy(dtype=float), d["bytes"].to_numpy(dtype=float)
    out = []
    for g in range(bounds.size - 1):
        idx = order[bounds[g] : bounds[g + 1]]
        sh = idx[shaped[idx]]
        mean = float(dur[sh if sh.size else idx].mean())
        op, fam = modes["op"].get(g), modes["family"].get(g)
        row = {
            "name": d["name"].iloc[idx[0]],
            "op": None if op is None else str(op),
            "category": str(d["category"].iloc[idx[0]]),
            "calls": int(idx.size),
            "shaped_calls": int(sh.size),
            "mean_ns": mean,
            "total_ns": int(dur[idx].sum()),
            "family": None if fam is None else str(fam),
            "flops": None,
            "bytes": None,
            "dtype": None,
            "mfu": None,
            "mbu": None,
            "bound": None,
            "source": None,
            "achieved_tbps": None,
            "achieved_tflops": None,
            "intensity": None,
            "ridge": None,
            "target_ns": None,
        }
        if sh.size:
            f, b = fl[sh], by[sh]
            dtype, src = modes["dtype"].get(g), modes["source"].get(g)
            dtype = None if dtype is None else str(dtype)
            flops = float(np.mean(f)) if not np.isnan(f).any() else None
            nbytes = float(np.nanmean(b)) if not np.isnan(b).all() else None
            row.update(flops=flops, bytes=nbytes, dtype=dtype, source=None if src is None else str(src))
            if nbytes is not None and mean > 0:
                pt = roofline_point(nbytes, flops, mean, hw, dtype or "")
                peak = hw.peak_flops(dtype or "")
                row.update(
                    mbu=pt["mbu"],
                    mfu=pt["mfu"],
                    bound=pt["bound"] or "memory",
                    achieved_tbps=pt["achieved_tbps"],
                    achieved_tflops=pt["achieved_tflops"],
                    intensity=pt["intensity"],
                    ridge=pt["ridge"],
                    target_ns=float(target_ns(nbytes, math.nan if flops is None else flops, peak or math.nan, hw)),
                )
        out.append(row)
    return out


def shapes_roofline(trace: Trace, hw: HardwareProfile, *, steps=None) -> Result:
    """`tracekit roofline TRACE` without an annotation: every kernel name on the roofline from the shapes the trace
    records (docs/roofline.md, "Shapes from the trace"); per kernel name, so the steps are not needed (``params``
    names the marker the user gave, :func:`explicit_step_name`)."""
    per_kernel, ks, stats = per_kernel_table(trace, hw)
    if not ks.shaped:
        why = ks.why or (
            "no kernel's launching op has a model in tracekit/data/op_models.json"
            if not ks.graph_kernels
            else f"its kernels are replayed from CUDA graphs, which have no launching op; {ks.replay_hint}"
        )
        raise MissingDataError(
            f"roofline needs an annotation with op_shapes (-a ANN) or a trace with recorded shapes"
            f" ({record_hint(trace.meta, 'shapes')}): {trace.path}: {why}"
        )
    warnings = list(trace.report.warnings) + list(ks.warnings)
    sh = per_kernel[per_kernel["shaped_calls"] > 0]
    no_peak = sorted(
        {str(d) for d, f, m in zip(sh["dtype"], sh["flops"], sh["mfu"]) if pd.notna(f) and (m is None or pd.isna(m))}
    )
    if no_peak:
        warnings.append(
            f"MFU is null for the {', '.join(no_peak)} kernels: hardware profile {hw.name} gives no dense"
            " peak for that dtype"
        )
    summary = {
        "annotation": None,
        **hw.summary(),
        **stats,
        "memory_bound": int((sh["bound"] == "memory").sum()),
        "compute_bound": int((sh["bound"] == "compute").sum()),
        **target_summary(hw),
    }
    unknown = unknown_work(trace)
    summary["unknown_work_pct"] = float(unknown["share_pct"].sum())
    if ks.shaped_pct < 50:
        warnings.append(
            f"only {ks.shaped_pct:.1f} % of the GPU kernel time has a shape" + (f" ({ks.why})" if ks.why else "")
        )
    if not unknown.empty:
        warnings.append(unknown_work_sentence(trace))
    return Result(
        command="roofline",
        inputs=[trace_input(trace)],
        params={
            "annotation": None,
            "hw": hw.name,
            "hbm_gbps": hw.hbm_gbps,
            "bs": None,
            "q_len": None,
            "vars": {},
            "step_name": explicit_step_name(steps),
        },
        summary=summary,
        tables={"per_kernel": per_kernel},
        warnings=warnings,
    )
