"""`tracekit findings --compare A B`: the same op slower in one deployment, with the launch-configuration
difference of its kernel (grid, block, registers, shared memory and the CTAs per wave that follow), and the launch
settings that differ between the two logs or scripts (docs/findings.md)."""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from ..annotate import Annotation, as_annotation
from ..errors import TracekitError
from ..result import Result, trace_input
from ..trace import Trace
from .blocks import annotated_steps
from .categories import categorize
from .finding_rules import _short_name, finding, finding_rules, ms_text, rank_findings
from .finding_rules import words as _words
from .steps import get_steps, median_ns, merge_warnings, step_params
from .waves import resolve_sms

OP_COLUMNS = ["op", "kernel", "category", "calls_per_step_a", "calls_per_step_b", "mean_ns_a", "mean_ns_b",
              "per_step_ns_a", "per_step_ns_b", "ratio", "grid_a", "grid_b", "block_a", "block_b", "registers_a",
              "registers_b", "shared_mem_a", "shared_mem_b", "ctas_a", "ctas_b", "ctas_per_sm_a", "ctas_per_sm_b",
              "ctas_per_wave_a", "ctas_per_wave_b", "waves_a", "waves_b"]
LAUNCH = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_mem"]


def ctas_per_sm(threads: np.ndarray, registers: np.ndarray, shared_mem: np.ndarray, limits: dict) -> np.ndarray:
    """Resident CTAs per SM that the block's threads, registers and shared memory allow (the SM's limits from
    tracekit/data/findings.json; allocation granularity ignored, so this is an upper bound); ≥ 1."""
    t = np.maximum(threads, 1)
    by_threads = limits["threads"] // t
    regs = np.where(registers > 0, registers * t, 0)
    by_regs = np.where(regs > 0, limits["registers"] // np.maximum(regs, 1), limits["blocks"])
    by_smem = np.where(shared_mem > 0, limits["shared_memory"] // np.maximum(shared_mem, 1), limits["blocks"])
    return np.maximum(np.minimum.reduce([by_threads, by_regs, by_smem, np.full_like(t, limits["blocks"])]), 1)


def op_table(trace: Trace, ann: Annotation | None, steps, *, use_tags: bool) -> pd.DataFrame:
    """Per op (op tag where the annotation gives one and ``use_tags``, else kernel name): calls and time per step,
    mean per call, and the most common launch configuration of its kernels."""
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
    k = k.assign(op=op.astype(str).to_numpy(), kernel=k["name"].astype(str).to_numpy(),
                 category=np.asarray(categorize(k), dtype=object))
    g = k.groupby("op", sort=False)
    out = pd.DataFrame({"calls": g.size() / n_steps, "mean_ns": g["dur_ns"].mean(),
                        "per_step_ns": g["dur_ns"].sum() / n_steps})
    common = (k.groupby(["op", "kernel", "category", *LAUNCH], sort=False, dropna=False).size()
              .rename("n").reset_index().sort_values(["op", "n"], ascending=[True, False], kind="stable")
              .drop_duplicates("op").set_index("op"))
    return out.join(common.drop(columns="n"))


def _sms(trace: Trace, warnings: list[str]) -> int | None:
    try:
        return resolve_sms(trace, None, None, warnings)[0]
    except TracekitError:
        return None


def _launch(row: pd.Series, side: str) -> dict[str, Any]:
    def t3(prefix):
        v = [row.get(f"{prefix}_{c}_{side}") for c in "xyz"]
        return None if any(pd.isna(x) or x < 0 for x in v) else tuple(int(x) for x in v)
    return {"grid": t3("grid"), "block": t3("block"), "registers": row.get(f"registers_{side}"),
            "shared_mem": row.get(f"shared_mem_{side}")}


def _diff_text(r: dict, labels: tuple[str, str]) -> str:
    parts = []
    for key, name in (("grid", "grid"), ("block", "block"), ("registers", "registers per thread"),
                      ("shared_mem", "shared memory B"), ("ctas", "CTAs"), ("ctas_per_wave", "CTAs per wave"),
                      ("waves", "waves")):
        a, b = r[f"{key}_a"], r[f"{key}_b"]
        if a is None or b is None or (isinstance(a, float) and np.isnan(a)) or a == b:
            continue
        fa = ",".join(map(str, a)) if isinstance(a, tuple) else f"{int(a):,}"
        fb = ",".join(map(str, b)) if isinstance(b, tuple) else f"{int(b):,}"
        parts.append(f"{name} {fa} ({labels[0]}) vs {fb} ({labels[1]})")
    return "; ".join(parts)


def ops_compared(ta: pd.DataFrame, tb: pd.DataFrame, sms: tuple[int | None, int | None], vendor: str) -> pd.DataFrame:
    """The ops both deployments run, side by side, with the launch configurations and what follows from them."""
    limits = finding_rules()["sm_limits"].get(vendor) or finding_rules()["sm_limits"]["NVIDIA"]
    both = ta.add_suffix("_a").join(tb.add_suffix("_b"), how="inner")
    rows = []
    for op, r in both.iterrows():
        row: dict[str, Any] = {"op": op, "kernel": r["kernel_a"], "category": r["category_a"],
                               "calls_per_step_a": float(r["calls_a"]), "calls_per_step_b": float(r["calls_b"]),
                               "mean_ns_a": float(r["mean_ns_a"]), "mean_ns_b": float(r["mean_ns_b"]),
                               "per_step_ns_a": float(r["per_step_ns_a"]), "per_step_ns_b": float(r["per_step_ns_b"])}
        row["ratio"] = row["mean_ns_a"] / row["mean_ns_b"] if row["mean_ns_b"] > 0 else None
        for side, n_sms in (("a", sms[0]), ("b", sms[1])):
            la = _launch(r, side)
            row[f"grid_{side}"], row[f"block_{side}"] = la["grid"], la["block"]
            row[f"registers_{side}"] = None if pd.isna(la["registers"]) or la["registers"] < 0 else int(la["registers"])
            row[f"shared_mem_{side}"] = None if pd.isna(la["shared_mem"]) or la["shared_mem"] < 0 else int(la["shared_mem"])
            ctas = int(np.prod(la["grid"])) if la["grid"] else None
            threads = int(np.prod(la["block"])) if la["block"] else None
            cps = None
            if threads is not None:
                cps = int(ctas_per_sm(np.array([threads]), np.array([row[f"registers_{side}"] or 0]),
                                      np.array([row[f"shared_mem_{side}"] or 0]), limits)[0])
            row[f"ctas_{side}"], row[f"ctas_per_sm_{side}"] = ctas, cps
            row[f"ctas_per_wave_{side}"] = cps * n_sms if cps is not None and n_sms else None
            row[f"waves_{side}"] = (-(-ctas // row[f"ctas_per_wave_{side}"]) if ctas and row[f"ctas_per_wave_{side}"]
                                    else None)
        rows.append(row)
    df = pd.DataFrame(rows, columns=OP_COLUMNS)
    return df.sort_values("op", kind="stable").reset_index(drop=True)


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
    return [{"key": k, "a": config_a.get(k, "(unset)"), "b": config_b.get(k, "(unset)")} for k in keys
            if config_a.get(k) != config_b.get(k)]


def compare_findings(a: Trace, b: Trace, *, ann_a: Annotation | str | None = None,
                     ann_b: Annotation | str | None = None,
                     config_a: dict | None = None, config_b: dict | None = None, min_ms: float | None = None,
                     steps_a=None, steps_b=None, labels: tuple[str, str] | None = None) -> Result:
    """Two deployments: per op the one slower per call, its launch-configuration difference, and the differing
    launch settings (named on the ops they touch). ``ann_a`` and ``ann_b``: a name, a path or an Annotation."""
    ann_a, ann_b = as_annotation(ann_a, name="ann_a"), as_annotation(ann_b, name="ann_b")
    rules = finding_rules()
    crules = rules["compare"]
    min_ms = float(rules["min_ms"]) if min_ms is None else float(min_ms)
    la, lb = labels or (_label(a), _label(b))
    if la == lb:
        la, lb = f"A ({la})", f"B ({lb})"
    sa, sb = get_steps(a, steps_a, ann=ann_a), get_steps(b, steps_b, ann=ann_b)
    warnings = merge_warnings(a.report.warnings, b.report.warnings, sa.warnings, sb.warnings)
    use_tags = ann_a is not None and ann_b is not None and ann_a.blocks is not None and ann_b.blocks is not None
    sms = (_sms(a, warnings), _sms(b, warnings))
    ops = ops_compared(op_table(a, ann_a, sa, use_tags=use_tags), op_table(b, ann_b, sb, use_tags=use_tags), sms,
                       str(a.meta.get("vendor") or "NVIDIA"))
    step_a, step_b = float(median_ns(sa.ends - sa.starts)), float(median_ns(sb.ends - sb.starts))
    diffs = config_diffs(config_a, config_b)
    rows = []
    slower = []
    for _, r in ops.iterrows():
        ratio = r["ratio"]
        if ratio is None or pd.isna(ratio):
            continue
        a_slow = ratio >= 1
        rr = ratio if a_slow else 1 / ratio
        if rr < float(crules["min_ratio"]):
            continue
        s, f = ("a", "b") if a_slow else ("b", "a")
        gain = (r[f"mean_ns_{s}"] - r[f"mean_ns_{f}"]) * r[f"calls_per_step_{s}"]
        slower.append((gain, r, s, f, rr))
    slower.sort(key=lambda x: -x[0])
    cap = int(crules["max_ops"])
    names = {"a": la, "b": lb}
    paths = {"a": a.path, "b": b.path}
    for gain, r, s, f, rr in slower[:cap]:
        diff = _diff_text(r.to_dict(), (la, lb))
        hint = _env_hint(str(r["op"]), str(r["kernel"]), str(r["category"]), diffs)
        text = (f"Launch configuration differs: {diff}" if diff else
                "Same launch configuration in both: the difference is in the data it runs on (batch, heads, "
                "context) or in the GPU's state") + hint
        words = _words("slower_kernel", op=_short_name(str(r["op"])), ratio=f"{rr:.2f}", slow=names[s], fast=names[f],
                       mean_slow=f"{r[f'mean_ns_{s}'] / 1e3:.1f}", mean_fast=f"{r[f'mean_ns_{f}'] / 1e3:.1f}",
                       calls=f"{r[f'calls_per_step_{s}']:g}", trace_slow=paths[s], trace_fast=paths[f], diff=text)
        rows.append(finding(None, "slower_kernel", "ops", gain_ns=float(gain), step_ns=step_a if s == "a" else step_b,
                            words=words, evidence=f"{_short_name(str(r['kernel']), 80)} ({r['category']}): per step "
                                                  f"{ms_text(r['per_step_ns_a'])} in {la}, "
                                                  f"{ms_text(r['per_step_ns_b'])} in {lb}"))
    rest = slower[cap:]
    if rest:
        rows.append(finding(None, "slower_rest", "ops", gain_ns=float(sum(x[0] for x in rest)), step_ns=step_a,
                            words=_words("slower_rest", count=len(rest), gain=f"{ms_text(sum(x[0] for x in rest))}"
                                         " per step", trace_a=a.path, trace_b=b.path),
                            evidence=", ".join(_short_name(str(x[1]["op"]), 40) for x in rest[:5])))
    for d in diffs:
        touched = [str(x[1]["op"]) for x in slower if _env_hint(str(x[1]["op"]), str(x[1]["kernel"]), str(x[1]["category"]), [d])]
        ops_txt = f"; it touches {', '.join(_short_name(t, 40) for t in touched[:3])}, slower in one of them" \
            if touched else ""
        row = finding(None, "config_diff", "config", words=_words("config_diff", key=d["key"], value_a=d["a"],
                                                                  value_b=d["b"], a=la, b=lb, ops=ops_txt),
                      evidence=f"{d['key']}: {d['a']!s} ({la}) vs {d['b']!s} ({lb})")
        row["force_minor"] = not touched  # a setting no slower op points at is listed, below the others
        rows.append(row)
    table = rank_findings(rows, min_ms=min_ms, min_gib=float(rules["min_gib"]))
    summary = {"a": la, "b": lb, "step_ms_a": step_a / 1e6, "step_ms_b": step_b / 1e6, "ops_compared": int(len(ops)),
               "ops_slower": len(slower), "config_differences": len(diffs), "findings": int(len(table)),
               "matched_by": "op tag" if use_tags else "kernel name", "sms_a": sms[0], "sms_b": sms[1],
               "top": str(table["title"].iloc[0]) if len(table) else None}
    if not len(ops):
        warnings.append("the two traces share no op (kernel name or op tag), so nothing can be compared")
    ops_out = ops.copy()
    for c in ("grid_a", "grid_b", "block_a", "block_b"):
        ops_out[c] = ops_out[c].map(lambda v: None if v is None else ",".join(map(str, v)))
    return Result(command="findings", inputs=[trace_input(a), trace_input(b)],
                  params={"compare": [a.path, b.path], "annotation": ann_a.name if ann_a else None,
                          "annotation_b": ann_b.name if ann_b else None, "min_ms": min_ms,
                          **{f"a_{k}": v for k, v in step_params(sa).items()}},
                  summary=summary,
                  tables={"findings": table, "ops": ops_out,
                          "config": pd.DataFrame(diffs, columns=["key", "a", "b"])},
                  warnings=warnings)


def _label(t: Trace) -> str:
    from pathlib import Path
    p = Path(t.path)
    return p.parent.name if p.name.endswith(tuple(f".trace.json{x}" for x in ("", ".gz", ".zst"))) and \
        p.name.split(".")[0].isdigit() else p.name.split(".")[0]

