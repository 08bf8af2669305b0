"""`tracekit findings`: what to change, ranked by what it gains per step (docs/findings.md).

Each source is a small function over results that already exist (exposure, the idle gaps of the wall, waves,
communication, the roofline, the steps' batch sizes against the captured CUDA graphs, the memory replay). A source
that cannot run on this input (no PtoP copies, no annotation with shapes, no launch log) is listed in
``tables.sources`` with the reason, never silently left out. Words, thresholds and commands live in
``tracekit/data/findings.json``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...annotation import Annotation, as_annotation
from ...errors import MissingDataError, TracekitError, UsageError
from ...events import gpu_mask, launch_index
from ...hardware import HardwareProfile, resolve_profile
from ...result import Result, shown_obj, trace_input
from ...trace import Trace
from ..comm.allgather import allgather_options, communication, exposure
from ..fleet.compare import graph_bucket
from .rules import (SOURCE_COLUMNS, _Fmt, _short_name, finding, finding_rules, kernel_label, log_server_args,
                            ms_text, rank_findings, words)
from ..hardware.roofline import roofline
from ..steps.model import step_rules
from ..steps.resolve import get_steps, median_ns, merge_warnings, step_params
from ..hardware.shapes import names_at
from ..hardware.waves import kernel_waves


@dataclass
class Context:
    """What every source of one trace reads: the trace, its steps and the options, resolved once."""

    trace: Trace
    ann: Annotation | None
    steps: Any
    step_ns: float
    hw: HardwareProfile | None
    log: Any
    agopts: dict
    sms: int | None
    bs: float | None = None
    warnings: list[str] = field(default_factory=list)
    cache: dict = field(default_factory=dict)  # what several sources share, computed once (the kernel arrays)

    def words(self, kind: str, **values) -> dict[str, str]:
        return words(kind, trace=self.trace.path, ann_opt=f" -a {self.ann.name}" if self.ann is not None else "",
                     log=getattr(self.log, "path", "LOG"), **values)


# ------------------------------------------------------------------------------------------------ sources


def exposed_allgathers(ctx: Context) -> list[dict]:
    """Exposed weight-AllGather time per layer type (the medians `tracekit exposure` reports)."""
    if not (ctx.trace.events["copy_kind"] == "PtoP").any():
        raise MissingDataError("the trace has no PtoP copies, so no weight AllGathers")
    ex = exposure(ctx.trace, **ctx.agopts, steps=ctx.steps)
    ctx.warnings += ex.warnings
    per = ex.tables["per_step_type"]
    out = []
    for typ, ns in (ex.summary["median_exposed_ns_per_step_by_type"] or {}).items():
        if not ns:
            continue
        n = int((ex.tables["per_ag"]["type"] == typ).sum())
        steps = per.loc[per["type"] == typ, "exposed_ns"]
        out.append(finding(ctx, "exposed_allgather", "exposure", gain_ns=float(ns), type=typ,
                           evidence=f"median exposed per step {ms_text(ns)} over {len(steps)} step(s) (min "
                                    f"{ms_text(steps.min())}, max {ms_text(steps.max())}); {n} {typ} AllGathers"))
    return out


def idle_gaps(ctx: Context) -> list[dict]:
    """Idle time inside the steps, split by why the GPU waited (data: idle.*)."""
    ev = ctx.trace.events
    rules = finding_rules()["idle"]
    short = int(rules["short_gap_ns"])
    g = gpu_mask(ev)
    gs, ge = ev["start_ns"].to_numpy()[g], ev["end_ns"].to_numpy()[g]
    order = np.argsort(gs, kind="stable")
    gs, ge = gs[order], ge[order]
    gcorr = ev["correlation"].to_numpy()[g][order]
    st = ctx.steps
    gaps_s, gaps_e = iv.subtract(iv.normalize(st.starts, st.ends), iv.normalize(gs, ge))
    if gaps_s.size == 0:
        return []
    step = st.step_of(gaps_s)
    nxt = np.searchsorted(gs, gaps_e, side="left")  # the first activity starting at the gap's end
    has_next = (nxt < gs.size) & (nxt >= 0)
    has_next[has_next] = gs[nxt[has_next]] == gaps_e[has_next]
    lk = ev["kind"].isin(step_rules().launch_kinds).to_numpy() & (ev["correlation"].to_numpy() >= 0)
    l_corr = ev["correlation"].to_numpy()[lk]
    l_start, l_end = ev["start_ns"].to_numpy()[lk], ev["end_ns"].to_numpy()[lk]
    li = np.full(gaps_s.size, -1, dtype=np.int64)
    if has_next.any():
        li[has_next] = launch_index(gs[nxt[has_next]], gcorr[nxt[has_next]], l_corr, l_start)
    launched_end = np.where(li >= 0, l_end[np.clip(li, 0, None)] if l_end.size else 0, -1)
    dur = gaps_e - gaps_s
    cls = np.full(gaps_s.size, "unattributed", dtype=object)
    known = li >= 0
    cls[known & (launched_end > gaps_s)] = "host"
    cls[known & (launched_end <= gaps_s)] = "sync"
    cls[(cls == "sync") & (dur < short)] = "short"
    # what ended just before a sync wait began (the dependency it most likely waited for)
    prev_end_order = np.argsort(ge, kind="stable")
    ends_sorted = ge[prev_end_order]
    prev = np.searchsorted(ends_sorted, gaps_s, side="right") - 1
    rows_of = np.flatnonzero(g)[order]  # event rows of the sorted GPU activities (names looked up only where needed)
    n_steps = len(st.table)
    out = []
    for c, kind in (("host", "idle_host"), ("sync", "idle_sync"), ("short", "idle_short"),
                    ("unattributed", "idle_unattributed")):
        m = (cls == c) & (step >= 0)
        if not m.any():
            continue
        per_step = np.bincount(np.searchsorted(st.table["step"].to_numpy(), step[m]), weights=dur[m],
                               minlength=n_steps)
        med = float(np.median(per_step))
        extra: dict[str, Any] = {"short_us": f"{short / 1000:g}", "count": f"{int(m.sum()):,}"}
        evidence = (f"{int(m.sum()):,} gap(s) in {n_steps} step(s), median {ms_text(med)} per step of "
                    f"{ms_text(ctx.step_ns)}")
        if c == "sync":
            p = prev[m]
            picked = ev["name"].iloc[rows_of[prev_end_order[np.clip(p, 0, None)]]].astype(str).to_numpy()
            before = pd.Series(np.where(p >= 0, picked, "the step start"))
            top = pd.Series(dur[m]).groupby(before.to_numpy()).sum().sort_values(ascending=False)
            extra["after"] = _short_name(str(top.index[0]))
            evidence += "; time by what ended before the gap: " + ", ".join(
                f"{_short_name(str(n))} {ms_text(v / n_steps)}" for n, v in top.head(3).items())
        out.append(finding(ctx, kind, "idle", gain_ns=med, evidence=evidence, **extra))
    return out


_CPS_FROM = {"launch configuration": "from the launch configuration",
             "launch configuration (partial)": "from the part of the launch configuration the trace has, an upper"
                                               " bound",
             "annotation": "set by the annotation", "option": "set by --ctas-per-sm",
             "assumed": "assumed: the trace lacks the launch configuration or the SM's limits"}


def wave_losses(ctx: Context) -> list[dict]:
    """Tail-wave loss per kernel (the `waves` ranking, per step), kernels of at least ``waves.min_waves`` waves."""
    rules = finding_rules()
    w = kernel_waves(ctx.trace, sms=ctx.sms, hw=ctx.hw, ann=ctx.ann, steps=ctx.steps,
                     min_waves=int(rules["waves"]["min_waves"]))
    ctx.warnings += [x for x in w.warnings if x not in ctx.trace.report.warnings]
    pk = w.tables["per_kernel"]
    n_sms = int(w.summary["sms"])
    if rules["waves"].get("exclude_comm"):
        comm = {str(n) for n in ctx.trace.events.loc[ctx.trace.events["comm_class"].notna(), "name"].unique()}
        pk = pk[~pk["name"].isin(comm)]
    pk = pk[(pk["lost_per_step_ns"] > 0) & (pk["wave_efficiency"] < float(rules["waves"]["max_efficiency"]))]
    lib = pk["name"].astype(str).map(lambda n: bool(rules["_library"].search(n))).to_numpy(dtype=bool) \
        if len(pk) else np.zeros(0, dtype=bool)
    out = library_groups(ctx, pk[lib].rename(columns={"lost_per_step_ns": "gain_per_step_ns"}),
                         "wave_quantization_library", "waves")
    pk = pk[~lib]
    cap = int(rules["max_per_source"])
    for _, r in pk.head(cap).iterrows():
        name = str(r["name"])
        f = finding(ctx, "wave_quantization", "waves", gain_ns=float(r["lost_per_step_ns"]), kernel=kernel_label(name),
                    ctas=f"{int(r['ctas']):,}", capacity=f"{int(r['capacity']):,}", waves=int(r["waves"]),
                    eff=f"{float(r['wave_efficiency']):.0%}", sms=f"{n_sms:,}", cps=int(r["ctas_per_sm"]),
                    limited_by=str(r["limited_by"]), cps_from=_CPS_FROM.get(str(r["ctas_per_sm_from"]),
                                                                             str(r["ctas_per_sm_from"])),
                    evidence=f"{int(r['count']):,} launches, {ms_text(r['total_ns'])} in all, {ms_text(r['lost_ns'])} "
                             f"lost ({float(r['lost_pct']):.1f} %); {name}")
        for rx, kinds, text in rules["_kernel_suggestions"]:
            if "wave_quantization" in kinds and rx.search(name):
                f["suggestion"] = text.format_map(_Fmt(capacity=int(r["capacity"]), sms=n_sms,
                                                       cps=int(r["ctas_per_sm"])))
        out.append(f)
    rest = pk.iloc[cap:]
    if len(rest):
        out.append(finding(ctx, "wave_quantization_rest", "waves", gain_ns=float(rest["lost_per_step_ns"].sum()),
                           count=len(rest), evidence=f"{len(rest)} kernel name(s), largest "
                                                    f"{ms_text(rest['lost_per_step_ns'].max())} per step"))
    return out


def _at(col, rows: np.ndarray) -> np.ndarray:
    """Values of a Categorical at ``rows`` as an object array (None where missing), through its codes."""
    cat = pd.Categorical(col) if not isinstance(col, pd.Categorical) else col
    table = np.empty(len(cat.categories) + 1, dtype=object)
    table[:-1] = cat.categories.to_numpy(dtype=object)
    table[-1] = None
    return table[np.asarray(cat.codes)[rows]]


def _category_of_names(trace: Trace) -> dict[str, str]:
    """Kernel name -> its category (the first kernel of that name), once per trace: one pass over the name codes."""
    from ..categories import trace_categories

    cats = trace_categories(trace)
    key = ("category_of_names", id(cats))
    got = trace.derived.get(key)
    if got is not None:
        return got
    ev = trace.events
    k = np.flatnonzero((ev["kind"] == "kernel").to_numpy())
    codes = ev["name"].cat.codes.to_numpy()[k]
    _, first = np.unique(codes, return_index=True)  # the first kernel of each name
    rows = k[first]
    got = trace.derived[key] = dict(zip(names_at(ev, rows).tolist(), _at(cats, rows).tolist()))
    return got


def library_groups(ctx: Context, pk: pd.DataFrame, kind: str, source: str, **extra) -> list[dict]:
    """One finding per category for kernels of PyTorch's own library (``pk``: ``name``, ``gain_per_step_ns``)."""
    if pk.empty:
        return []
    cat = _category_of_names(ctx.trace)
    g = pk.assign(category=pk["name"].astype(str).map(lambda n: cat.get(n, "other")))
    out = []
    for c, grp in g.groupby("category", sort=False):
        grp = grp.sort_values("gain_per_step_ns", ascending=False)
        names = ", ".join(f"{kernel_label(str(n), 50)} {ms_text(v)}" for n, v in
                          zip(grp["name"].head(3), grp["gain_per_step_ns"].head(3)))
        more = {k: (v(grp) if callable(v) else v) for k, v in extra.items()}
        out.append(finding(ctx, kind, source, gain_ns=float(grp["gain_per_step_ns"].sum()), category=str(c),
                           count=len(grp), names=names, **more,
                           evidence=f"{len(grp)} kernel name(s) of category {c}; per step: {names}"))
    return out


def _kernel_arrays(ctx: Context) -> dict[str, Any]:
    """Kernels inside the steps, aligned with :func:`tracekit.analyses.hardware.shapes.kernel_shapes`' table: duration, step,
    family, and (where the launching op has a shape) FLOPs, bytes and the time at the achievable fractions. Computed
    once per findings run (the dominance and shapes sources share it)."""
    got = ctx.cache.get("kernel_arrays")
    if got is None:
        got = ctx.cache["kernel_arrays"] = _make_kernel_arrays(ctx)
    return got


def _make_kernel_arrays(ctx: Context) -> dict[str, Any]:
    from ..categories import families, trace_categories
    from ..hardware.shapes import kernel_shapes

    ev = ctx.trace.events
    ks = kernel_shapes(ctx.trace)
    t = ks.table
    rows = t["row"].to_numpy()
    start = ev["start_ns"].to_numpy()[rows]
    dur = ev["dur_ns"].to_numpy()[rows].astype(float)
    step = ctx.steps.step_of(start)
    cats = trace_categories(ctx.trace)
    fam = _at(families(cats), rows)
    rules = finding_rules()["roofline"]
    f_hbm, f_fl = float(rules["achievable_hbm"]), float(rules["achievable_flops"])
    fl = t["flops"].to_numpy(dtype=float)
    by = t["bytes"].to_numpy(dtype=float)
    dt = t["dtype"].to_numpy(dtype=object)
    shaped = t["carries"].to_numpy(dtype=bool) & ~np.isnan(by)
    target = np.full(rows.size, np.nan)
    peak = np.full(rows.size, np.nan)
    if ctx.hw is not None and shaped.any():
        peaks = {d: ctx.hw.peak_flops(str(d)) for d in set(dt[shaped].tolist()) if d is not None}
        peak[shaped] = [peaks.get(d) or np.nan for d in dt[shaped]]
        t_mem = by / (f_hbm * ctx.hw.hbm_bytes_per_s) * 1e9
        t_fl = np.where(np.isnan(fl) | np.isnan(peak), 0.0, fl / (f_fl * np.where(np.isnan(peak), 1.0, peak)) * 1e9)
        target = np.where(shaped, np.maximum(t_mem, t_fl), np.nan)
    return {"ks": ks, "rows": rows, "dur": dur, "step": step, "in": step >= 0, "family": fam,
            "category": _at(cats, rows), "flops": fl, "bytes": by, "dtype": dt,
            "shaped": shaped & (step >= 0), "target": target, "peak": peak,
            "name": names_at(ev, rows), "op": t["op"].to_numpy(dtype=object),
            "m": t["m"].to_numpy(dtype=float), "n": t["n"].to_numpy(dtype=float), "k": t["k"].to_numpy(dtype=float),
            "graph": t["graph"].to_numpy(dtype=bool), "op_row": t["op_row"].to_numpy(),
            "n_steps": max(1, len(ctx.steps.table))}


def _pct(x: float | None) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:.0%}" if x >= 0.01 else f"{x:.1%}"


def _efficiency(ctx: Context, ka: dict, sel: np.ndarray) -> dict[str, Any]:
    """Time-weighted MFU, MBU, the shaped share of the time and the gain above the achievable roofline of ``sel``."""
    dur = ka["dur"]
    sh = sel & ka["shaped"]
    t_all, t_sh = float(dur[sel].sum()), float(dur[sh].sum())
    out = {"shaped_share": t_sh / t_all if t_all else 0.0, "mfu": None, "mbu": None, "gain_ns": None}
    if not sh.any() or ctx.hw is None:
        return out
    ok_fl = sh & ~np.isnan(ka["flops"]) & ~np.isnan(ka["peak"])
    if ok_fl.any():
        out["mfu"] = float((ka["flops"][ok_fl] / ka["peak"][ok_fl]).sum() / (dur[ok_fl].sum() * 1e-9))
    out["mbu"] = float(ka["bytes"][sh].sum() / ctx.hw.hbm_bytes_per_s / (t_sh * 1e-9)) if t_sh else None
    out["gain_ns"] = float(np.maximum(dur[sh] - ka["target"][sh], 0).sum()) / ka["n_steps"]
    return out


def _gemm_advice(ka: dict, sel: np.ndarray, eff: dict) -> str:
    adv = finding_rules()["gemm_advice"]
    sh = sel & ka["shaped"] & ~np.isnan(ka["m"])
    if not sh.any():
        return adv["compute"].format_map(_Fmt(mfu=_pct(eff["mfu"]), mbu=_pct(eff["mbu"])))
    d = pd.DataFrame({"m": ka["m"][sh], "n": ka["n"][sh], "k": ka["k"][sh], "dur": ka["dur"][sh]})
    top = d.groupby(["m", "n", "k"])["dur"].sum().idxmax()
    m, n, k = (int(x) for x in top)
    vals = _Fmt(m=f"{m:,}", n=f"{n:,}", k=f"{k:,}", mfu=_pct(eff["mfu"]), mbu=_pct(eff["mbu"]))
    if m <= int(adv["small_m_rows"]):
        key = "small_m"
    else:
        key = "memory" if (eff["mbu"] or 0) > (eff["mfu"] or 0) else "compute"
    return f"the largest shape by time is M×N×K = {m:,}×{n:,}×{k:,}; " + adv[key].format_map(vals)


def dominance(ctx: Context) -> list[dict]:
    """What dominates the step: a group of kernel families over its share of the median step (data: dominance)."""
    rules = finding_rules()
    ka = _kernel_arrays(ctx)
    if not ctx.step_ns:
        raise MissingDataError("the steps have no length")
    n_steps, dur, fam = ka["n_steps"], ka["dur"], ka["family"]
    rf = rules["roofline"]
    common = {"step": ms_text(ctx.step_ns), "hw": ctx.hw.name if ctx.hw is not None else "–",
              "hbm_pct": f"{float(rf['achievable_hbm']):.0%}", "flops_pct": f"{float(rf['achievable_flops']):.0%}"}
    out = []
    for group, spec in rules["dominance"].items():
        if group.startswith("_"):
            continue
        sel = ka["in"] & np.isin(fam, list(spec["families"]))
        busy = float(dur[sel].sum()) / n_steps
        share = busy / ctx.step_ns
        if share < float(spec["min_share"]) or not sel.any():
            continue
        vals = {**common, "busy": ms_text(busy), "share": f"{share:.0%}"}
        ev_text = f"{int(sel.sum()):,} kernels in {n_steps} step(s), {ms_text(busy)} per step of {ms_text(ctx.step_ns)}"
        if group == "eager":
            by_fam = pd.Series(dur[sel]).groupby(fam[sel]).sum().sort_values(ascending=False)
            what = ", ".join(str(f) for f in by_fam.index[:4])
            sh = sel & ka["shaped"]
            ideal = float(ka["bytes"][sh].sum()) / (float(rf["achievable_hbm"]) * ctx.hw.hbm_bytes_per_s) * 1e9 \
                / n_steps if ctx.hw is not None and sh.any() else None
            out.append(finding(ctx, "dominant_eager", "dominance", gain_ns=busy, what=what,
                               calls=f"{sel.sum() / n_steps:,.0f}", mean_us=f"{dur[sel].mean() / 1e3:.1f}",
                               ideal=ms_text(ideal) + " per step" if ideal is not None else "– (no recorded shapes)",
                               **vals, evidence=ev_text + "; by family: " + ", ".join(
                                   f"{f} {ms_text(v / n_steps)}" for f, v in by_fam.items())))
        elif group in ("gemm", "attention"):
            eff = _efficiency(ctx, ka, sel)
            if eff["gain_ns"] is None or eff["shaped_share"] < float(rules["roofline"]["min_shaped_share"]):
                ks = ka["ks"]
                unshaped = sel & ~ka["shaped"]
                t_un = float(dur[unshaped].sum()) or 1.0
                graph_share = float(dur[unshaped & ka["graph"]].sum()) / t_un
                no_op_share = float(dur[unshaped & ~ka["graph"] & (ka["op_row"] < 0)].sum()) / t_un
                if ctx.hw is None and eff["shaped_share"] >= float(rules["roofline"]["min_shaped_share"]):
                    why = "no hardware profile matches the trace's device to price them against; pass --hw NAME"
                elif graph_share >= 0.5:
                    why = f"{graph_share:.0%} of the rest is replayed from CUDA graphs, which have no launching op"
                elif no_op_share >= 0.5:
                    why = (ks.why or f"{no_op_share:.0%} of the rest has no launching op in the trace (launched"
                           " before the CPU side was recorded, or from a thread without CPU ops)")
                else:
                    why = ks.why or "their launching ops have no model in tracekit/data/op_models.json"
                out.append(finding(ctx, f"dominant_{group}_unshaped", "dominance", gain_ns=None, **vals,
                                   shaped=f"{eff['shaped_share']:.0%}", why=why,
                                   evidence=f"{ev_text}; {eff['shaped_share']:.0%} of that time with a recorded"
                                            " shape"))
                continue
            extra = {"advice": _gemm_advice(ka, sel, eff)} if group == "gemm" else {}
            out.append(finding(ctx, f"dominant_{group}", "dominance", gain_ns=eff["gain_ns"], mfu=_pct(eff["mfu"]),
                               mbu=_pct(eff["mbu"]), shaped=f"{eff['shaped_share']:.0%}", **vals, **extra,
                               evidence=ev_text + f"; {eff['shaped_share']:.0%} of that time with a recorded shape"))
        elif group == "comm":
            comm = sel
            comp = ka["in"] & ~np.isin(fam, list(spec["families"]))
            rows = ka["rows"]
            ev = ctx.trace.events
            s0, e0 = ev["start_ns"].to_numpy()[rows], ev["end_ns"].to_numpy()[rows]
            exposed = iv.total(iv.subtract(iv.normalize(s0[comm], e0[comm]), iv.normalize(s0[comp], e0[comp])))
            exp = float(exposed) / n_steps
            # no gain of its own: the communication sources (critical_comm, exposed_allgather) price it
            out.append(finding(ctx, "dominant_comm", "dominance", gain_ns=None, exposed=ms_text(exp),
                               exposed_share=f"{exp / ctx.step_ns:.0%}", **vals,
                               evidence=ev_text + f"; {ms_text(exp)} per step with no compute kernel running"))
    return out


def shape_rooflines(ctx: Context) -> list[dict]:
    """Kernels far below the roofline, from the shapes the trace records (no annotation): per kernel name of the
    GEMM and attention families; PyTorch's own kernels and the memory-bound families grouped per category."""
    if ctx.hw is None:
        raise MissingDataError("needs a hardware profile: the trace's device matches none; pass --hw NAME")
    ka = _kernel_arrays(ctx)
    ks = ka["ks"]
    if not ka["shaped"].any():
        raise MissingDataError(ks.why or ("the kernels are replayed from CUDA graphs (no launching op, no shapes)"
                                          if ks.graph_kernels else "no kernel inside the steps has a recorded shape"))
    rules = finding_rules()
    rf = rules["roofline"]
    sh = ka["shaped"]
    d = pd.DataFrame({"name": ka["name"][sh], "dur": ka["dur"][sh], "target": ka["target"][sh],
                      "gain": np.maximum(ka["dur"][sh] - ka["target"][sh], 0), "flops": ka["flops"][sh],
                      "bytes": ka["bytes"][sh], "peak": ka["peak"][sh], "family": ka["family"][sh],
                      "mfam": ks.table["family"].to_numpy(dtype=object)[sh], "op": ka["op"][sh],
                      "dtype": ka["dtype"][sh], "m": ka["m"][sh], "n": ka["n"][sh], "k": ka["k"][sh]})
    n_steps = ka["n_steps"]
    g = d.groupby("name", sort=False)
    per = pd.DataFrame({"dur": g["dur"].sum(), "target": g["target"].sum(), "gain": g["gain"].sum(),
                        "calls": g.size(), "bytes": g["bytes"].mean(), "flops": g["flops"].mean(),
                        "peak": g["peak"].first(), "mfam": g["mfam"].agg(lambda x: x.mode().iloc[0]),
                        "op": g["op"].agg(lambda x: x.mode().iloc[0]), "dtype": g["dtype"].first(),
                        "m": g["m"].first(), "n": g["n"].first(), "k": g["k"].first()}).reset_index()
    per["eff"] = per["target"] / per["dur"]
    per = per[(per["eff"] < float(rf["far_below"])) & (per["gain"] > 0)]
    per = per.assign(gain_per_step_ns=per["gain"] / n_steps).sort_values("gain_per_step_ns", ascending=False)
    lib = per["name"].map(lambda n: bool(rules["_library"].search(n))).to_numpy(dtype=bool) | \
        ~per["mfam"].isin(list(rf["families"])).to_numpy(dtype=bool)
    bw = ctx.hw.hbm_bytes_per_s
    common = {"hw": ctx.hw.name, "hbm_pct": f"{float(rf['achievable_hbm']):.0%}",
              "flops_pct": f"{float(rf['achievable_flops']):.0%}"}

    def tw_mbu(grp):
        return _pct(float((grp["bytes"] * grp["calls"]).sum() / bw / (grp["dur"].sum() * 1e-9)))
    out = library_groups(ctx, per[lib], "kernel_roofline_library", "shapes", mbu=tw_mbu, **common)
    indiv = per[~lib]
    cap = int(rules["max_per_source"])
    adv = rules["gemm_advice"]
    for _, r in indiv.head(cap).iterrows():
        mean = r["dur"] / r["calls"]
        mbu = r["bytes"] / bw / (mean * 1e-9)
        mfu = r["flops"] / r["peak"] / (mean * 1e-9) if pd.notna(r["flops"]) and pd.notna(r["peak"]) else None
        bound = "compute" if mfu is not None and r["flops"] / r["bytes"] >= r["peak"] / bw else "memory"
        if pd.notna(r["m"]):
            m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
            shape = f"M×N×K {m:,}×{n:,}×{k:,}, {r['dtype']}"
            key = "small_m" if m <= int(adv["small_m_rows"]) else bound
            advice = adv[key].format_map(_Fmt(m=f"{m:,}", n=f"{n:,}", k=f"{k:,}", mfu=_pct(mfu), mbu=_pct(mbu)))
        else:
            shape = f"{r['dtype']}, {int(r['flops']):,} FLOP, {int(r['bytes']):,} B per call" if pd.notna(r["flops"]) \
                else f"{r['dtype']}, {int(r['bytes']):,} B per call"
            advice = finding_rules()["kinds"]["dominant_attention"]["suggestion"] if r["mfam"] == "attention" \
                else adv[bound].format_map(_Fmt(mfu=_pct(mfu), mbu=_pct(mbu)))
        out.append(finding(ctx, "kernel_roofline", "shapes", gain_ns=float(r["gain_per_step_ns"]),
                           kernel=kernel_label(str(r["name"])), op=str(r["op"]), mean_us=f"{mean / 1e3:.1f}",
                           per_step=f"{r['calls'] / n_steps:g}", target_us=f"{r['target'] / r['calls'] / 1e3:.1f}",
                           dtype=str(r["dtype"]), mfu=_pct(mfu), mbu=_pct(mbu), bound=bound, shape=shape,
                           advice=advice, **common,
                           evidence=f"{int(r['calls']):,} shaped calls, {ms_text(r['dur'] / n_steps)} per step, "
                                    f"{ms_text(r['target'] / n_steps)} at the achievable roofline; {r['name']}"))
    rest = indiv.iloc[cap:]
    if len(rest):
        out.append(finding(ctx, "kernel_roofline_rest", "shapes", gain_ns=float(rest["gain_per_step_ns"].sum()),
                           count=len(rest), evidence=f"{len(rest)} kernel name(s), largest "
                                                    f"{ms_text(rest['gain_per_step_ns'].max())} per step"))
    return out


def critical_communication(ctx: Context) -> list[dict]:
    """Communication on the main stream (its result is the next kernel's input), per class."""
    main = ctx.ann.main_stream if ctx.ann is not None and isinstance(ctx.ann.main_stream, int) else None
    c = communication(ctx.trace, main=main, local_copy_pattern=ctx.agopts["local_copy_pattern"], steps=ctx.steps)
    per = c.tables["per_step_class"]
    n_steps = max(1, int(c.summary["steps"]))
    out = []
    for cls, ns in (c.summary["median_critical_ns_per_step_by_class"] or {}).items():
        if not ns:
            continue
        by_name = (per[per["class"] == cls].groupby("name", observed=True)["critical_ns"].sum() / n_steps) \
            .sort_values(ascending=False)
        by_name = by_name[by_name > 0]
        names = ", ".join(f"{_short_name(str(n), 40)} {ms_text(v)}" for n, v in by_name.head(3).items())
        out.append(finding(ctx, "critical_comm", "comm", gain_ns=float(ns), cls=cls, names=names or cls,
                           evidence=f"median {ms_text(ns)} per step on the main stream (device {c.summary['main_device']}"
                                    f" stream {c.summary['main_stream']}); by name per step: {names}"))
    return out


def roofline_gaps(ctx: Context) -> list[dict]:
    """Time the shaped op tags spend above the achievable fraction of the hardware's HBM or FLOP/s peak."""
    if ctx.ann is None:
        raise MissingDataError("needs an annotation with op_shapes or op_traffic (-a ANN)")
    if ctx.hw is None:
        raise MissingDataError("needs a hardware profile: the trace's device matches none; pass --hw NAME")
    if not ctx.ann.op_shapes and not ctx.ann.op_traffic:
        # roofline() would fall back to the recorded shapes (per kernel, no per_tag): those are the "shapes" source's
        raise MissingDataError(f"annotation {ctx.ann.source or ctx.ann.name} has no op_shapes or op_traffic (the"
                               " shapes the trace records are the 'shapes' source's)")
    rf = roofline(ctx.trace, ctx.ann, ctx.hw, bs=ctx.bs, steps=ctx.steps)
    rules = finding_rules()["roofline"]
    f_hbm, f_fl = float(rules["achievable_hbm"]), float(rules["achievable_flops"])
    n_steps = max(1, len(ctx.steps.table))
    out = []
    for _, r in rf.tables["per_tag"].iterrows():
        t_mem = r["bytes"] / (f_hbm * ctx.hw.hbm_bytes_per_s) * 1e9
        peak = ctx.hw.peak_flops(str(r["dtype"])) if pd.notna(r["flops"]) else None
        t_fl = float(r["flops"]) / (f_fl * peak) * 1e9 if peak else 0.0
        target = max(t_mem, t_fl)
        per_step = r["count"] / n_steps
        gain = (float(r["mean_ns"]) - target) * per_step
        if gain <= 0:
            continue
        mbu = r.get("mbu")
        mfu = r.get("mfu")
        out.append(finding(ctx, "roofline_gap", "roofline", gain_ns=gain, tag=r["op_tag"],
                           mean_us=f"{r['mean_ns'] / 1e3:.1f}", per_step=f"{per_step:g}", target_us=f"{target / 1e3:.1f}",
                           hbm_pct=f"{f_hbm:.0%}", flops_pct=f"{f_fl:.0%}", hw=ctx.hw.name,
                           mbu="–" if mbu is None or pd.isna(mbu) else f"{float(mbu):.0%}",
                           mfu="–" if mfu is None or pd.isna(mfu) else f"{float(mfu):.0%}",
                           bound=str(r.get("bound") or "memory"),
                           evidence=f"bs {r['bs']}: {int(r['bytes']):,} B, "
                                    f"{'–' if pd.isna(r['flops']) else format(int(r['flops']), ',')} FLOP per kernel"))
    return out


def graph_padding(ctx: Context) -> list[dict]:
    """Steps whose batch size was not captured as a CUDA graph (they pad to the next one, or run eagerly)."""
    if ctx.log is None:
        raise MissingDataError("needs the launch log (--log) for the captured CUDA-graph sizes")
    args = log_server_args(ctx.log)
    captured = tuple(sorted(int(x) for x in (args.get("cuda_graph_bs") or [])))
    if not captured:
        raise MissingDataError(f"{ctx.log.path} names no cuda_graph_bs")
    if args.get("disable_cuda_graph"):
        raise MissingDataError(f"{ctx.log.path}: CUDA graphs are disabled (--disable-cuda-graph)")
    bs = pd.to_numeric(ctx.steps.table["bs"], errors="coerce")
    if bs.isna().all():
        raise MissingDataError("the step markers carry no batch size")
    out = []
    for b, n in bs.dropna().astype(int).value_counts().sort_index().items():
        if b in captured:
            continue
        bucket = graph_bucket(int(b), captured)
        text = ",".join(map(str, captured))
        if bucket is None:
            out.append(finding(ctx, "graph_missing", "graphs", bs=b, n=n, largest=captured[-1], captured=text,
                               evidence=f"{n} step(s) at bs {b}; captured {text}"))
        else:
            out.append(finding(ctx, "graph_padding", "graphs", bs=b, bucket=bucket, n=n, pad=bucket - b,
                               captured=text, evidence=f"{n} step(s) at bs {b}; captured {text}"))
    return out


SOURCES: list[tuple[str, Callable[[Context], list[dict]]]] = [
    ("exposure", exposed_allgathers), ("idle", idle_gaps), ("waves", wave_losses), ("comm", critical_communication),
    ("roofline", roofline_gaps), ("graphs", graph_padding), ("dominance", dominance), ("shapes", shape_rooflines),
]


def run_sources(ctx: Context, sources) -> tuple[list[dict], list[dict]]:
    """Every source's findings, and per source whether it ran and why not."""
    rows, status = [], []
    for name, fn in sources:
        try:
            got = fn(ctx)
        except (TracekitError, UsageError) as exc:
            status.append({"source": name, "ran": False, "findings": 0, "reason": str(exc)})
            continue
        rows += got
        status.append({"source": name, "ran": True, "findings": len(got), "reason": None})
    return rows, status


def findings(trace: Trace | None = None, ann: Annotation | str | None = None, *, log=None,
             hw: HardwareProfile | str | None = None, sms: int | None = None, bs: float | None = None,
             min_ms: float | None = None, min_pct: float | None = None,
             compare: tuple[Trace, Trace] | None = None, ann_b: Annotation | str | None = None,
             bs_b: float | None = None,
             config: dict | None = None, config_b: dict | None = None, steps=None, step_name: str | None = None,
             min_step_ns: int | None = None, phase: str | None = None, step_source: str | None = None,
             steps_file=None, group_size: int | None = None, ag_size=None, local_copy: str | None = None,
             ranks: Result | None = None) -> Result:
    """`tracekit findings TRACE`: a ranked list of opportunities, each with its gain per step, its basis (measured
    or estimated, and how), the evidence, the command that shows it, and what to try. With a launch ``log`` the
    CUDA-graph and memory sources run too. A time finding is major when its gain is at least ``min_pct`` % of the
    median step (default 1, the rules file's ``min_pct``) and at least ``min_ms`` ms per step (the absolute floor,
    default 0.5); every other finding is ``minor``.

    ``compare=(A, B)``: two deployments instead (``ann`` for A, ``ann_b`` for B, default ``ann``; ``config`` /
    ``config_b`` their launch settings from :func:`tracekit.launch_config`; ``bs`` and ``bs_b`` their requests per
    step where the step markers carry none): the same op slower in one of them — per call, or per request when the
    slower side runs the larger batch — with its launch-configuration difference, and the settings that differ.
    ``ranks``: the result of ``tracekit.imbalance(RUN_DIR)`` instead — what DP imbalance costs per step and which
    rank makes the others wait, and why (``tracekit findings RUN_DIR``). ``ann`` and ``ann_b``: a name, a path or an
    Annotation; ``hw``: a profile, its name or a JSON file."""
    if ranks is not None:  # `findings RUN_DIR`: the ranks of one run (a tracekit.imbalance result)
        if trace is not None or compare is not None:
            raise UsageError("give one TRACE, two deployments with --compare A B, or the ranks of one run, not two")
        from .ranks import rank_findings_of

        return rank_findings_of(ranks, min_ms=min_ms, min_pct=min_pct)
    ann, ann_b = as_annotation(ann), as_annotation(ann_b, name="ann_b")
    if compare is not None:
        if trace is not None:
            raise UsageError("give one TRACE, or two deployments with --compare A B, not both")
        from .compare import compare_findings

        so = dict(step_name=step_name, min_step_ns=min_step_ns, phase=phase, source=step_source, steps_file=steps_file)
        a, b = compare
        return compare_findings(a, b, ann_a=ann, ann_b=ann_b if ann_b is not None else ann, config_a=config,
                                config_b=config_b, min_ms=min_ms, min_pct=min_pct, bs_a=bs, bs_b=bs_b,
                                steps_a=get_steps(a, steps, ann=ann, **so),
                                steps_b=get_steps(b, steps, ann=ann_b if ann_b is not None else ann, **so))
    if trace is None:
        raise UsageError("findings needs a TRACE (or --compare A B)")
    rules = finding_rules()
    min_ms = float(rules["min_ms"]) if min_ms is None else float(min_ms)
    if min_ms < 0:
        raise UsageError("--min-ms must be 0 or more")
    min_pct = float(rules["min_pct"]) if min_pct is None else float(min_pct)
    if not 0 <= min_pct <= 100:
        raise UsageError("--min-pct must be between 0 and 100")
    st = get_steps(trace, steps, ann=ann, step_name=step_name, min_step_ns=min_step_ns, phase=phase,
                   source=step_source, steps_file=steps_file)
    wall = (st.ends - st.starts).astype(np.int64)
    step_ns = float(median_ns(wall)) if wall.size else 0.0
    profile = hw if isinstance(hw, HardwareProfile) else _profile(hw, trace)
    ctx = Context(trace=trace, ann=ann, steps=st, step_ns=step_ns, hw=profile, log=log, bs=bs,
                  agopts=allgather_options(ann, group_size=group_size, sizes=ag_size, local_copy=local_copy), sms=sms)
    srcs = list(SOURCES)
    if log is not None:
        from .memory import MEMORY_SOURCES
        srcs += MEMORY_SOURCES
    rows, status = run_sources(ctx, srcs)
    table = rank_findings(rows, min_ms=min_ms, min_gib=float(rules["min_gib"]), min_pct=min_pct)
    major = table[~table["minor"]]
    summary = {"step_ms": step_ns / 1e6, "findings": int(len(table)), "major": int(len(major)),
               "minor": int(table["minor"].sum()),
               "total_gain_ms": float(np.nansum(table["gain_ms_per_step"].to_numpy(dtype=float, na_value=np.nan))),
               "total_gain_gib": float(np.nansum(table["gain_gib"].to_numpy(dtype=float, na_value=np.nan))),
               "top": str(table["title"].iloc[0]) if len(table) else None,
               "steps": int(len(st.table)), "marker": st.marker, "trustworthy": st.trustworthy,
               "hw": profile.name if profile is not None else None}
    warnings = merge_warnings(trace.report.warnings, st.warnings, ctx.warnings)
    if not st.trustworthy:
        warnings.append(f"{trace.path}: the step health checks failed for some steps (tracekit steps); the gains are"
                        " medians over steps that may be under-recorded")
    return Result(command="findings", inputs=[trace_input(trace)] + ([{"path": log.path}] if log is not None else []),
                  params={"annotation": ann.name if ann else None, "hw": profile.name if profile else None,
                          "sms": sms, "min_ms": min_ms, "min_pct": min_pct, **step_params(st), "group_size": ctx.agopts["group_size"],
                          "sizes": ctx.agopts["sizes"]},
                  summary=summary,
                  tables={"findings": table, "sources": pd.DataFrame(shown_obj(status), columns=SOURCE_COLUMNS)},
                  warnings=warnings)


def _profile(hw, trace: Trace) -> HardwareProfile | None:
    """The named profile, else the trace's detected one, else None (the roofline source then says why)."""
    try:
        return resolve_profile(hw, trace.meta, what="findings")
    except TracekitError:
        if hw is not None:
            raise
        return None
