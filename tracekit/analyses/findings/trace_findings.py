"""`tracekit findings`: what to change, ranked by what it gains per step (docs/findings.md).

Each source is a small function over results that already exist (exposure, the idle gaps of the wall, waves,
communication, the roofline, the steps' batch sizes against the captured CUDA graphs, the memory replay): those read
from the step timeline in :mod:`.step_sources`, those read from the kernels in :mod:`.kernel_sources`, the memory
ones in :mod:`.memory`. This module lists them (``SOURCES``), runs them over one :class:`.context.Context` and ranks
what they found. A source that cannot run on this input (no PtoP copies, no annotation with shapes, no launch log) is
listed in ``tables.sources`` with the reason, never silently left out. Words, thresholds and commands live in
``tracekit/data/findings.json``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from ...annotation import Annotation, as_annotation
from ...errors import TracekitError, UsageError
from ...gpu_specs import HardwareProfile, profile_stand_in, resolve_profile
from ...result import Result, shown_obj, trace_input
from ...trace import Trace
from ..options import AllGatherOptions
from ..steps.keywords import options_as_objects
from ..steps.resolve import find_steps, median_ns
from ...result import merge_warnings
from .context import Context
from .kernel_sources import dominance, roofline_gaps, shape_rooflines, wave_losses
from .rules import SOURCE_COLUMNS, finding_rules, ms_text, rank_findings
from .step_sources import critical_communication, exposed_allgathers, graph_padding, idle_gaps


SOURCES: list[tuple[str, Callable[[Context], list[dict]]]] = [
    ("exposure", exposed_allgathers),
    ("idle", idle_gaps),
    ("waves", wave_losses),
    ("comm", critical_communication),
    ("roofline", roofline_gaps),
    ("graphs", graph_padding),
    ("dominance", dominance),
    ("shapes", shape_rooflines),
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


@options_as_objects
def findings(
    trace: Trace | None = None,
    ann: Annotation | str | None = None,
    *,
    log=None,
    hw: HardwareProfile | str | None = None,
    sms: int | None = None,
    bs: float | None = None,
    min_ms: float | None = None,
    min_pct: float | None = None,
    compare: tuple[Trace, Trace] | None = None,
    ann_b: Annotation | str | None = None,
    bs_b: float | None = None,
    config: dict | None = None,
    config_b: dict | None = None,
    steps=None,
    ag: AllGatherOptions | None = None,
    ranks: Result | None = None,
) -> Result:
    """`tracekit findings TRACE`: a ranked list of opportunities, each with its gain per step, its basis (measured
    or estimated, and how), the evidence, the command that shows it, and what to try. With a launch ``log`` the
    CUDA-graph and memory sources run too. A time finding is major when its gain is at least ``min_pct`` % of the
    median step (default 1, the rules file's ``min_pct``) and at least ``min_ms`` ms per step (the absolute floor,
    a second condition, default 0.02; docs/findings.md "Severity"); every other finding is ``minor``.

    ``compare=(A, B)``: two deployments instead (``ann`` for A, ``ann_b`` for B, default ``ann``; ``config`` /
    ``config_b`` their launch settings from :func:`tracekit.launch_config`; ``bs`` and ``bs_b`` their requests per
    step where the step markers carry none): the same op slower in one of them — per call, or per request when the
    slower side runs the larger batch — with its launch-configuration difference, and the settings that differ.
    ``ranks``: the result of ``tracekit.imbalance(RUN_DIR)`` — what DP imbalance costs per step and which rank makes
    the others wait, and why; with ``trace`` (one rank's: ``tracekit findings RUN_DIR`` passes the reference rank's,
    or ``--device``'s) ranked together with that trace's own findings (:func:`.imbalance_findings.run_findings`),
    alone the rank findings only. ``trace`` may be a ``tracekit.load_run`` Run: its reference rank's trace and its
    imbalance (computed here unless ``ranks`` is given). ``ann`` and ``ann_b``: a name, a path or an
    Annotation; ``hw``: a profile, its name or a JSON file; ``steps``: StepOptions, Steps or a table (default: the
    annotation's step options); ``ag``: :class:`AllGatherOptions` over the annotation's."""
    if getattr(trace, "is_run", False):  # a tracekit.load_run Run: its reference rank's trace and its imbalance
        from .imbalance_findings import run_inputs

        trace, ranks = run_inputs(trace, ranks, steps)
    if ranks is not None:  # the ranks of one run (a tracekit.imbalance result): with a trace, ranked with its own
        if compare is not None:
            raise UsageError("give one TRACE, two deployments with --compare A B, or the ranks of one run, not two")
        from .imbalance_findings import analysed_rank, rank_findings_of, run_findings

        if trace is None:  # findings(ranks=…) alone: the rank findings only
            return rank_findings_of(ranks, min_ms=min_ms, min_pct=min_pct)
        own = findings(trace, ann, log=log, hw=hw, sms=sms, bs=bs, min_ms=min_ms, min_pct=min_pct, steps=steps, ag=ag)
        return run_findings(own, ranks, rank=analysed_rank(trace, ranks), min_ms=min_ms, min_pct=min_pct)
    ann, ann_b = as_annotation(ann), as_annotation(ann_b, name="ann_b")
    if compare is not None:
        if trace is not None:
            raise UsageError("give one TRACE, or two deployments with --compare A B, not both")
        from .op_compare import compare_findings

        a, b = compare
        return compare_findings(
            a,
            b,
            ann_a=ann,
            ann_b=ann_b if ann_b is not None else ann,
            config_a=config,
            config_b=config_b,
            min_ms=min_ms,
            min_pct=min_pct,
            bs_a=bs,
            bs_b=bs_b,
            steps_a=find_steps(a, steps, ann=ann),
            steps_b=find_steps(b, steps, ann=ann_b if ann_b is not None else ann),
        )
    if trace is None:
        raise UsageError("findings needs a TRACE (or --compare A B)")
    rules = finding_rules()
    min_ms, min_pct = _thresholds(rules, min_ms, min_pct)
    st = find_steps(trace, steps, ann=ann)
    wall = (st.ends - st.starts).astype(np.int64)
    step_ns = float(median_ns(wall)) if wall.size else 0.0
    profile = hw if isinstance(hw, HardwareProfile) else _profile(hw, trace)
    ctx = Context(
        trace=trace,
        ann=ann,
        steps=st,
        step_ns=step_ns,
        hw=profile,
        log=log,
        bs=bs,
        ag=AllGatherOptions.of(ag).with_annotation(ann),
        sms=sms,
    )
    if hw is None and (stand_in := profile_stand_in(trace.meta, profile)):  # detected: another model's profile
        ctx.warnings.append(f"{trace.path}: {stand_in}")
    srcs = list(SOURCES)
    if log is not None:
        from .memory import MEMORY_SOURCES

        srcs += MEMORY_SOURCES
    rows, status = run_sources(ctx, srcs)
    table = rank_findings(rows, min_ms=min_ms, min_gib=float(rules["min_gib"]), min_pct=min_pct)
    status = listed_counts(status, table)
    summary = _summary(table, st, step_ns, profile)
    warnings = merge_warnings(trace.report.warnings, st.warnings, ctx.warnings)
    if not st.trustworthy:
        warnings.append(
            f"{trace.path}: the step health checks failed for some steps (tracekit steps); the gains are"
            " medians over steps that may be under-recorded"
        )
    return Result(
        command="findings",
        inputs=[trace_input(trace)] + ([{"path": log.path}] if log is not None else []),
        params={
            "annotation": ann.ref if ann else None,
            "hw": profile.name if profile else None,
            "sms": sms,
            "min_ms": min_ms,
            "min_pct": min_pct,
            **st.options.as_params(),
            "group_size": ctx.ag.group_size,
            "sizes": ctx.ag.size_map,
        },
        summary=summary,
        tables={"findings": table, "sources": pd.DataFrame(shown_obj(status), columns=SOURCE_COLUMNS)},
        warnings=warnings,
    )


def listed_counts(status: list[dict], table: pd.DataFrame) -> list[dict]:
    """The sources' finding counts as the ranked list holds them: a finding whose gain rounds to nothing
    (``min_gain_ms``) is left out of the list, so it is not counted either; the reason says how many were left out."""
    listed = table["source"].value_counts()
    for s in status:
        n = int(listed.get(s["source"], 0))
        if s["ran"] and n < s["findings"]:
            left = s["findings"] - n
            floor = ms_text(1e6 * float(finding_rules().get("min_gain_ms", 0.0)))
            s["reason"] = f"{left} more found, each under {floor} per step: left out of the list"
        s["findings"] = n if s["ran"] else s["findings"]
    return status


def _thresholds(rules: dict, min_ms: float | None, min_pct: float | None) -> tuple[float, float]:
    """(min_ms, min_pct) that make a finding major: the options, else the rules file's; out of range is refused."""
    min_ms = float(rules["min_ms"]) if min_ms is None else float(min_ms)
    if min_ms < 0:
        raise UsageError("--min-ms must be 0 or more")
    min_pct = float(rules["min_pct"]) if min_pct is None else float(min_pct)
    if not 0 <= min_pct <= 100:
        raise UsageError("--min-pct must be between 0 and 100")
    return min_ms, min_pct


def _summary(table: pd.DataFrame, st, step_ns: float, profile: HardwareProfile | None) -> dict:
    """The findings' summary: how many (major, minor), their total gain, the top one, and the steps they are over."""
    major = table[~table["minor"]]
    return {
        "step_ms": step_ns / 1e6,
        "findings": int(len(table)),
        "major": int(len(major)),
        "minor": int(table["minor"].sum()),
        # the gains overlap (one idle gap is also a kernel-boundary gap, a kernel both eager and below its
        # roofline): their sum is an upper bound, capped at the step, the most a step can lose (docs/findings.md)
        "total_gain_ms": capped(known_sum(table["gain_ms_per_step"]), step_ns / 1e6 if step_ns else None),
        "total_gain_gib": known_sum(table["gain_gib"]),  # None, not 0, when no finding estimates memory (no log)
        "findings_without_gain": int((table["gain_ms_per_step"].isna() & table["gain_gib"].isna()).sum()),
        "top": str(table["title"].iloc[0]) if len(table) else None,
        "steps": int(len(st.table)),
        "marker": st.marker,
        "trustworthy": st.trustworthy,
        "hw": profile.name if profile is not None else None,
    }


def capped(total_ms: float | None, step_ms: float | None) -> float | None:
    """The findings' summed gain, never more than the step (None stays None; no step: the sum as it is)."""
    return total_ms if total_ms is None or step_ms is None else min(total_ms, step_ms)


def known_sum(col: pd.Series) -> float | None:
    """The sum of the known values of a column; None (unknown, not 0) when none is known."""
    v = col.to_numpy(dtype=float, na_value=np.nan)
    return float(np.nansum(v)) if (~np.isnan(v)).any() else None


def _profile(hw, trace: Trace) -> HardwareProfile | None:
    """The named profile, else the trace's detected one, else None (the roofline source then says why)."""
    try:
        return resolve_profile(hw, trace.meta, what="findings")
    except TracekitError:
        if hw is not None:
            raise
        return None
