"""`tracekit findings --compare A B`: the same op slower in one deployment — per call, or per request when the
slower side runs the larger batch (like with like) — with the launch-configuration difference of its kernel (grid,
block, registers, shared memory and the CTAs per SM and per wave that follow from each side's SM limits), and the
launch settings that differ between the two logs or scripts (docs/findings.md)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...annotation import Annotation, as_annotation
from ...errors import TracekitError, UsageError
from ...gpu_specs import SmLimits, ctas_per_sm as occupancy_ctas_per_sm, detect_profile, sm_limits
from ...result import Result, trace_input
from ...trace import Trace
from ..steps.resolve import annotated_steps
from ..categories import categorize
from .rules import clip_text, finding, finding_rules, ms_text, rank_findings
from .rules import words as _words
from ..steps.resolve import find_steps, median_ns
from ...result import merge_warnings
from ..hardware.waves import resolve_sms
from ...errors import check_argument
from .idle_compare import idle_differences
from .work_match import category_table, device_label, most_common_kernel, vendor, work_table

OP_COLUMNS = [
    "op",
    "kernel",
    "category",
    "calls_per_step_a",
    "calls_per_step_b",
    "mean_ns_a",
    "mean_ns_b",
    "per_step_ns_a",
    "per_step_ns_b",
    "ratio",
    "grid_a",
    "grid_b",
    "block_a",
    "block_b",
    "registers_a",
    "registers_b",
    "shared_mem_a",
    "shared_mem_b",
    "ctas_a",
    "ctas_b",
    "ctas_per_sm_a",
    "ctas_per_sm_b",
    "ctas_per_wave_a",
    "ctas_per_wave_b",
    "waves_a",
    "waves_b",
    "limited_by_a",
    "limited_by_b",
    "ratio_per_request",
    "normalised_by",
    "compare_note",
    "kernel_b",
]


def _limits(trace: Trace, warnings: list[str]) -> SmLimits | None:
    """The SM's occupancy limits of a trace's device (deviceProperties, else its detected profile); None, said in a
    warning, when neither names a compute capability."""
    try:
        return sm_limits(trace.meta, detect_profile(trace.meta))
    except TracekitError as exc:
        warnings.append(f"{trace.path}: {exc}; its CTAs per SM and waves are left empty")
        return None


def op_table(trace: Trace, ann: Annotation | None, steps, *, use_tags: bool) -> pd.DataFrame:
    """Per op (op tag where the annotation gives one and ``use_tags``, else kernel name): calls and time per step,
    mean per call, and its most common kernel and launch configuration (:func:`.work_match.most_common_kernel`)."""
    if use_tags and ann is not None and ann.blocks is not None:
        _, a = annotated_steps(trace, ann, steps=steps)
        ev = a.events
        k = ev[(ev["kind"] == "kernel") & (ev["step"] >= 0)]
        op = k["op_tag"].astype(object).where(k["op_tag"].notna(), k["name"].astype(str))
    else:
        ev = trace.events
        k = ev[ev["kind"] == "kernel"]
        k = k[steps.step_of(k["start_ns"].to_numpy()) >= 0]
        op = k["name"].astype(str)
    n_steps = max(1, len(steps.table))
    k = k.assign(
        op=op.astype(str).to_numpy(),
        kernel=k["name"].astype(str).to_numpy(),
        category=np.asarray(categorize(k), dtype=object),
    )
    g = k.groupby("op", sort=False)
    out = pd.DataFrame(
        {"calls": g.size() / n_steps, "mean_ns": g["dur_ns"].mean(), "per_step_ns": g["dur_ns"].sum() / n_steps}
    )
    return out.join(most_common_kernel(k))


def _sms(trace: Trace, warnings: list[str]) -> int | None:
    try:
        return resolve_sms(trace, None, None, warnings)[0]
    except TracekitError:
        return None


def _diff_text(r: dict, labels: tuple[str, str]) -> str:
    parts = []
    for key, name in (
        ("grid", "grid"),
        ("block", "block"),
        ("registers", "registers per thread"),
        ("shared_mem", "shared memory B"),
        ("ctas", "CTAs"),
        ("ctas_per_sm", "CTAs per SM"),
        ("ctas_per_wave", "CTAs per wave"),
        ("waves", "waves"),
    ):
        a, b = r[f"{key}_a"], r[f"{key}_b"]
        if a is None or b is None or (isinstance(a, float) and np.isnan(a)) or a == b:
            continue
        fa = ",".join(map(str, a)) if isinstance(a, tuple) else f"{int(a):,}"
        fb = ",".join(map(str, b)) if isinstance(b, tuple) else f"{int(b):,}"
        if key == "ctas_per_sm":  # and what bounds each
            fa, fb = f"{fa}, by {r.get('limited_by_a')}", f"{fb}, by {r.get('limited_by_b')}"
        parts.append(f"{name} {fa} ({labels[0]}) vs {fb} ({labels[1]})")
    return "; ".join(parts)


def ops_compared(
    ta: pd.DataFrame,
    tb: pd.DataFrame,
    sms: tuple[int | None, int | None],
    limits: tuple[SmLimits | None, SmLimits | None],
) -> pd.DataFrame:
    """The ops both deployments run, side by side, with the launch configurations and what follows from them: CTAs,
    CTAs per SM (tracekit.gpu_specs.ctas_per_sm against each side's own SM limits) and what limited it, CTAs per wave
    and waves. ``ratio_per_request``, ``normalised_by`` and ``compare_note`` are filled by :func:`normalise`."""
    both = ta.add_suffix("_a").join(tb.add_suffix("_b"), how="inner")
    out = pd.DataFrame(
        {
            "op": both.index.astype(str),
            "kernel": both["kernel_a"].to_numpy(),
            "kernel_b": both["kernel_b"].to_numpy(),
            "category": both["category_a"].to_numpy(),
        }
    )
    for c in ("calls", "mean_ns", "per_step_ns"):
        for side in "ab":
            out[f"{'calls_per_step' if c == 'calls' else c}_{side}"] = both[f"{c}_{side}"].to_numpy(dtype=float)
    out["ratio"] = out["mean_ns_a"] / out["mean_ns_b"].where(out["mean_ns_b"] > 0)
    out["ratio"] = out["ratio"].astype(object).where(out["ratio"].notna(), None)
    for side, n_sms, lim in (("a", sms[0], limits[0]), ("b", sms[1], limits[1])):
        g = np.stack([both[f"grid_{c}_{side}"].to_numpy(dtype=float) for c in "xyz"], axis=1)
        b = np.stack([both[f"block_{c}_{side}"].to_numpy(dtype=float) for c in "xyz"], axis=1)
        g_ok = ~np.isnan(g).any(axis=1) & (np.nan_to_num(g, nan=-1) > 0).all(axis=1)
        b_ok = ~np.isnan(b).any(axis=1) & (np.nan_to_num(b, nan=-1) > 0).all(axis=1)
        gi, bi = np.nan_to_num(g, nan=1).astype(np.int64), np.nan_to_num(b, nan=1).astype(np.int64)
        out[f"grid_{side}"] = [tuple(int(x) for x in row) if ok else None for row, ok in zip(gi, g_ok)]
        out[f"block_{side}"] = [tuple(int(x) for x in row) if ok else None for row, ok in zip(bi, b_ok)]
        regs = both[f"registers_{side}"].to_numpy(dtype=float)
        smem = both[f"shared_mem_{side}"].to_numpy(dtype=float)
        out[f"registers_{side}"] = [int(v) if not np.isnan(v) and v >= 0 else None for v in regs]
        out[f"shared_mem_{side}"] = [int(v) if not np.isnan(v) and v >= 0 else None for v in smem]
        ctas = np.where(g_ok, gi.prod(axis=1), 0)
        out[f"ctas_{side}"] = [int(c) if ok else None for c, ok in zip(ctas, g_ok)]
        if lim is not None:
            threads = np.where(b_ok, bi.prod(axis=1), -1)
            cps, why, status = occupancy_ctas_per_sm(
                threads, np.nan_to_num(regs, nan=-1).astype(np.int64), np.nan_to_num(smem, nan=-1).astype(np.int64), lim
            )
            known = status != "no_block"
            why = np.where(
                status == "partial", [f"{w} (registers or shared memory unknown: an upper bound)" for w in why], why
            )
        else:
            cps, why, known = np.ones(len(out), dtype=np.int64), np.full(len(out), None), np.zeros(len(out), bool)
        out[f"ctas_per_sm_{side}"] = [int(c) if k else None for c, k in zip(cps, known)]
        out[f"limited_by_{side}"] = [str(w) if k else None for w, k in zip(why, known)]
        per_wave = [int(c) * n_sms if k and n_sms else None for c, k in zip(cps, known)]
        out[f"ctas_per_wave_{side}"] = per_wave
        out[f"waves_{side}"] = [-(-int(c) // w) if c and w else None for c, w in zip(out[f"ctas_{side}"], per_wave)]
    out["ratio_per_request"], out["normalised_by"], out["compare_note"] = None, None, None
    return out[OP_COLUMNS].sort_values("op", kind="stable").reset_index(drop=True)


def batch_of(steps, given: float | None) -> tuple[float | None, str]:
    """Requests per step of one deployment: ``given``, else the median of its step markers' batch sizes when every
    step has one, else unknown."""
    if given is not None:
        if given <= 0:
            raise UsageError(f"a batch size must be positive, not {given}")
        return float(given), "option"
    bs = pd.to_numeric(steps.table["bs"], errors="coerce") if "bs" in steps.table else pd.Series(dtype=float)
    if len(bs) and bs.notna().all():
        return float(bs.median()), "step markers"
    return None, "unknown"


def normalise(
    ops: pd.DataFrame, bs: tuple[float | None, float | None], labels: tuple[str, str], min_ratio: float
) -> pd.DataFrame:
    """Compare like with like when the two deployments run different batch sizes (docs/findings.md): per op, which
    side is slower, by how much, normalised by what, or why it is not compared.

    * same batch on both sides: per call (``normalised_by`` = ``call``);
    * the slower side runs fewer (or as many) requests per call: per call still (it is slower with no more
      requests, so not from a larger batch), ``call``;
    * the slower side runs more requests per call: per request (mean ÷ batch); slower by ``min_ratio`` or more per
      request → ``request``, else ``refused`` with the reason (its larger batch's work can explain the difference);
    * a batch size unknown: per call, ``normalised_by`` empty and the note says that the work per call may differ.

    Returns the table with ``slow`` (a/b or None), ``slow_ratio`` (≥ 1, in the unit compared) and ``gain_ns`` (per
    step: the per-call or per-request difference × the slow side's requests and calls)."""
    ops = ops.copy()
    bsa, bsb = bs
    slow, slow_ratio, gain = [], [], []
    for i, r in ops.iterrows():
        ratio = r["ratio"]
        if ratio is None or pd.isna(ratio) or ratio <= 0:
            slow.append(None), slow_ratio.append(None), gain.append(None)
            continue
        s, f = ("a", "b") if ratio >= 1 else ("b", "a")
        rr = ratio if ratio >= 1 else 1 / ratio
        t_s, t_f, calls = r[f"mean_ns_{s}"], r[f"mean_ns_{f}"], r[f"calls_per_step_{s}"]
        side_bs = {"a": bsa, "b": bsb}
        per_req = None if not (bsa and bsb) else (r["mean_ns_a"] / bsa) / (r["mean_ns_b"] / bsb)
        ops.at[i, "ratio_per_request"] = per_req
        name = {"a": labels[0], "b": labels[1]}
        if rr < min_ratio:  # not slower enough per call to be a finding: nothing to normalise or refuse
            ops.at[i, "normalised_by"] = "call" if bsa and bsb else None
            slow.append(s), slow_ratio.append(rr), gain.append((t_s - t_f) * calls)
            continue
        if not (bsa and bsb):
            ops.at[i, "compare_note"] = (
                f"batch size of {' and '.join(name[x] for x in 'ab' if not side_bs[x])} "
                "unknown: compared per call, as if both ran the same work per call"
            )
            unit, g = None, (t_s - t_f) * calls
        elif side_bs[s] <= side_bs[f]:
            unit, g = "call", (t_s - t_f) * calls
            if side_bs[s] < side_bs[f]:
                ops.at[i, "compare_note"] = (
                    f"{name[s]} is slower per call with fewer requests per call "
                    f"({side_bs[s]:g} vs {side_bs[f]:g}), so not from a larger batch"
                )
        else:
            rq = per_req if s == "a" else 1 / per_req
            if rq >= min_ratio:
                unit, rr = "request", rq
                g = (t_s / side_bs[s] - t_f / side_bs[f]) * side_bs[s] * calls
                ops.at[i, "compare_note"] = (
                    f"{name[s]} runs {side_bs[s]:g} requests per call against {side_bs[f]:g}: "
                    f"compared per request ({rr:.2f}× slower per request, "
                    f"{ratio if s == 'a' else 1 / ratio:.2f}× per call)"
                )
            else:
                ops.at[i, "normalised_by"] = "refused"
                ops.at[i, "compare_note"] = (
                    f"not compared: {name[s]} is {rr:.2f}× slower per call but runs {side_bs[s]:g} requests per call "
                    f"against {side_bs[f]:g}; per request it is {rq:.2f}× the other's"
                    f" ({'slower' if rq > 1 else 'faster'}), so its larger batch's work can explain the difference"
                )
                slow.append(None), slow_ratio.append(None), gain.append(None)
                continue
        ops.at[i, "normalised_by"] = unit
        slow.append(s), slow_ratio.append(rr), gain.append(g)
    ops["slow"], ops["slow_ratio"], ops["gain_ns"] = slow, slow_ratio, gain
    return ops


def _env_hint(op: str, kernel: str, category: str, diffs: list[dict]) -> str:
    hints = []
    for rule in finding_rules()["compare"]["env_kernels"]:
        d = next((x for x in diffs if x["key"] == rule["key"]), None)
        if d is not None and any(re.search(rule["pattern"], x) for x in (op, kernel, category)):
            hints.append(f"{d['key']} is {d['a']} vs {d['b']}")
    return "; launch settings that touch it differ: " + ", ".join(hints) if hints else ""


def config_diffs(config_a: dict | None, config_b: dict | None) -> list[dict]:
    """Launch settings (SGLANG_*/NCCL_*/CUDA_* environment and server arguments) that differ; the keys of
    ``compare.ignore_args`` left out."""
    if not config_a or not config_b:
        return []
    ignore = set(finding_rules()["compare"]["ignore_args"])
    keys = sorted((set(config_a) | set(config_b)) - ignore, key=lambda k: (k.startswith("--"), k))
    return [
        {"key": k, "a": config_a.get(k, "(unset)"), "b": config_b.get(k, "(unset)")}
        for k in keys
        if config_a.get(k) != config_b.get(k)
    ]


def compare_findings(
    a: Trace,
    b: Trace,
    *,
    ann_a: Annotation | str | None = None,
    ann_b: Annotation | str | None = None,
    config_a: dict | None = None,
    config_b: dict | None = None,
    min_ms: float | None = None,
    min_pct: float | None = None,
    steps_a=None,
    steps_b=None,
    labels: tuple[str, str] | None = None,
    bs_a: float | None = None,
    bs_b: float | None = None,
) -> Result:
    """Two deployments: per op the one slower per call (per request when the slower side runs the larger batch,
    see :func:`normalise`), its launch-configuration difference, and the differing launch settings (named on the
    ops they touch). ``ann_a`` and ``ann_b``: a name, a path or an Annotation; ``bs_a`` / ``bs_b``: requests per
    step of each side (default: the step markers' batch size)."""
    check_argument(a, "a", "a loaded Trace (tracekit.load)", Trace)
    check_argument(b, "b", "a loaded Trace (tracekit.load)", Trace)
    ann_a, ann_b = as_annotation(ann_a, name="ann_a"), as_annotation(ann_b, name="ann_b")
    rules = finding_rules()
    crules = rules["compare"]
    min_ms = float(rules["min_ms"]) if min_ms is None else float(min_ms)
    min_pct = float(rules["min_pct"]) if min_pct is None else float(min_pct)
    la, lb = labels or _labels(a, b)
    sa, sb = find_steps(a, steps_a, ann=ann_a), find_steps(b, steps_b, ann=ann_b)
    warnings = merge_warnings(a.report.warnings, b.report.warnings, sa.warnings, sb.warnings)
    use_tags = ann_a is not None and ann_b is not None and ann_a.blocks is not None and ann_b.blocks is not None
    by_work = not use_tags and None not in (vendor(a), vendor(b)) and vendor(a) != vendor(b)
    sms = (_sms(a, warnings), _sms(b, warnings))
    if by_work:  # across vendors no kernel name is shared: match what was computed (work_match)
        ta, tb = work_table(a, sa), work_table(b, sb)
    else:
        ta, tb = op_table(a, ann_a, sa, use_tags=use_tags), op_table(b, ann_b, sb, use_tags=use_tags)
    ops = ops_compared(ta, tb, sms, (_limits(a, warnings), _limits(b, warnings)))
    categories = category_table(ta, tb)
    (bsa, bsa_from), (bsb, bsb_from) = batch_of(sa, bs_a), batch_of(sb, bs_b)
    ops = normalise(ops, (bsa, bsb), (la, lb), float(crules["min_ratio"]))
    warnings += _batch_warnings(ops, (bsa, bsb), (la, lb))
    step_a, step_b = float(median_ns(sa.ends - sa.starts)), float(median_ns(sb.ends - sb.starts))
    diffs = config_diffs(config_a, config_b)
    slower = _slower_ops(ops, float(crules["min_ratio"]))
    cap = int(crules["max_ops"])
    sides = {"a": (la, a.path, bsa, step_a), "b": (lb, b.path, bsb, step_b)}
    rows = [_slower_finding(r, gain, s, rr, sides, diffs) for gain, r, s, _f, rr in slower[:cap]]
    rest = slower[cap:]
    if rest:
        rows.append(
            finding(
                None,
                "slower_rest",
                "ops",
                gain_ns=float(sum(x[0] for x in rest)),
                step_ns=step_a,
                words=_words(
                    "slower_rest",
                    count=len(rest),
                    gain=f"{ms_text(sum(x[0] for x in rest))} per step",
                    trace_a=a.path,
                    trace_b=b.path,
                ),
                evidence=", ".join(clip_text(str(x[1]["op"]), 40) for x in rest[:5]),
            )
        )
    rows += [_config_finding(d, slower, (la, lb)) for d in diffs]
    idle_rows, idle_table = idle_differences(a, b, (sa, sb), (step_a, step_b), (la, lb))
    rows += idle_rows
    table = rank_findings(rows, min_ms=min_ms, min_gib=float(rules["min_gib"]), min_pct=min_pct)
    by_unit = ops["normalised_by"].fillna("none (batch unknown)").value_counts()
    summary = {
        "a": la,
        "b": lb,
        "step_ms_a": step_a / 1e6,
        "step_ms_b": step_b / 1e6,
        "ops_compared": int(len(ops)),
        "ops_slower": len(slower),
        "config_differences": len(diffs),
        "idle_classes_changed": len(idle_rows),
        "findings": int(len(table)),
        "matched_by": "op tag"
        if use_tags
        else "op and shapes, else category and layer position"
        if by_work
        else "kernel name",
        "vendors": [vendor(a), vendor(b)],
        "sms_a": sms[0],
        "sms_b": sms[1],
        "bs_a": bsa,
        "bs_b": bsb,
        "bs_from_a": bsa_from,
        "bs_from_b": bsb_from,
        "normalised_by": {str(k): int(v) for k, v in by_unit.items()},
        "ops_refused": int((ops["normalised_by"] == "refused").sum()),
        "top": str(table["title"].iloc[0]) if len(table) else None,
    }
    if not len(ops):
        warnings.append("the two traces share no op (kernel name or op tag), so nothing can be compared")
    ops_out = ops.drop(columns=["slow", "slow_ratio", "gain_ns"])
    for c in ("grid_a", "grid_b", "block_a", "block_b"):
        ops_out[c] = ops_out[c].map(lambda v: None if v is None else ",".join(map(str, v)))
    return Result(
        command="findings",
        inputs=[trace_input(a), trace_input(b)],
        params={
            "compare": [a.path, b.path],
            "annotation": ann_a.ref if ann_a else None,
            "annotation_b": ann_b.ref if ann_b else None,
            "min_ms": min_ms,
            "min_pct": min_pct,
            "bs_a": bs_a,
            "bs_b": bs_b,
            **{f"a_{k}": v for k, v in sa.options.as_params().items()},
        },
        summary=summary,
        tables={
            "findings": table,
            "ops": ops_out,
            "categories": categories,
            "config": pd.DataFrame(diffs, columns=["key", "a", "b"]),
            "idle": pd.DataFrame(idle_table, columns=["kind", "why", "a_ns", "b_ns", "diff_ns"]),
        },
        warnings=warnings,
    )


def _batch_warnings(ops: pd.DataFrame, bs: tuple, labels: tuple[str, str]) -> list[str]:
    """What the comparison cannot say about batches: a side whose batch size is unknown (ops then compared per
    call), and the ops slower per call on the larger batch but not per request (refused)."""
    (bsa, bsb), (la, lb) = bs, labels
    out = []
    if bsa is None or bsb is None:
        unknown = " and ".join(x for x, v in ((la, bsa), (lb, bsb)) if v is None)
        out.append(
            f"the batch size of {unknown} is unknown (no step marker carries one; pass its batch size,"
            " bs / bs_b): ops are compared per call, which is like with like only if both run the same batch"
        )
    refused = ops[ops["normalised_by"] == "refused"]
    if len(refused):
        out.append(
            f"{len(refused)} op(s) slower per call in the deployment with the larger batch ({bsa:g} vs"
            f" {bsb:g} requests) but not per request are not compared (tables.ops: normalised_by"
            f" 'refused'): {', '.join(clip_text(str(x), 40) for x in refused['op'].head(3))}"
        )
    return out


def _slower_ops(ops: pd.DataFrame, min_ratio: float) -> list[tuple]:
    """The ops slower in one deployment by at least ``min_ratio``, largest gain first: (gain ns, row, slow side,
    fast side, ratio)."""
    slower = []
    for _, r in ops.iterrows():
        if not isinstance(r["slow"], str) or r["slow_ratio"] < min_ratio:
            continue
        s, f = r["slow"], "b" if r["slow"] == "a" else "a"
        slower.append((float(r["gain_ns"]), r, s, f, float(r["slow_ratio"])))
    slower.sort(key=lambda x: -x[0])
    return slower


def _slower_finding(r: pd.Series, gain: float, s: str, rr: float, sides: dict[str, tuple], diffs: list[dict]) -> dict:
    """The finding of one op slower on side ``s``: per call or per request, with its launch-configuration
    difference and the differing settings that touch it. ``sides``: per side (label, path, bs, step ns)."""
    f = "b" if s == "a" else "a"
    (la, _pa, _ba, step_a), (lb, _pb, _bb, step_b) = sides["a"], sides["b"]
    diff = _diff_text(r.to_dict(), (la, lb))
    hint = _env_hint(str(r["op"]), str(r["kernel"]), str(r["category"]), diffs)
    text = (
        f"Launch configuration differs: {diff}"
        if diff
        else "Same launch configuration in both: the difference is in the data it runs on (batch, heads, "
        "context) or in the GPU's state"
    ) + hint
    per = "request" if r["normalised_by"] == "request" else "call"
    if per == "request":
        mean_s, mean_f = r[f"mean_ns_{s}"] / sides[s][2], r[f"mean_ns_{f}"] / sides[f][2]
    else:
        mean_s, mean_f = r[f"mean_ns_{s}"], r[f"mean_ns_{f}"]
    calls = r[f"calls_per_step_{s}"] * (sides[s][2] if per == "request" else 1)
    note = r["compare_note"] or ("batch sizes equal" if r["normalised_by"] == "call" else "")
    words = _words(
        "slower_kernel",
        op=clip_text(str(r["op"])),
        ratio=f"{rr:.2f}",
        slow=sides[s][0],
        fast=sides[f][0],
        mean_slow=f"{mean_s / 1e3:.1f}",
        mean_fast=f"{mean_f / 1e3:.1f}",
        per=per,
        calls=f"{calls:g}",
        trace_slow=sides[s][1],
        trace_fast=sides[f][1],
        diff=text,
        batch=f"; {note}" if note else "",
    )
    return finding(
        None,
        "slower_kernel",
        "ops",
        gain_ns=float(gain),
        step_ns=step_a if s == "a" else step_b,
        words=words,
        evidence=_kernels_text(r, (la, lb)) + f" ({r['category']}): per step "
        f"{ms_text(r['per_step_ns_a'])} in {la}, "
        f"{ms_text(r['per_step_ns_b'])} in {lb}",
    )


def _kernels_text(r: pd.Series, labels: tuple[str, str]) -> str:
    """The kernel of an op, or each side's where they differ (across vendors)."""
    ka, kb = str(r["kernel"]), str(r.get("kernel_b", r["kernel"]))
    if ka == kb or kb in ("None", "nan"):
        return clip_text(ka, 80)
    return f"{clip_text(ka, 60)} in {labels[0]}, {clip_text(kb, 60)} in {labels[1]}"


def _config_finding(d: dict, slower: list[tuple], labels: tuple[str, str]) -> dict:
    """The finding of one differing launch setting, with the slower ops it touches; minor when it touches none."""
    la, lb = labels
    touched = [
        str(x[1]["op"]) for x in slower if _env_hint(str(x[1]["op"]), str(x[1]["kernel"]), str(x[1]["category"]), [d])
    ]
    ops_txt = (
        f"; it touches {', '.join(clip_text(t, 40) for t in touched[:3])}, slower in one of them" if touched else ""
    )
    row = finding(
        None,
        "config_diff",
        "config",
        words=_words("config_diff", key=d["key"], value_a=d["a"], value_b=d["b"], a=la, b=lb, ops=ops_txt),
        evidence=f"{d['key']}: {d['a']!s} ({la}) vs {d['b']!s} ({lb})",
    )
    row["force_minor"] = not touched  # a setting no slower op points at is listed, below the others
    return row


def _labels(a: Trace, b: Trace) -> tuple[str, str]:
    """The sides' names: each file's name (its run directory's for a numbered trace file); when both give the same
    name (one model's runs), each side's GPU (``H100``, ``MI300X``) if those differ, else "A (name)" / "B (name)"."""
    la, lb = _label(a), _label(b)
    if la != lb:
        return la, lb
    da, db = device_label(a), device_label(b)
    if da and db and da != db:
        return da, db
    return f"A ({la})", f"B ({lb})"


def _label(t: Trace) -> str:
    from pathlib import Path

    p = Path(t.path)
    return (
        p.parent.name
        if p.name.endswith(tuple(f".trace.json{x}" for x in ("", ".gz", ".zst"))) and p.name.split(".")[0].isdigit()
        else p.name.split(".")[0]
    )
