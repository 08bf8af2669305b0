"""Findings sources read from the kernels: tail-wave losses, what dominates the step (eager kernels, GEMMs and
attention against the roofline, communication with no compute beside it), kernels far below the roofline from the
shapes the trace records, and an annotation's shaped op tags against the achievable roofline.

Each source takes the :class:`.context.Context` and returns rows made with :func:`.rules.finding`; it raises
MissingDataError (one sentence) when it cannot run on this input. The kernel arrays they share are
:mod:`.kernel_arrays`'.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...errors import MissingDataError
from ..hardware.roofline import roofline
from ..hardware.shapes import unknown_work_sentence
from ..hardware.waves import kernel_waves
from .context import Context
from .kernel_arrays import efficiency, in_families, kernel_arrays, library_groups, pct_text, rest_finding
from .rules import _Fmt, distinct_labels, finding, finding_rules, kernel_label, launch_floor_ns, ms_text


_CPS_FROM = {
    "launch configuration": "from the launch configuration",
    "launch configuration (partial)": "from the part of the launch configuration the trace has, an upper bound",
    "annotation": "set by the annotation",
    "option": "set by --ctas-per-sm",
    "assumed": "assumed: the trace lacks the launch configuration or the SM's limits",
}
_CPS_RANGE = (
    "a range: the trace records no registers or shared memory (LDS) per kernel, so every count from the worst case"
    " the SM's limits allow to the count from the block size alone; the loss holds at every count in it"
)


def wave_losses(ctx: Context) -> list[dict]:
    """Tail-wave loss per kernel (the `waves` ranking, per step), kernels of at least ``waves.min_waves`` waves.

    Where a kernel's CTAs per SM are a range (no registers or LDS in the trace: ROCm), the finding is filed only
    when it holds at every count in the range (efficiency below ``waves.max_efficiency`` at the best count, a loss
    at the least), its gain is the least loss, and its text gives the range and says why."""
    rules = finding_rules()
    w = kernel_waves(
        ctx.trace, sms=ctx.sms, hw=ctx.hw, ann=ctx.ann, steps=ctx.steps, min_waves=int(rules["waves"]["min_waves"])
    )
    ctx.warnings += [x for x in w.warnings if x not in ctx.trace.report.warnings]
    pk = w.tables["per_kernel"]
    n_sms = int(w.summary["sms"])
    # communication kernels are not in per_kernel: waves lists them apart (tables.communication), one rule for both
    # the least loss and the best efficiency over the range (the exact ones where the count is known)
    pk = pk[(pk["lost_per_step_lo_ns"] > 0) & (pk["wave_efficiency_hi"] < float(rules["waves"]["max_efficiency"]))]
    lib = (
        pk["name"].astype(str).map(lambda n: bool(rules["_library"].search(n))).to_numpy(dtype=bool)
        if len(pk)
        else np.zeros(0, dtype=bool)
    )
    out = library_groups(
        ctx, pk[lib].rename(columns={"lost_per_step_lo_ns": "gain_per_step_ns"}), "wave_quantization_library", "waves"
    )
    pk = pk[~lib]
    cap = int(rules["max_per_source"])
    shown = pk.head(cap)
    common = _common_grids(w.tables["per_grid"])
    labels = distinct_labels([str(n) for n in shown["name"]])
    for label, (_, r) in zip(labels, shown.iterrows()):
        name = str(r["name"])
        f = finding(
            ctx,
            "wave_quantization",
            "waves",
            gain_ns=float(r["lost_per_step_lo_ns"]),
            kernel=label,
            sms=f"{n_sms:,}",
            **_wave_fields(r, common.loc[name] if name in common.index else None),
        )
        for rx, kinds, text in rules["_kernel_suggestions"]:
            if "wave_quantization" in kinds and rx.search(name):
                f["suggestion"] = text.format_map(
                    _Fmt(capacity=int(r["capacity_hi"]), sms=n_sms, cps=int(r["ctas_per_sm_lo"]))
                )
        out.append(f)
    return out + rest_finding(ctx, "wave_quantization_rest", "waves", pk.iloc[cap:], "lost_per_step_lo_ns")


def _span(lo, hi, fmt) -> str:
    a, b = fmt(lo), fmt(hi)
    return a if a == b else f"{a}–{b}"


def _common_grids(per_grid: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name, its most common launch grid (the one whose CTAs, waves and capacity the per-kernel table
    shows: most launches, then most time lost), with that grid's own efficiency and launch count."""
    pg = per_grid.sort_values(["name", "count", "lost_ns"], ascending=[True, False, False], kind="stable")
    return pg.drop_duplicates("name").set_index("name")


def _wave_fields(r: pd.Series, grid: pd.Series | None = None) -> dict:
    """A tail-wave finding's numbers: one value each where the CTAs per SM are known, else the range of each over
    every count the SM's limits allow (waves, efficiency, capacity) and what the range means. The CTAs, waves and
    efficiency are of one grid, the name's most common (``grid``); where the name runs several grids, ``grids_note``
    gives the efficiency over all of them (what the loss is of), so that the words never mix two grids."""
    ranged = int(r["ctas_per_sm_lo"]) < int(r["ctas_per_sm_hi"])
    lost = _span(r["lost_lo_ns"], r["lost_hi_ns"], ms_text)
    pct = _span(float(r["lost_pct_lo"]), float(r["lost_pct_hi"]), lambda v: f"{v:.1f}")
    src = str(r["ctas_per_sm_from"])
    pct_of = lambda v: f"{v:.0%}"  # noqa: E731
    overall = _span(float(r["wave_efficiency_lo"]), float(r["wave_efficiency_hi"]), pct_of)
    several = grid is not None and int(r.get("grids", 1)) > 1
    eff = _span(float(grid["wave_efficiency_lo"]), float(grid["wave_efficiency_hi"]), pct_of) if several else overall
    note = (
        f" (its most common launch, {int(grid['count']):,} of {int(r['count']):,}; over its {int(r['grids'])}"
        f" grids of {int(r['ctas_min']):,}–{int(r['ctas_max']):,} CTAs, {overall} efficiency, which the loss is of)"
        if several
        else ""
    )
    return {
        "ctas": f"{int(r['ctas']):,}",
        "capacity": _span(int(r["capacity_lo"]), int(r["capacity_hi"]), lambda v: f"{v:,}"),
        "waves": _span(int(r["waves_lo"]), int(r["waves_hi"]), str),
        "eff": eff,
        "grids_note": note,
        "cps": _span(int(r["ctas_per_sm_lo"]), int(r["ctas_per_sm_hi"]), str),
        "limited_by": str(r["limited_by"]),
        "cps_from": _CPS_RANGE if ranged else _CPS_FROM.get(src, src),
        "evidence": f"{int(r['count']):,} launches, {ms_text(r['total_ns'])} in all, {lost} lost ({pct} %)"
        + (" over the range of CTAs per SM; the least is counted" if ranged else "")
        + f"; {r['name']}",
    }


def _gemm_advice(ka: dict, sel: np.ndarray, eff: dict) -> str:
    adv = finding_rules()["gemm_advice"]
    sh = sel & ka["shaped"] & ~np.isnan(ka["m"])
    if not sh.any():
        return adv["compute"].format_map(_Fmt(mfu=pct_text(eff["mfu"]), mbu=pct_text(eff["mbu"])))
    d = pd.DataFrame({"m": ka["m"][sh], "n": ka["n"][sh], "k": ka["k"][sh], "dur": ka["dur"][sh]})
    top = d.groupby(["m", "n", "k"])["dur"].sum().idxmax()
    m, n, k = (int(x) for x in top)
    vals = _Fmt(m=f"{m:,}", n=f"{n:,}", k=f"{k:,}", mfu=pct_text(eff["mfu"]), mbu=pct_text(eff["mbu"]))
    if m <= int(adv["small_m_rows"]):
        key = "small_m"
    else:
        key = "memory" if (eff["mbu"] or 0) > (eff["mfu"] or 0) else "compute"
    return f"the largest shape by time is M×N×K = {m:,}×{n:,}×{k:,}; " + adv[key].format_map(vals)


def _clipped(ctx: Context, ka: dict, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, device) of the kernels ``sel``, each cut to its step's window: what they take of the steps (cut
    once for every kernel of ``ka``, kept with it)."""
    clip = ka.get("_clipped")
    if clip is None:
        ev, rows = ctx.trace.events, ka["rows"]
        s, e = ev["start_ns"].to_numpy()[rows], ev["end_ns"].to_numpy()[rows]
        k = iv.window_of(s, ctx.steps.starts, ctx.steps.ends)
        ok = k >= 0
        cs, ce = s.copy(), e.copy()
        cs[ok], ce[ok] = np.maximum(s[ok], ctx.steps.starts[k[ok]]), np.minimum(e[ok], ctx.steps.ends[k[ok]])
        clip = ka["_clipped"] = (ok, cs, ce, ev["device"].to_numpy()[rows])
    ok, cs, ce, dev = clip
    m = np.flatnonzero(sel & ok)  # the positions once, for the three columns
    return cs[m], ce[m], dev[m]


def _union_by_device(s: np.ndarray, e: np.ndarray, dev: np.ndarray) -> float:
    """Time covered, overlaps counted once, averaged over the devices (one GPU's view of the step)."""
    devices = pd.unique(dev)
    if len(devices) == 1:  # one GPU (the usual trace): every kernel is that device's
        return float(iv.total(iv.normalize(s, e)))
    return sum(float(iv.total(iv.normalize(s[dev == d], e[dev == d]))) for d in devices) / max(len(devices), 1)


def _steps_ns(ctx: Context, n_steps: int) -> float:
    """The steps' time the shares are of: the sum of their windows (a share of it is never above 100 %)."""
    total = float((ctx.steps.ends - ctx.steps.starts).sum())
    return total if total > 0 else ctx.step_ns * n_steps


def dominance(ctx: Context) -> list[dict]:
    """What dominates the step: a group of kernel families over its share of the median step (data: dominance)."""
    rules = finding_rules()
    ka = kernel_arrays(ctx)
    if not ctx.step_ns:
        raise MissingDataError("the steps have no length")
    n_steps, dur, fam = ka["n_steps"], ka["dur"], ka["family"]
    rf = rules["roofline"]
    mean_step = _steps_ns(ctx, n_steps) / n_steps  # the shares are of the steps' time: the step they read is its mean
    common = {
        "step": ms_text(mean_step),
        "hw": ctx.hw.name if ctx.hw is not None else "–",
        "hbm_pct": f"{float(rf['achievable_hbm']):.0%}",
        "flops_pct": f"{float(rf['achievable_flops']):.0%}",
    }
    out = []
    for group, spec in rules["dominance"].items():
        if group.startswith("_"):
            continue
        sel = ka["in"] & in_families(ka, spec["families"])
        if group == "eager":  # kernels a compiler or library already fused are not eager work to fuse
            sel = sel & ~ka["fused"]
        # the time they run, overlaps across streams counted once and cut to the steps, so that a share of the
        # step is a share (kernels of two streams, or one running past its step's end, once made it 103 %)
        on = _union_by_device(*_clipped(ctx, ka, sel)) if sel.any() else 0.0
        busy = on / n_steps
        share = on / _steps_ns(ctx, n_steps)
        if share < float(spec["min_share"]) or not sel.any():
            continue
        vals = {**common, "busy": ms_text(busy), "share": f"{share:.0%}"}
        ev_text = (
            f"{int(sel.sum()):,} kernels in {n_steps} step(s), {ms_text(busy)} per step of {ms_text(mean_step)}"
            " (the steps' mean)"
        )
        if group == "eager":
            by_fam = pd.Series(dur[sel]).groupby(fam[sel]).sum().sort_values(ascending=False)
            what = ", ".join(str(f) for f in by_fam.index[:4])
            sh = sel & ka["shaped"]
            ideal = (
                float(ka["bytes"][sh].sum()) / (float(rf["achievable_hbm"]) * ctx.hw.hbm_bytes_per_s) * 1e9 / n_steps
                if ctx.hw is not None and sh.any()
                else None
            )
            out.append(
                finding(
                    ctx,
                    "dominant_eager",
                    "dominance",
                    gain_ns=busy,
                    variant="graph" if float(dur[sel & ka["graph"]].sum()) >= 0.5 * float(dur[sel].sum()) else "",
                    what=what,
                    calls=f"{sel.sum() / n_steps:,.0f}",
                    mean_us=f"{dur[sel].mean() / 1e3:.1f}",
                    ideal=ms_text(ideal) + " per step" if ideal is not None else "– (no recorded shapes)",
                    **vals,
                    evidence=ev_text
                    + "; by family: "
                    + ", ".join(f"{f} {ms_text(v / n_steps)}" for f, v in by_fam.items()),
                )
            )
        elif group in ("gemm", "attention"):
            eff = efficiency(ctx, ka, sel)
            if eff["gain_ns"] is None or eff["shaped_share"] < float(rules["roofline"]["min_shaped_share"]):
                ks = ka["ks"]
                unshaped = sel & ~ka["shaped"]
                t_un = float(dur[unshaped].sum()) or 1.0
                graph_share = float(dur[unshaped & ka["graph"] & ~ka["attributed"]].sum()) / t_un
                opaque_share = float(dur[unshaped & ka["opaque"]].sum()) / t_un
                no_op_share = float(dur[unshaped & ~ka["graph"] & (ka["op_row"] < 0)].sum()) / t_un
                if ctx.hw is None and eff["shaped_share"] >= float(rules["roofline"]["min_shaped_share"]):
                    why = "no hardware profile matches the trace's device to price them against; pass --hw NAME"
                elif graph_share >= 0.5:
                    why = f"{graph_share:.0%} of the rest is replayed from CUDA graphs, which have no launching op" + (
                        f" ({ks.replay_hint})" if ks.replay_hint else ""
                    )
                elif opaque_share >= 0.5:
                    why = f"{opaque_share:.0%} of the rest is in ops whose recorded inputs cannot give it: " + (
                        unknown_work_sentence(ctx.trace) or ""
                    )
                elif no_op_share >= 0.5:
                    why = (
                        ks.why
                        or f"{no_op_share:.0%} of the rest has no launching op in the trace (launched"
                        " before the CPU side was recorded, or from a thread without CPU ops)"
                    )
                else:
                    why = ks.why or "their launching ops have no model in tracekit/data/op_models.json"
                out.append(
                    finding(
                        ctx,
                        f"dominant_{group}_unshaped",
                        "dominance",
                        gain_ns=None,
                        **vals,
                        shaped=f"{eff['shaped_share']:.0%}",
                        why=why,
                        evidence=f"{ev_text}; {eff['shaped_share']:.0%} of that time with a recorded shape",
                    )
                )
                continue
            extra = {"advice": _gemm_advice(ka, sel, eff)} if group == "gemm" else {}
            out.append(
                finding(
                    ctx,
                    f"dominant_{group}",
                    "dominance",
                    gain_ns=eff["gain_ns"],
                    mfu=pct_text(eff["mfu"]),
                    mbu=pct_text(eff["mbu"]),
                    shaped=f"{eff['shaped_share']:.0%}",
                    **vals,
                    **extra,
                    evidence=ev_text + f"; {eff['shaped_share']:.0%} of that time with a recorded shape",
                )
            )
        elif group == "comm":
            comp = ka["in"] & ~in_families(ka, spec["families"])
            cs, ce, cd = _clipped(ctx, ka, sel)
            ps, pe, pd_ = _clipped(ctx, ka, comp)
            devices = pd.unique(cd)
            if len(devices) == 1 and (pd_ == devices[0]).all():  # one GPU: no per-device selections
                exposed = float(iv.total(iv.subtract(iv.normalize(cs, ce), iv.normalize(ps, pe))))
            else:
                exposed = sum(
                    float(
                        iv.total(
                            iv.subtract(
                                iv.normalize(cs[cd == d], ce[cd == d]), iv.normalize(ps[pd_ == d], pe[pd_ == d])
                            )
                        )
                    )
                    for d in devices
                ) / max(len(devices), 1)
            exp = exposed / n_steps
            # no gain of its own: the communication sources (critical_comm, exposed_allgather) price it
            out.append(
                finding(
                    ctx,
                    "dominant_comm",
                    "dominance",
                    gain_ns=None,
                    exposed=ms_text(exp),
                    exposed_share=f"{exposed / _steps_ns(ctx, n_steps):.0%}",
                    **vals,
                    evidence=ev_text + f"; {ms_text(exp)} per step with no compute kernel running",
                )
            )
    return out


def shape_rooflines(ctx: Context) -> list[dict]:
    """Kernels far below the roofline, from the shapes the trace records (no annotation): per kernel name of the
    GEMM and attention families; PyTorch's own kernels and the memory-bound families grouped per category."""
    if ctx.hw is None:
        raise MissingDataError("needs a hardware profile: the trace's device matches none; pass --hw NAME")
    ka = kernel_arrays(ctx)
    ks = ka["ks"]
    if not ka["shaped"].any():
        raise MissingDataError(
            ks.why
            or (
                "the kernels are replayed from CUDA graphs (no launching op, no shapes)"
                if ks.graph_kernels
                else "no kernel inside the steps has a recorded shape"
            )
        )
    rules = finding_rules()
    rf = rules["roofline"]
    sh = ka["shaped"]
    sh = np.flatnonzero(sh)  # the shaped kernels' positions, once for every column
    d = pd.DataFrame(
        {  # the text columns kept as Python objects: pandas' inference of its str dtype costs ~0.1 s per 40k rows
            k: pd.Series(v, dtype=object, copy=False) if v.dtype == object else v
            for k, v in {
                "name": ka["name"][sh],
                "dur": ka["dur"][sh],
                "target": ka["target"][sh],
                "gain": np.maximum(ka["dur"][sh] - ka["target"][sh], 0),
                "flops": ka["flops"][sh],
                "bytes": ka["bytes"][sh],
                "peak": ka["peak"][sh],
                "family": ka["family"][sh],
                "mfam": ks.table["family"].to_numpy(dtype=object)[sh],
                "op": ks.table["op"].iloc[sh].to_numpy(dtype=object),  # shaped rows only
                "module": ks.table["module"].iloc[sh].to_numpy(dtype=object),
                "attributed": ka["attributed"][sh],
                "dtype": ka["dtype"][sh],
                "m": ka["m"][sh],
                "n": ka["n"][sh],
                "k": ka["k"][sh],
            }.items()
        }
    )
    n_steps = ka["n_steps"]
    g = d.groupby("name", sort=False)
    calls = g.size()
    per = pd.DataFrame(
        {
            "dur": g["dur"].sum(),
            "target": g["target"].sum(),
            "gain": g["gain"].sum(),
            "calls": calls,
            "bytes": g["bytes"].mean(),
            "flops": g["flops"].mean(),
            "peak": g["peak"].first(),
            "mfam": _modes(d, "mfam", calls.index),
            "op": _modes(d, "op", calls.index),
            "module": _modes(d, "module", calls.index),
            "attributed": g["attributed"].any(),
            "dtype": g["dtype"].first(),
            "m": g["m"].first(),
            "n": g["n"].first(),
            "k": g["k"].first(),
        }
    ).reset_index()
    per["eff"] = per["target"] / per["dur"]
    per = per[(per["eff"] < float(rf["far_below"])) & (per["gain"] > 0)]
    per = per.assign(gain_per_step_ns=per["gain"] / n_steps).sort_values("gain_per_step_ns", ascending=False)
    lib = per["name"].map(lambda n: bool(rules["_library"].search(n))).to_numpy(dtype=bool) | ~per["mfam"].isin(
        list(rf["families"])
    ).to_numpy(dtype=bool)
    bw = ctx.hw.hbm_bytes_per_s
    common = {
        "hw": ctx.hw.name,
        "hbm_pct": f"{float(rf['achievable_hbm']):.0%}",
        "flops_pct": f"{float(rf['achievable_flops']):.0%}",
    }

    def tw_mbu(grp):
        return pct_text(float((grp["bytes"] * grp["calls"]).sum() / bw / (grp["dur"].sum() * 1e-9)))

    out = library_groups(ctx, per[lib], "kernel_roofline_library", "shapes", mbu=tw_mbu, **common)
    indiv = per[~lib]
    cap = int(rules["max_per_source"])
    adv = rules["gemm_advice"]
    floor_ns = launch_floor_ns(ctx.hw)
    for _, r in indiv.head(cap).iterrows():
        mean = r["dur"] / r["calls"]
        mbu = r["bytes"] / bw / (mean * 1e-9)
        mfu = r["flops"] / r["peak"] / (mean * 1e-9) if pd.notna(r["flops"]) and pd.notna(r["peak"]) else None
        bound = "compute" if mfu is not None and r["flops"] / r["bytes"] >= r["peak"] / bw else "memory"
        if pd.notna(r["m"]):
            m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
            shape = f"M×N×K {m:,}×{n:,}×{k:,}, {r['dtype']}"
            at_floor = r["target"] / r["calls"] <= floor_ns * (1 + 1e-9)  # the roofline is under one launch's time
            key = "launch_bound" if at_floor else "small_m" if m <= int(adv["small_m_rows"]) else bound
            advice = adv[key].format_map(
                _Fmt(
                    m=f"{m:,}",
                    n=f"{n:,}",
                    k=f"{k:,}",
                    mfu=pct_text(mfu),
                    mbu=pct_text(mbu),
                    floor_us=f"{floor_ns / 1e3:g}",
                )
            )
        else:
            shape = (
                f"{r['dtype']}, {int(r['flops']):,} FLOP, {int(r['bytes']):,} B per call"
                if pd.notna(r["flops"])
                else f"{r['dtype']}, {int(r['bytes']):,} B per call"
            )
            advice = (
                finding_rules()["kinds"]["dominant_attention"]["suggestion"]
                if r["mfam"] == "attention"
                else adv[bound].format_map(_Fmt(mfu=pct_text(mfu), mbu=pct_text(mbu)))
            )
        at_op = _op_words(r, mfu, mbu, bound)  # a replayed kernel attributed to its capture's op: said at op level
        out.append(
            finding(
                ctx,
                "op_roofline" if at_op else "kernel_roofline",
                "shapes",
                gain_ns=float(r["gain_per_step_ns"]),
                **(at_op or {}),
                kernel=kernel_label(str(r["name"])),
                op=str(r["op"]),
                mean_us=f"{mean / 1e3:.1f}",
                per_step=f"{r['calls'] / n_steps:g}",
                target_us=f"{r['target'] / r['calls'] / 1e3:.1f}",
                floor_us=f"{floor_ns / 1e3:g}",
                dtype=str(r["dtype"]),
                mfu=pct_text(mfu),
                mbu=pct_text(mbu),
                bound=bound,
                shape=shape,
                advice=advice,
                **common,
                evidence=f"{int(r['calls']):,} shaped calls, {ms_text(r['dur'] / n_steps)} per step, "
                f"{ms_text(r['target'] / n_steps)} at the achievable roofline; {r['name']}",
            )
        )
    return out + rest_finding(ctx, "kernel_roofline_rest", "shapes", indiv.iloc[cap:], "gain_per_step_ns")


def _op_words(r, mfu, mbu, bound) -> dict | None:
    """For a kernel name whose kernels were attributed to an op of a capture trace (docs/replay.md): the words of
    the op-level finding (``where``: the innermost module of the op's nn.Module path, where one is recorded;
    ``peak_pct``: MFU for a compute-bound op, else MBU); None for the trace's own kernels."""
    if not bool(r["attributed"]):
        return None
    module = r["module"] if isinstance(r["module"], str) and r["module"] else None
    use_mfu = bound == "compute" and mfu is not None
    return {
        "where": f" in `{module.rsplit('/', 1)[-1]}`" if module else "",
        "module": module or "–",
        "peak_pct": pct_text(mfu if use_mfu else mbu),
        "peak_of": "its dense FLOP/s peak (MFU)" if use_mfu else "HBM bandwidth (MBU)",
    }


def _modes(d: pd.DataFrame, col: str, names: pd.Index) -> pd.Series:
    """Per name (in the order of ``names``) the most common value of ``col`` (the smallest on a tie, missing values
    left out), as ``x.mode().iloc[0]`` per group gave it: counted in one groupby, not one Python call per name."""
    nc, _ = pd.factorize(d["name"])  # -1: missing (left out, as groupby leaves it)
    cc, cu = pd.factorize(d[col])
    ok = np.flatnonzero((nc >= 0) & (cc >= 0))
    k = max(len(cu), 1)
    pair, _ = pd.factorize(nc[ok].astype(np.int64) * k + cc[ok])  # each (name, value), numbered as first seen
    seen = np.maximum.accumulate(pair) if pair.size else pair
    first = ok[np.flatnonzero(np.concatenate(([True], pair[1:] > seen[:-1])))] if pair.size else ok  # its 1st row
    rank = np.empty(k, dtype=np.int64)
    rank[np.argsort(np.asarray(cu, dtype=object), kind="stable")] = np.arange(len(cu))  # the values' sort order
    # per name: the most calls, then the smallest value
    best = first[np.lexsort((rank[cc[first]], -np.bincount(pair), nc[first]))]
    best = best[np.concatenate(([True], nc[best][1:] != nc[best][:-1]))] if best.size else best
    return pd.DataFrame({"name": d["name"].array[best], col: d[col].array[best]}).set_index("name")[col].reindex(names)


def roofline_gaps(ctx: Context) -> list[dict]:
    """Time the shaped op tags spend above the achievable fraction of the hardware's HBM or FLOP/s peak."""
    if ctx.ann is None:
        raise MissingDataError("needs an annotation with op_shapes or op_traffic (-a ANN)")
    if ctx.hw is None:
        raise MissingDataError("needs a hardware profile: the trace's device matches none; pass --hw NAME")
    if not ctx.ann.op_shapes and not ctx.ann.op_traffic:
        # roofline() would fall back to the recorded shapes (per kernel, no per_tag): those are the "shapes" source's
        raise MissingDataError(
            f"annotation {ctx.ann.source or ctx.ann.name} has no op_shapes or op_traffic (the"
            " shapes the trace records are the 'shapes' source's)"
        )
    rf = roofline(ctx.trace, ctx.ann, ctx.hw, bs=ctx.bs, steps=ctx.steps)
    rules = finding_rules()["roofline"]
    f_hbm, f_fl = float(rules["achievable_hbm"]), float(rules["achievable_flops"])
    n_steps = max(1, len(ctx.steps.table))
    out = []
    for _, r in rf.tables["per_tag"].iterrows():
        target = float(r["target_ns"])  # the roofline command's own target: never below one launch's time
        per_step = r["count"] / n_steps
        gain = (float(r["mean_ns"]) - target) * per_step
        if gain <= 0:
            continue
        mbu = r.get("mbu")
        mfu = r.get("mfu")
        out.append(
            finding(
                ctx,
                "roofline_gap",
                "roofline",
                gain_ns=gain,
                tag=r["op_tag"],
                mean_us=f"{r['mean_ns'] / 1e3:.1f}",
                per_step=f"{per_step:g}",
                target_us=f"{target / 1e3:.1f}",
                floor_us=f"{launch_floor_ns(ctx.hw) / 1e3:g}",
                hbm_pct=f"{f_hbm:.0%}",
                flops_pct=f"{f_fl:.0%}",
                hw=ctx.hw.name,
                mbu="–" if mbu is None or pd.isna(mbu) else f"{float(mbu):.0%}",
                mfu="–" if mfu is None or pd.isna(mfu) else f"{float(mfu):.0%}",
                bound=str(r.get("bound") or "memory"),
                evidence=f"bs {r['bs']}: {int(r['bytes']):,} B, "
                f"{'–' if pd.isna(r['flops']) else format(int(r['flops']), ',')} FLOP per kernel",
            )
        )
    return out


__all__ = ["dominance", "roofline_gaps", "shape_rooflines", "wave_losses"]
