"""`findings --compare`: where the idle time of the step changed between two deployments.

The op comparison (:mod:`.op_compare`) sees kernels that run slower; a step that grew because the GPU waited more —
on the host's launches, on a synchronisation — has no slower kernel to show for it. Here each side's idle gaps are
classed by the one rule of ``tracekit findings`` (:func:`.step_sources.idle_gaps`: host still launching, waiting on
a synchronisation, kernel-boundary gaps, unattributed), their median per step compared, and a class that differs by
a major share of the step is a finding on the side with more of it: what it would gain with the other side's idle
time of that class. Words live in tracekit/data/findings.json (``idle_changed``)."""

from __future__ import annotations

from ...trace import Trace
from ..options import AllGatherOptions
from .context import Context
from .rules import finding, ms_text, words
from .step_sources import idle_gaps

WHY = {  # the idle classes of idle_gaps, in the words of a comparison
    "idle_host": "GPU idle while the host was still launching",
    "idle_sync": "GPU idle waiting on synchronisation",
    "idle_short": "Kernel-boundary gaps",
    "idle_unattributed": "GPU idle with no launch record for what followed",
}


def idle_per_class(trace: Trace, steps, step_ns: float) -> dict[str, float]:
    """Median idle time per step of each class (ns), as ``tracekit findings`` classes it (a class with no gap: 0 ns;
    gaps whose next work has no launch record are ``idle_unattributed``, never guessed into another class)."""
    ctx = Context(
        trace=trace, ann=None, steps=steps, step_ns=step_ns, hw=None, log=None, ag=AllGatherOptions(), sms=None
    )
    got = {r["kind"]: float(r["gain_ms_per_step"]) * 1e6 for r in idle_gaps(ctx) if r["gain_ms_per_step"] is not None}
    return {k: got.get(k, 0.0) for k in WHY}


def idle_differences(
    a: Trace,
    b: Trace,
    steps: tuple,
    step_ns: tuple[float, float],
    labels: tuple[str, str],
) -> tuple[list[dict], list[dict]]:
    """The findings (one per idle class whose median per step differs) and the table of every class on both sides
    (``kind, why, a_ns, b_ns, diff_ns``: b − a)."""
    ia, ib = idle_per_class(a, steps[0], step_ns[0]), idle_per_class(b, steps[1], step_ns[1])
    table, rows = [], []
    for kind, why in WHY.items():
        va, vb = ia[kind], ib[kind]
        diff = vb - va
        table.append({"kind": kind, "why": why, "a_ns": va, "b_ns": vb, "diff_ns": diff})
        if not diff:
            continue
        more, less = (1, 0) if diff > 0 else (0, 1)  # the side with more idle time of this class gains the difference
        vals, paths = (va, vb), (a.path, b.path)
        rows.append(
            finding(
                None,
                "idle_changed",
                "idle",
                gain_ns=abs(diff),
                step_ns=step_ns[more],
                words=words(
                    "idle_changed",
                    why=why,
                    more=labels[more],
                    less=labels[less],
                    value_more=f"{ms_text(vals[more])} per step",
                    value_less=f"{ms_text(vals[less])} per step",
                    gain=f"{ms_text(abs(diff))} per step",
                    trace_more=paths[more],
                ),
                evidence=(
                    f"{why}, median per step: {ms_text(vals[0])} in {labels[0]}, {ms_text(vals[1])} in"
                    f" {labels[1]} (steps of {ms_text(step_ns[0])} and {ms_text(step_ns[1])})"
                ),
            )
        )
    return rows, table


__all__ = ["WHY", "idle_per_class", "idle_differences"]
