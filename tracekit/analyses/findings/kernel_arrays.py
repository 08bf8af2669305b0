"""What the kernel findings sources share, computed once per findings run: every kernel inside the steps as aligned
arrays (duration, step, family, category and, where its launching op has a recorded shape, FLOPs, bytes and the time
at the achievable roofline), time-weighted efficiency over a selection of them, and the findings that group kernels:
PyTorch's own library kernels per category, and the kernels beyond a source's cap as one finding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...trace import Trace
from ..categories import kernel_owner
from ..hardware.shapes import names_at
from .context import Context
from ..hardware.roofline import target_ns
from .rules import finding, is_fused, kernel_label, ms_text


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
    codes = ev["name"].cat.codes.to_numpy()[k].astype(np.int64) + 1  # 0: no name
    first = np.full(len(ev["name"].cat.categories) + 1, k.size, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(k.size))  # the first kernel of each name (no sort of every kernel)
    rows = k[first[first < k.size]]  # in the names' code order, as np.unique gave them
    got = trace.derived[key] = dict(zip(names_at(ev, rows).tolist(), _at(cats, rows).tolist()))
    return got


_WHOSE = {"PyTorch": "PyTorch's own"}  # whose kernels a title names (tracekit.analyses.categories.kernel_owner)
_LIBRARY = {"PyTorch": "PyTorch's library"}


def library_groups(ctx: Context, pk: pd.DataFrame, kind: str, source: str, **extra) -> list[dict]:
    """One finding per category for kernels of PyTorch's own library (``pk``: ``name``, ``gain_per_step_ns``)."""
    if pk.empty:
        return []
    cat = _category_of_names(ctx.trace)
    names = pk["name"].astype(str)
    g = pk.assign(category=names.map(lambda n: cat.get(n, "other")), owner=names.map(lambda n: kernel_owner(n) or ""))
    g = g.assign(variant=name_variants(ctx, g["name"].astype(str).tolist(), g["owner"].tolist()))
    out = []
    for (c, owner, variant), grp in g.groupby(["category", "owner", "variant"], sort=False):
        grp = grp.sort_values("gain_per_step_ns", ascending=False)
        names = ", ".join(
            f"{kernel_label(str(n), 50)} {ms_text(v)}"
            for n, v in zip(grp["name"].head(3), grp["gain_per_step_ns"].head(3))
        )
        more = {k: (v(grp) if callable(v) else v) for k, v in extra.items()}
        out.append(
            finding(
                ctx,
                kind,
                source,
                gain_ns=float(grp["gain_per_step_ns"].sum()),
                category=str(c),
                whose=f"{_WHOSE.get(owner, owner + chr(39) + 's')} {c}" if owner else str(c),
                library=_LIBRARY.get(owner, owner) if owner else "a library the names do not show",
                chooser=owner or "the library",
                count=len(grp),
                names=names,
                variant=variant,
                **more,
                evidence=f"{len(grp)} kernel name(s) of category {c}; per step: {names}",
            )
        )
    return out


def name_variants(ctx: Context, names: list[str], owners: list[str | None]) -> list[str]:
    """Per kernel name, which words its findings take (tracekit/data/findings.json, ``<key>_<variant>``): ``fused``
    for a kernel a compiler or library already fused (:func:`.rules.is_fused`), ``graph`` for one whose time in the
    steps is mostly replayed from CUDA graphs (not eager), else "" (the eager words)."""
    ka = kernel_arrays(ctx)
    on = ka["in"]
    t = pd.DataFrame({"name": ka["name"][on], "dur": ka["dur"][on], "graph": ka["graph"][on]})
    graph_t = t["dur"].where(t["graph"], 0.0).groupby(t["name"]).sum()
    all_t = t.groupby("name")["dur"].sum()
    graph = set((graph_t[graph_t >= 0.5 * all_t[graph_t.index]]).index.astype(str))
    return ["fused" if is_fused(n, o) else "graph" if n in graph else "" for n, o in zip(names, owners)]


def kernel_arrays(ctx: Context) -> dict[str, Any]:
    """Kernels inside the steps, aligned with :func:`tracekit.analyses.hardware.shapes.kernel_shapes`' table: duration, step,
    family, and (where the launching op has a shape) FLOPs, bytes and the time at the achievable fractions. Computed
    once per trace, steps and hardware profile (kept in ``trace.derived``: the dominance and shapes sources share it,
    and a second findings or report of the trace reuses it)."""
    got = ctx.cache.get("kernel_arrays")
    if got is None:
        got = ctx.cache["kernel_arrays"] = _kept_kernel_arrays(ctx)
    return got


def _kept_kernel_arrays(ctx: Context) -> dict[str, Any]:
    from ..categories import trace_categories
    from ..hardware.shapes import kernel_shapes

    cats, ks = trace_categories(ctx.trace), kernel_shapes(ctx.trace)
    kept = ctx.trace.derived.setdefault("findings_kernel_arrays", [])  # (steps, hw, categories, shapes, arrays)
    for steps, hw, c, k, ka in kept:
        if steps is ctx.steps and hw == ctx.hw and c is cats and k is ks:
            return ka
    ka = _make_kernel_arrays(ctx, cats, ks)
    kept[:] = kept[-3:] + [(ctx.steps, ctx.hw, cats, ks, ka)]
    return ka


def in_families(ka: dict, names) -> np.ndarray:
    """Which kernels of ``ka`` are of one of the families ``names``, through the family codes."""
    want = set(names)
    hit = np.array([f in want for f in ka["families"]] + [False], dtype=bool)
    return hit[ka["family_code"]]


def _make_kernel_arrays(ctx: Context, cats, ks) -> dict[str, Any]:
    from ..categories import families

    ev = ctx.trace.events
    t = ks.table
    rows = t["row"].to_numpy()
    start = ev["start_ns"].to_numpy()[rows]
    dur = ev["dur_ns"].to_numpy()[rows].astype(float)
    step = ctx.steps.step_of(start)
    fcat = families(cats)
    fam = _at(fcat, rows)
    fl = t["flops"].to_numpy(dtype=float)
    by = t["bytes"].to_numpy(dtype=float)
    dt = t["dtype"].to_numpy(dtype=object)
    shaped = t["carries"].to_numpy(dtype=bool) & ~np.isnan(by)
    target = np.full(rows.size, np.nan)
    peak = np.full(rows.size, np.nan)
    if ctx.hw is not None and shaped.any():
        peaks = {d: ctx.hw.peak_flops(str(d)) for d in set(dt[shaped].tolist()) if d is not None}
        peak[shaped] = [peaks.get(d) or np.nan for d in dt[shaped]]
        # never below one launch's time (launch_floor_us): a kernel at the floor has nothing left to gain
        target = np.where(shaped, target_ns(by, fl, peak, ctx.hw), np.nan)
    names = names_at(ev, rows)
    inv, uniq = pd.factorize(names)  # once per distinct name; -1 (no name) reads the appended False
    fused = np.array([is_fused(str(n), kernel_owner(str(n))) for n in uniq.tolist()] + [False], dtype=bool)[inv]
    return {
        "ks": ks,
        "rows": rows,
        "dur": dur,
        "step": step,
        "in": step >= 0,
        "family": fam,
        "family_code": np.asarray(fcat.codes)[rows],
        "families": list(fcat.categories),
        "category": _at(cats, rows),
        "flops": fl,
        "bytes": by,
        "dtype": dt,
        "shaped": shaped & (step >= 0),
        "target": target,
        "peak": peak,
        "name": names,
        "fused": fused,
        "m": t["m"].to_numpy(dtype=float),
        "n": t["n"].to_numpy(dtype=float),
        "k": t["k"].to_numpy(dtype=float),
        "graph": t["graph"].to_numpy(dtype=bool),
        "op_row": t["op_row"].to_numpy(),
        "attributed": t["attributed_by"].isin(["capture", "node_id", "eager_map"]).to_numpy(dtype=bool),
        "opaque": (t["model"] == "opaque").to_numpy(dtype=bool),
        "n_steps": max(1, len(ctx.steps.table)),
    }


def pct_text(x: float | None) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:.0%}" if x >= 0.01 else f"{x:.1%}"


def efficiency(ctx: Context, ka: dict, sel: np.ndarray) -> dict[str, Any]:
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


def rest_finding(ctx: Context, kind: str, source: str, rest: pd.DataFrame, gain: str) -> list[dict]:
    """The kernel names beyond a source's cap (``rest``, its gain per step in column ``gain``) as one finding, or
    none when there are none."""
    if not len(rest):
        return []
    return [
        finding(
            ctx,
            kind,
            source,
            gain_ns=float(rest[gain].sum()),
            count=len(rest),
            evidence=f"{len(rest)} kernel name(s), largest {ms_text(rest[gain].max())} per step",
        )
    ]


__all__ = [
    "efficiency",
    "in_families",
    "kernel_arrays",
    "library_groups",
    "name_variants",
    "pct_text",
    "rest_finding",
]
