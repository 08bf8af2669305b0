"""A10 — wave quantization: CTAs, waves, wave efficiency and the time lost to the tail wave (docs/roofline.md).

A kernel launches C = grid_x·grid_y·grid_z CTAs onto S SMs that hold r CTAs each at once, so it runs in
W = ceil(C / (S·r)) waves. r comes from the kernel's launch configuration (threads per block, registers per
thread, shared memory per block) against the SM's limits, as CUDA's occupancy calculator counts it
(:func:`tracekit.gpu_specs.ctas_per_sm`; the limits from the trace's deviceProperties and
``tracekit/data/hardware/_occupancy.json``); an annotation's ``ctas_per_sm`` rule or the ``ctas_per_sm`` option
overrides it. Where the launch lacks registers or shared memory (ROCm Kineto traces) r is a range
(:func:`tracekit.gpu_specs.ctas_per_sm_range`: the worst case the SM's limits allow .. the count from the known
limits), and every wave number below is given over it (``*_lo``/``*_hi``, each count tried: :func:`efficiency_range`),
its single value unknown (null). Every wave
takes about as long as the others, but the last one holds only C − (W−1)·S·r CTAs. Wave efficiency is
E = C / (W·S·r); the time lost to the tail wave is t·(1 − E): what the same work would save if it were
spread over full waves (the study's "scale the measured time by the CTA count"). A single under-filled
wave (C < S·r) loses time the same way: it is its own tail.

The calculator (:func:`waves_calc`) also models a split-KV attention grid (2, B·q_len, split): the
``mla-simplified`` rule is split = min(S // B // (2·q_len), 32), at least 1; the ``wave-aware`` rule
picks the split in 1..32 that minimises the modelled time waves(split) / split, where each CTA scans
1/split of the KV and a wave's time scales with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from ...annotation import Annotation, as_annotation
from ...data import MAX_SPLIT, SPLIT_RULES  # noqa: F401 - re-exported
from ...errors import DataFileError, InputError, MissingDataError
from ...events import comm_names, launch_index
from ...gpu_specs import (
    devices_phrase,
    HardwareProfile,
    SmLimits,
    as_profile,
    ctas_per_sm as occupancy_ctas_per_sm,
    ctas_per_sm_range,
    detect_profile,
    occupancy_table,
    sm_limits,
)
from ...result import Result, trace_input
from ...trace import Trace
from ..steps.keywords import options_as_objects
from ..steps.resolve import find_steps
from ...result import merge_warnings
from .wave_tables import per_grid as _per_grid, per_kernel as _per_kernel
from ...regexes import bounded


@dataclass(frozen=True)
class WaveStats:
    ctas: int
    capacity: int  # CTAs one wave holds: SMs x CTAs per SM
    waves: int
    waves_exact: float  # ctas / capacity
    efficiency: float  # ctas / (waves x capacity)
    tail_ctas: int  # CTAs in the last wave


def wave_stats(ctas: int, sms: int, ctas_per_sm: int = 1) -> WaveStats:
    if ctas < 1 or sms < 1 or ctas_per_sm < 1:
        raise InputError(f"CTAs, SMs and CTAs per SM must be positive (got {ctas}, {sms}, {ctas_per_sm})")
    cap = sms * ctas_per_sm
    waves = -(-ctas // cap)
    return WaveStats(ctas, cap, waves, ctas / cap, ctas / (waves * cap), ctas - (waves - 1) * cap)


def mla_simplified_split(batch: int, q_len: int, sms: int, cap: int = MAX_SPLIT) -> int:
    """split = min(SMs // B // (2·q_len), cap), at least 1 (the study's simplified heuristic)."""
    return max(1, min(sms // max(batch, 1) // (q_len * 2), cap))


def mla_grid(batch: int, q_len: int, split: int) -> tuple[int, int, int]:
    return (2, batch * q_len, split)


def wave_aware_split(batch: int, q_len: int, sms: int, ctas_per_sm: int = 1, cap: int = MAX_SPLIT) -> int:
    """The split in 1..cap with the least modelled time waves(split) / split (the smallest on a tie)."""
    best, best_cost = 1, math.inf
    for s in range(1, cap + 1):
        w = wave_stats(2 * batch * q_len * s, sms, ctas_per_sm).waves
        if w / s < best_cost - 1e-12:
            best, best_cost = s, w / s
    return best


def split_table(
    batch: int,
    q_len: int,
    sms: int,
    ctas_per_sm: int,
    launched_split: int,
    time_ns: Optional[int],
    cap: int = MAX_SPLIT,
) -> pd.DataFrame:
    """Every split 1..cap of the (2, B·q_len, split) grid; with a measured time of the launched split, the
    modelled time of each: waves(s) x (t / waves(s0)) x s0 / s."""
    w0 = wave_stats(2 * batch * q_len * launched_split, sms, ctas_per_sm).waves
    rows = []
    for s in range(1, cap + 1):
        st = wave_stats(2 * batch * q_len * s, sms, ctas_per_sm)
        est = None if time_ns is None else int(round(st.waves * time_ns / w0 * launched_split / s))
        rows.append(
            {
                "split": s,
                "grid": list(mla_grid(batch, q_len, s)),
                "ctas": st.ctas,
                "waves": st.waves,
                "wave_efficiency": st.efficiency,
                "est_time_ns": est,
            }
        )
    return pd.DataFrame(rows, columns=["split", "grid", "ctas", "waves", "wave_efficiency", "est_time_ns"])


@options_as_objects
def waves_calc(
    *,
    sms: int,
    grid: tuple[int, int, int] | None = None,
    batch: int | None = None,
    q_len: int | None = None,
    split: str = "mla-simplified",
    ctas_per_sm: int = 1,
    time_ns: int | None = None,
    layers: int | None = None,
    max_split: int = MAX_SPLIT,
) -> Result:
    """`tracekit waves calc` (A10): waves of one grid, and what full waves would save.

    The grid is ``grid``, or (2, B·q_len, split) from ``batch`` and ``q_len`` with the ``split`` rule. With
    the kernel's measured ``time_ns`` for that grid: ``est_time`` = t·E (the time with no tail loss),
    ``lost`` = t − est, and with ``layers``, the saving per step = lost x layers. With ``batch`` and
    ``q_len``, the ``splits`` table models every split and the summary names the wave-aware one."""
    if split not in SPLIT_RULES:
        raise InputError(f"--split must be one of {', '.join(SPLIT_RULES)}, not {split!r}")
    if (batch is None) != (q_len is None):
        raise InputError("--batch and --qlen go together (the grid is (2, batch x qlen, split))")
    if grid is None and batch is None:
        raise InputError("give the grid (--grid X,Y,Z) or --batch and --qlen to derive it")
    for label, v in (("--batch", batch), ("--qlen", q_len), ("--layers", layers), ("--time-us", time_ns)):
        if v is not None and v <= 0:
            raise InputError(f"{label} must be positive, not {v}")
    warnings: list[str] = []
    launched_split = None
    if batch is not None:
        launched_split = (
            mla_simplified_split(batch, q_len, sms, max_split)
            if split == "mla-simplified"
            else wave_aware_split(batch, q_len, sms, ctas_per_sm, max_split)
        )
        derived = mla_grid(batch, q_len, launched_split)
        if grid is not None and tuple(grid) != derived:
            warnings.append(
                f"--grid {grid} differs from the {split} grid {derived} of batch {batch} and qlen"
                f" {q_len}; the summary describes --grid"
            )
            launched_split = grid[2] if grid[0] * grid[1] == 2 * batch * q_len else None
        grid = grid if grid is not None else derived
    if len(grid) != 3 or min(grid) < 1:
        raise InputError(f"--grid takes three positive integers X,Y,Z, not {grid}")
    st = wave_stats(int(np.prod(grid)), sms, ctas_per_sm)
    est = None if time_ns is None else int(round(time_ns * st.efficiency))
    lost = None if time_ns is None else time_ns - est
    summary: dict[str, Any] = {
        "grid": list(grid),
        "ctas": st.ctas,
        "sms": sms,
        "ctas_per_sm": ctas_per_sm,
        "capacity": st.capacity,
        "waves": st.waves,
        "waves_exact": st.waves_exact,
        "wave_efficiency": st.efficiency,
        "tail_ctas": st.tail_ctas,
        "split_rule": split if batch is not None else None,
        "split": launched_split,
        "time_ns": time_ns,
        "est_time_ns": est,
        "est_time_us": None if est is None else est / 1e3,
        "lost_ns": lost,
    }
    if layers is not None:
        summary["layers"] = layers
        summary["saving_per_step_ns"] = None if lost is None else lost * layers
        summary["saving_ms_per_step"] = None if lost is None else lost * layers / 1e6
    tables = {
        "grid": pd.DataFrame(
            [
                {
                    k: summary[k]
                    for k in (
                        "grid",
                        "ctas",
                        "capacity",
                        "waves",
                        "waves_exact",
                        "wave_efficiency",
                        "tail_ctas",
                        "time_ns",
                        "est_time_ns",
                        "lost_ns",
                    )
                }
            ]
        )
    }
    if batch is not None and launched_split is not None:
        tab = split_table(batch, q_len, sms, ctas_per_sm, launched_split, time_ns, max_split)
        best = wave_aware_split(batch, q_len, sms, ctas_per_sm, max_split)
        row = tab[tab["split"] == best].iloc[0]
        summary["wave_aware_split"] = best
        summary["wave_aware_ctas"] = int(row["ctas"])
        summary["wave_aware_waves"] = int(row["waves"])
        summary["wave_aware_time_ns"] = None if time_ns is None else int(row["est_time_ns"])
        tables["splits"] = tab
    return Result(
        command="waves_calc",
        inputs=[],
        params={
            "sms": sms,
            "grid": list(grid),
            "batch": batch,
            "q_len": q_len,
            "split": split,
            "ctas_per_sm": ctas_per_sm,
            "time_ns": time_ns,
            "layers": layers,
            "max_split": max_split,
        },
        summary=summary,
        tables=tables,
        warnings=warnings,
    )


def resolve_sms(trace: Trace, sms: int | None, hw: HardwareProfile | None, warnings: list[str]) -> tuple[int, str]:
    """SMs from the option, else the trace's devices (deviceProperties, TARGET_INFO_GPU, agents), else the hardware
    profile."""
    traced = trace.meta.get("num_sms")
    if hw is not None and isinstance(traced, int) and traced != hw.sms:
        warnings.append(
            f"the trace's device has {traced} SMs but hardware profile {hw.name} says {hw.sms};"
            " the trace's count is used unless --sms is given"
        )
    if sms is not None:
        if sms < 1:
            raise InputError(f"--sms must be positive, not {sms}")
        return sms, "option"
    if isinstance(traced, int) and traced > 0:
        return traced, f"trace {devices_phrase(trace.meta)}"
    if hw is not None:
        return hw.sms, f"hardware profile {hw.name}"
    raise MissingDataError(
        f"{trace.path} has no SM count (none in its {devices_phrase(trace.meta)}); pass --sms N or --hw NAME"
    )


def _ctas_per_sm_of_names(names: pd.Index, rules: list, default: int, src: str) -> np.ndarray:
    out = np.full(len(names), default, dtype=np.int64)
    done = np.zeros(len(names), dtype=bool)
    for i, r in enumerate(rules):
        rx = bounded(r.pattern, f"{src}: $.ctas_per_sm[{i}].pattern", DataFileError)  # time-bounded
        if r.ctas_per_sm < 1:
            raise DataFileError(f"{src}: $.ctas_per_sm[{i}].ctas_per_sm must be 1 or more")
        hit = np.fromiter((bool(rx.search(str(n))) for n in names), dtype=bool, count=len(names)) & ~done
        out[hit] = r.ctas_per_sm
        done |= hit
    return out


class _Labels:
    """Labels coded as small integers in order of first use, for Categoricals built from codes."""

    def __init__(self) -> None:
        self.labels: list[str] = []

    def code(self, label: str) -> int:
        if label not in self.labels:
            self.labels.append(label)
        return self.labels.index(label)

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=self.labels) if self.labels else pd.Categorical([])


def launch_ctas_per_sm(
    trace: Trace,
    k: pd.DataFrame,
    hw: HardwareProfile | None = None,
    *,
    names: tuple[np.ndarray, np.ndarray] | None = None,
    ann: Annotation | None = None,
    ctas_per_sm: int | None = None,
) -> tuple[np.ndarray, pd.Categorical, pd.Categorical, dict, list[str], np.ndarray]:
    """CTAs per SM of each kernel row of ``k`` (``names``: its distinct names and each row's index into them, when
    the caller has them), and what set it: an annotation's ``ctas_per_sm`` rule (``annotation``), else the
    ``ctas_per_sm`` option (``option``), else the launch configuration against the SM's limits (``launch
    configuration``; ``(partial)`` when registers or shared memory are unknown), else 1 (``assumed``: no block
    size, or the SM's limits unknown). Counted once per distinct (threads, registers, shared memory), not per launch.

    Returns ``(ctas_per_sm, limited_by, ctas_per_sm_from, occupancy, warnings, ctas_per_sm_lo)`` — the two labels
    as Categoricals; ``occupancy`` is the summary's ``occupancy`` object: the SM limits used and where each came from,
    whether the count is ``assumed`` (and why), the launches per source; ``ctas_per_sm_lo`` the least count the SM's
    limits allow where registers or shared memory are unknown (:func:`tracekit.gpu_specs.ctas_per_sm_range`; else
    ``ctas_per_sm``, which is then the upper bound)."""
    n = len(k)
    labels = _Labels()
    cps = np.zeros(n, dtype=np.int64)
    limited = np.full(n, -1, dtype=np.int64)
    src = np.full(n, -1, dtype=np.int64)
    if ann is not None and ann.ctas_per_sm:
        by_ann = _ctas_per_sm_by_annotation(k, names, ann)
        hit = by_ann > 0
        cps[hit], limited[hit], src[hit] = by_ann[hit], labels.code("annotation"), labels.code("annotation")
    if ctas_per_sm is not None:
        if ctas_per_sm < 1:
            raise InputError(f"--ctas-per-sm must be positive, not {ctas_per_sm}")
        rest = cps == 0
        cps[rest], limited[rest], src[rest] = ctas_per_sm, labels.code("option"), labels.code("option")
    lim: SmLimits | None = None
    notes: list[str] = []
    rest = cps == 0
    cps_lo = np.zeros(n, dtype=np.int64)  # set for the rest rows by the launch configuration
    if rest.any():
        try:
            lim = sm_limits(trace.meta, hw if hw is not None else detect_profile(trace.meta))
        except (MissingDataError, DataFileError) as exc:
            notes.append(f"{exc}: 1 CTA per SM assumed")
        if lim is not None:
            notes += _ctas_per_sm_by_launch(k, rest, lim, labels, cps, limited, src, cps_lo)
        else:
            cps[rest], limited[rest], src[rest] = 1, labels.code("unknown (no SM limits)"), labels.code("assumed")
    src_cat = labels.categorical(src)
    counts = pd.Series(src_cat).value_counts()
    occupancy = {
        "sm_limits": lim.summary() if lim is not None else None,
        "assumed": bool(notes) or bool(counts.get("assumed", 0)),
        "assumed_why": notes,
        "launches_by_source": {str(a): int(b) for a, b in sorted(counts.items()) if b},
    }
    cps_lo = np.where(cps_lo > 0, np.minimum(cps_lo, cps), cps)
    occupancy["launches_with_ctas_per_sm_range"] = int((cps_lo < cps).sum())
    return cps, labels.categorical(limited), src_cat, occupancy, [f"CTAs per SM: {x}" for x in notes], cps_lo


def _ctas_per_sm_by_annotation(
    k: pd.DataFrame, names: tuple[np.ndarray, np.ndarray] | None, ann: Annotation
) -> np.ndarray:
    """Per kernel row, the CTAs per SM of the annotation's first ``ctas_per_sm`` rule its name matches (0: none),
    matched once per distinct name (the categorical's codes), not per event."""
    if names is None:
        codes = k["name"].cat.codes.to_numpy() if hasattr(k["name"], "cat") else None
        if codes is None:
            uniq, inv = np.unique(k["name"].astype(str).to_numpy().astype(object), return_inverse=True)
        else:
            used, inv = np.unique(codes, return_inverse=True)
            uniq = np.asarray([str(c) for c in k["name"].cat.categories[used]], dtype=object)
    else:
        uniq, inv = names
    return _ctas_per_sm_of_names(pd.Index(uniq), ann.ctas_per_sm, 0, ann.source or ann.name)[inv]


def _ctas_per_sm_by_launch(
    k: pd.DataFrame,
    rest: np.ndarray,
    lim: SmLimits,
    labels: _Labels,
    cps: np.ndarray,
    limited: np.ndarray,
    src: np.ndarray,
    cps_lo: np.ndarray,
) -> list[str]:
    """The ``rest`` rows of ``k`` from their launch configuration against the SM's limits (``cps``, ``limited``,
    ``src`` and the lower bound ``cps_lo`` set in place), counted once per distinct (threads, registers, shared
    memory); returns the notes on launches whose count is partial or assumed."""
    bx, by, bz, reg, smem = (
        k[c].to_numpy()[rest].astype(np.int64)  # the columns' rest rows, not a copy of the table
        for c in ("block_x", "block_y", "block_z", "registers", "shared_mem")
    )
    threads = np.where((bx > 0) & (by > 0) & (bz > 0), bx * by * bz, -1)
    cols = (threads, reg, smem)
    # distinct configurations by hashing (np.unique over rows sorted 10^6 launches in seconds)
    key = np.zeros(len(threads), dtype=np.int64)
    for c in cols:
        codes, uniq_c = pd.factorize(c)
        key = key * len(uniq_c) + codes
    cinv, ukey = pd.factorize(key)
    first = np.zeros(len(ukey), dtype=np.int64)
    first[cinv[::-1]] = np.arange(len(cinv))[::-1]  # a launch of each configuration
    got, why, status = occupancy_ctas_per_sm(*(c[first] for c in cols), lim)
    why = np.where(status == "exceeds", "exceeds the SM's limits", why)
    from_u = np.where(
        status == "ok",
        "launch configuration",
        np.where(status == "partial", "launch configuration (partial)", "assumed"),
    )
    cps[rest] = got[cinv]
    lo, _ = ctas_per_sm_range(*(c[first] for c in cols), lim)
    cps_lo[rest] = np.where(status == "partial", np.minimum(lo, got), got)[cinv]
    limited[rest] = np.asarray([labels.code(str(w)) for w in why], dtype=np.int64)[cinv]
    src[rest] = np.asarray([labels.code(str(w)) for w in from_u], dtype=np.int64)[cinv]
    per_cfg = np.bincount(cinv, minlength=len(ukey))
    n_block, n_exc, n_part = (int(per_cfg[status == x].sum()) for x in ("no_block", "exceeds", "partial"))
    notes = []
    if n_part and lim.vendor != "AMD":  # ROCm never writes them; lim.assumed says so below
        notes.append(
            f"{n_part} launch(es) carry no registers per thread or no shared memory: their count"
            " comes from the limits that are known, an upper bound (waves a lower bound)"
        )
    if n_block:
        notes.append(f"{n_block} launch(es) carry no block size: 1 CTA per SM assumed for them")
    if n_exc:
        notes.append(
            f"{n_exc} launch(es) need more registers or shared memory per block than the SM's limits"
            f" allow ({lim.vendor} {lim.compute_capability}), although they ran: 1 CTA per SM used;"
            " the limits of tracekit/data/hardware/_occupancy.json or the trace disagree with them"
        )
    return notes + lim.assumed


def rocm_grid_in_ctas(
    trace: Trace, k: pd.DataFrame, gx: np.ndarray, gy: np.ndarray, gz: np.ndarray, occupancy: dict
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict, list[str]]:
    """On ROCm the 'grid' of a kernel launched by hipExtModuleLaunchKernel (hipBLASLt and Tensile GEMMs) is
    its global size in work-items, not workgroups (``_occupancy.json``: AMD ``grid_in_work_items``): those become
    ceil(grid / block) per dimension. Under a graph launch the unit is unknown: counted as written, and said.
    Returns the grids in CTAs, the launches per unit, and the warnings."""
    lim = occupancy.get("sm_limits") or {}
    if lim.get("vendor") != "AMD" or trace.meta.get("grid_unit") == "workgroups":  # the reader converted them
        return (gx, gy, gz), {"workgroups": int(len(gx))}, []
    spec = occupancy_table()["AMD"]
    ev = trace.events
    rt = ev[(ev["kind"] == "runtime") & (ev["correlation"].to_numpy() >= 0)]
    li = launch_index(
        k["start_ns"].to_numpy(), k["correlation"].to_numpy(), rt["correlation"].to_numpy(), rt["start_ns"].to_numpy()
    )
    names = rt["name"].astype(str).to_numpy()
    call = np.where(li >= 0, names[np.clip(li, 0, None)] if len(names) else "", "")
    items = np.isin(call, spec.get("grid_in_work_items", []))
    unknown = np.isin(call, spec.get("grid_unit_unknown", [])) | (li < 0)
    bx, by, bz = (np.maximum(k[c].to_numpy().astype(np.int64), 1) for c in ("block_x", "block_y", "block_z"))
    out = tuple(np.where(items, -(-g // b), g) for g, b in ((gx, bx), (gy, by), (gz, bz)))
    units = {
        "workgroups": int((~items & ~unknown).sum()),
        "work_items (divided by the block)": int(items.sum()),
        "unknown (counted as written)": int(unknown.sum()),
    }
    warnings = []
    if items.any():
        warnings.append(
            f"{int(items.sum())} ROCm kernel launch(es) by {', '.join(spec['grid_in_work_items'])} record"
            " their grid in work-items: their CTAs are grid ÷ block"
        )
    if unknown.any():
        occupancy["assumed"] = True
        occupancy["assumed_why"].append(
            f"{int(unknown.sum())} ROCm kernel launch(es) under a graph launch or with no"
            " launch record: the unit of their grid (workgroups or work-items) is unknown,"
            " counted as workgroups"
        )
        warnings.append(f"CTAs: {occupancy['assumed_why'][-1]}")
    return out, units, warnings


PER_KERNEL_COLUMNS = [
    "name",
    "count",
    "ctas",
    "waves",
    "wave_efficiency",
    "lost_ns",
    "total_ns",
    "lost_pct",
    "capacity",
    "ctas_min",
    "ctas_max",
    "grids",
    "lost_per_step_ns",
    "ctas_per_sm",
    "limited_by",
    "ctas_per_sm_from",
]
PER_GRID_COLUMNS = [
    "name",
    "grid_x",
    "grid_y",
    "grid_z",
    "count",
    "ctas",
    "capacity",
    "waves",
    "wave_efficiency",
    "total_ns",
    "lost_ns",
    "ctas_per_sm",
    "limited_by",
    "ctas_per_sm_from",
]


PER_GRID_RANGE = [
    "ctas_per_sm_lo",
    "ctas_per_sm_hi",
    "waves_lo",
    "waves_hi",
    "lost_lo_ns",
    "lost_hi_ns",
    "wave_efficiency_lo",
    "wave_efficiency_hi",
    "capacity_lo",
    "capacity_hi",
]
PER_KERNEL_RANGE = PER_GRID_RANGE + ["lost_pct_lo", "lost_pct_hi", "lost_per_step_lo_ns", "lost_per_step_hi_ns"]
# the columns of one count of CTAs per SM: unknown (null) on a row whose count is a range
POINT_COLUMNS = ("ctas_per_sm", "capacity", "waves", "wave_efficiency", "lost_ns", "lost_pct", "lost_per_step_ns")


def _columns(point: list[str], ranges: list[str], ranged: bool) -> list[str]:
    """The table's columns: the range columns after the point ones; first after the name and count when a count
    of CTAs per SM is a range (so that a narrow terminal shows them on the first page)."""
    if not ranged:
        return point + ranges
    head = [c for c in point if c in ("name", "grid_x", "grid_y", "grid_z", "count", "ctas")]
    return head + ranges + [c for c in point if c not in head]


def unknown_where_range(table: pd.DataFrame, ranged: bool) -> pd.DataFrame:
    """``table`` with its one-count columns (:data:`POINT_COLUMNS`) null on the rows whose CTAs per SM are a range:
    a single number there would be one guess of the range (integers stay integers, as nullable Int64)."""
    if not ranged:
        return table
    table = table.copy()
    rng = (table["ctas_per_sm_lo"] < table["ctas_per_sm_hi"]).to_numpy()
    for c in POINT_COLUMNS:
        if c not in table.columns:
            continue
        col = table[c]
        if np.issubdtype(col.dtype, np.integer):
            col = col.astype("Int64")
        table[c] = col.mask(rng)
    return table


def efficiency_range(
    ctas: np.ndarray, sms: int, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per launch, the least and the most wave efficiency over every CTAs-per-SM count in ``lo``..``hi`` (the
    efficiency is not monotone in the count, so each count is tried), and the waves at ``lo`` (the most). One
    vector step per count (at most the SM's thread cap ÷ warp size, 32 or 64), over the distinct (CTAs, lo, hi)."""
    cap = sms * hi
    eff = ctas / (-(-ctas // cap) * cap)
    e_lo, e_hi = eff.copy(), eff.copy()
    waves_hi = -(-ctas // (sms * lo))
    todo = np.flatnonzero(lo < hi)
    if not todo.size:
        return e_lo, e_hi, waves_hi
    key = np.stack([ctas[todo], lo[todo], hi[todo]], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    c, ulo, uhi = uniq[:, 0], uniq[:, 1], uniq[:, 2]
    mn, mx = np.full(len(uniq), np.inf), np.full(len(uniq), -np.inf)
    for n in range(int(ulo.min()), int(uhi.max()) + 1):
        on = (ulo <= n) & (n <= uhi)
        cap_n = sms * n
        e = c / (-(-c // cap_n) * cap_n)
        mn = np.where(on, np.minimum(mn, e), mn)
        mx = np.where(on, np.maximum(mx, e), mx)
    e_lo[todo], e_hi[todo] = mn[inv], mx[inv]
    return e_lo, e_hi, waves_hi


@options_as_objects
def kernel_waves(
    trace: Trace,
    ann: Annotation | str | None = None,
    *,
    sms: int | None = None,
    hw: HardwareProfile | str | None = None,
    ctas_per_sm: int | None = None,
    min_waves: int = 1,
    top: int | None = None,
    steps=None,
) -> Result:
    """`tracekit waves TRACE` (A10): every kernel with a grid, ranked by the time it loses to its tail wave.

    Per kernel event: CTAs, waves, efficiency E and lost = round(dur x (1 − E)). ``per_kernel`` sums by
    kernel name (``ctas``/``waves`` are the most common launch; ``wave_efficiency`` = 1 − lost/total, time
    weighted), sorted by ``lost_ns``; ``per_grid`` splits a name by launch grid. CTAs per SM come from the
    annotation's ``ctas_per_sm`` rules, else ``ctas_per_sm`` (default 1). Kernels with fewer than
    ``min_waves`` waves are left out (counted). Kernels without a grid are counted, never silently dropped.
    ``ann``: a name, a path or an Annotation; ``hw``: a profile, its name or a JSON file; ``steps``: StepOptions,
    Steps or a table (default: the annotation's step options)."""
    ann, hw = as_annotation(ann), as_profile(hw)
    warnings = list(trace.report.warnings)
    n_sms, sms_from = resolve_sms(trace, sms, hw, warnings)
    k, (gx, gy, gz), no_grid = _kernels_with_grid(trace, warnings)
    uniq, inv = _distinct_names(k)
    cps, limited, cps_from, occupancy, occ_warnings, cps_lo = launch_ctas_per_sm(
        trace, k, hw, names=(uniq, inv), ann=ann, ctas_per_sm=ctas_per_sm
    )
    warnings += occ_warnings
    (gx, gy, gz), units, unit_warnings = rocm_grid_in_ctas(trace, k, gx, gy, gz, occupancy)
    warnings += unit_warnings
    occupancy["grid_units"] = units
    ctas = gx * gy * gz
    cap = n_sms * cps
    waves = -(-ctas // cap)
    eff = ctas / (waves * cap)
    dur = k["dur_ns"].to_numpy()
    lost = (dur - np.rint(dur * eff)).astype(np.int64)
    eff_lo, eff_hi, waves_hi = efficiency_range(ctas, n_sms, cps_lo, cps)
    lost_lo = (dur - np.rint(dur * eff_hi)).astype(np.int64)
    lost_hi = (dur - np.rint(dur * eff_lo)).astype(np.int64)
    st = find_steps(trace, steps, ann=ann)
    warnings = merge_warnings(warnings, st.warnings)
    step, n_steps = st.step_of(k["start_ns"].to_numpy()), int(len(st.table))
    keep = waves >= min_waves
    excluded = int((~keep).sum())
    if not keep.any():
        reach = int((waves_hi >= min_waves).sum())  # at the least CTAs per SM of a range (no registers or LDS)
        raise MissingDataError(
            f"{trace.path}: no kernel runs in {min_waves} or more waves"
            + (
                f" at every CTAs-per-SM count its launch allows: {reach:,} launch(es) reach {min_waves} only at the"
                " least count (the trace records no registers or LDS per kernel), so no tail-wave loss holds over"
                " the whole range"
                if reach
                else ""
            )
        )
    # communication kernels (a comm class, tracekit/data/classes.json) are left out of the totals and the ranking,
    # listed apart: a collective's grid is its channel count, one CTA per channel resident for the whole
    # collective (persistent by design), so its "tail" is no loss (docs/roofline.md; findings read per_kernel)
    left = comm_names(trace.events)
    comm_name = np.fromiter((str(n) in left for n in uniq), dtype=bool, count=len(uniq))
    comm = comm_name[inv] if len(inv) else np.zeros(0, dtype=bool)
    counted = keep & ~comm
    if not counted.any():
        raise MissingDataError(
            f"{trace.path}: every kernel of {min_waves} or more waves is a communication kernel"
            f" ({int((keep & comm).sum()):,} launches), and those are no tail-wave loss: a collective's grid is its"
            " channel count, persistent by design"
        )
    cols = dict(
        name=inv,
        grid_x=gx,
        grid_y=gy,
        grid_z=gz,
        ctas=ctas,
        capacity=cap,
        waves=waves,
        eff=eff,
        dur_ns=dur,
        lost_ns=lost,
        ctas_per_sm=cps,
        limited_by=limited,
        ctas_per_sm_from=cps_from,
        lost_in_step=np.where(step >= 0, lost, 0),
        ctas_per_sm_lo=cps_lo,
        capacity_lo=n_sms * cps_lo,
        waves_hi=waves_hi,
        eff_lo=eff_lo,
        eff_hi=eff_hi,
        lost_lo=lost_lo,
        lost_hi=lost_hi,
        lost_in_step_lo=np.where(step >= 0, lost_lo, 0),
        lost_in_step_hi=np.where(step >= 0, lost_hi, 0),
    )
    ranged = bool((cps_lo[counted] < cps[counted]).any())
    df, per_grid, per_kernel = _tables(cols, counted, uniq, n_steps, ranged)
    comm_rows = keep & comm
    comm_kernel = (
        _tables(cols, comm_rows, uniq, n_steps, bool((cps_lo[comm_rows] < cps[comm_rows]).any()))[2]
        if comm_rows.any()
        else pd.DataFrame(columns=PER_KERNEL_COLUMNS + PER_KERNEL_RANGE)
    )
    shown = per_kernel if top is None else per_kernel.head(top)
    lost_steps = int(df["lost_in_step"].sum())
    lost_steps_lo, lost_steps_hi = int(df["lost_in_step_lo"].sum()), int(df["lost_in_step_hi"].sum())
    summary = {
        "sms": n_sms,
        "sms_from": sms_from,
        "kernels": int(len(df)),
        "names": int(len(per_kernel)),
        "names_shown": int(len(shown)),
        "kernels_without_grid": no_grid,
        "kernels_below_min_waves": excluded,
        "communication_kernels": int(comm_rows.sum()),
        "communication_names": int(len(comm_kernel)),
        "communication_ns": int(dur[comm_rows].sum()),
        "total_ns": int(df["dur_ns"].sum()),
        "lost_ns": None if ranged else int(df["lost_ns"].sum()),
        "lost_lo_ns": int(df["lost_lo"].sum()),
        "lost_hi_ns": int(df["lost_hi"].sum()),
        "steps": n_steps,
        "lost_per_step_ns": lost_steps / n_steps if n_steps and not ranged else None,
        "lost_per_step_lo_ns": lost_steps_lo / n_steps if n_steps else None,
        "lost_per_step_hi_ns": lost_steps_hi / n_steps if n_steps else None,
        "ctas_per_sm_exact": not ranged,
        "top_name": str(per_kernel["name"].iloc[0]),
        "top_lost_ns": None if ranged else int(per_kernel["lost_ns"].iloc[0]),
        "top_lost_lo_ns": int(per_kernel["lost_lo_ns"].iloc[0]),
        "top_lost_hi_ns": int(per_kernel["lost_hi_ns"].iloc[0]),
        "occupancy": occupancy,
    }
    return Result(
        command="waves",
        inputs=[trace_input(trace)],
        params={
            "sms": sms,
            "hw": hw.name if hw else None,
            "annotation": ann.ref if ann else None,
            "ctas_per_sm": ctas_per_sm,
            "min_waves": min_waves,
            "top": top,
            **st.options.as_params(),
        },
        summary=summary,
        tables={
            "per_kernel": shown[_columns(PER_KERNEL_COLUMNS, PER_KERNEL_RANGE, ranged)].reset_index(drop=True),
            "per_grid": per_grid[_columns(PER_GRID_COLUMNS, PER_GRID_RANGE, ranged)].reset_index(drop=True),
            "communication": comm_kernel[_columns(PER_KERNEL_COLUMNS, PER_KERNEL_RANGE, ranged)].reset_index(drop=True),
        },
        warnings=warnings,
    )


def _tables(
    cols: dict, rows: np.ndarray, uniq: np.ndarray, n_steps: int, ranged: bool
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The launches ``rows`` (a mask) of the per-launch columns ``cols``, and their ``per_grid`` and ``per_kernel``
    tables, names as text and one-count columns null where the count is a range."""
    # the name as its index into the sorted distinct names (same order, same groups): no string column per kernel
    df = pd.DataFrame({c: v[rows] for c, v in cols.items()}, copy=False)
    per_grid = _per_grid(df)
    per_kernel = _per_kernel(df, per_grid, n_steps)
    per_grid["name"], per_kernel["name"] = uniq[per_grid["name"].to_numpy()], uniq[per_kernel["name"].to_numpy()]
    return df, unknown_where_range(per_grid, ranged), unknown_where_range(per_kernel, ranged)


def _kernels_with_grid(trace: Trace, warnings: list[str]) -> tuple[pd.DataFrame, tuple, int]:
    """The kernel events that carry a launch grid, their grids, and how many carry none (said in ``warnings``)."""
    ev = trace.events
    rows = np.flatnonzero((ev["kind"] == "kernel").to_numpy(dtype=bool))
    if not rows.size:
        raise MissingDataError(f"{trace.path} has no kernel events")
    gx, gy, gz = (ev[c].to_numpy()[rows].astype(np.int64) for c in ("grid_x", "grid_y", "grid_z"))
    has_grid = (gx > 0) & (gy > 0) & (gz > 0)
    no_grid = int((~has_grid).sum())
    if no_grid:
        warnings.append(f"{no_grid} of {rows.size} kernels carry no grid and are not counted")
    if not has_grid.any():
        raise MissingDataError(f"{trace.path}: no kernel carries a launch grid")
    # only the columns waves reads, gathered once each (not every column of the events table, twice; not a
    # take of the table, which copies them again into blocks)
    r = rows[has_grid]
    k = pd.DataFrame({c: ev[c].array[r] for c in KERNEL_COLUMNS if c in ev.columns}, index=ev.index[r], copy=False)
    return k, (gx[has_grid], gy[has_grid], gz[has_grid]), no_grid


KERNEL_COLUMNS = [
    "name",
    "start_ns",
    "dur_ns",
    "correlation",
    "block_x",
    "block_y",
    "block_z",
    "registers",
    "shared_mem",
]


def _distinct_names(k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' distinct names, sorted, and each kernel's index into them — per distinct name, not per event:
    the categorical's codes (np.unique over millions of strings took seconds)."""
    codes = k["name"].cat.codes.to_numpy().astype(np.int64) + 1  # 0: no name
    seen = np.bincount(codes, minlength=len(k["name"].cat.categories) + 1) > 0
    used = np.flatnonzero(seen) - 1  # as np.unique(codes) gave them, without sorting every kernel
    inv = (np.cumsum(seen) - 1)[codes]
    uniq = np.asarray([str(c) for c in k["name"].cat.categories[used]], dtype=object)
    order = np.argsort(uniq, kind="stable")  # names sorted as before
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return uniq[order], rank[inv]
