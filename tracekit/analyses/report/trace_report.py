"""`tracekit report`: the main job — one trace's decode step, end to end, in one result.

Steps, the wall decomposition under both AllGather definitions, kernel time per block type (with an
annotation), every weight AllGather and its exposure (when the trace has PtoP copies) and the
communication on the critical path. Each part is the same function its own command runs.
"""

from __future__ import annotations

from ...annotation import Annotation, annotate, as_annotation
from ...errors import UsageError
from ...result import Result, trace_input
from ...trace import Trace
from ..comm.allgather import allgathers
from ..comm.communication import communication
from ..comm.exposure import exposure
from ..options import AllGatherOptions
from ..structure.blocks import block_stats
from ..structure.layers import automatic_note, layers
from ..time.decompose import decompose
from ..structure.fit import best_fit
from ...events import kinds_mask
from ..memory.launch_log import ledger
from ..steps.keywords import options_as_objects
from ..steps.resolve import find_steps, median_step
from ...result import merge_warnings
from ..time.timeline import step_timeline


@options_as_objects
def report(
    trace: Trace,
    ann: Annotation | None = None,
    *,
    steps=None,
    ag: AllGatherOptions | None = None,
    categories=None,
    log=None,
    ranks: Result | None = None,
) -> Result:
    """The main job; the steps are found once and every part uses them. With a launch ``log`` (an SglangLog) the
    memory ledger's rows and the memory findings come too. With ``ranks`` (what ``tracekit.imbalance(RUN_DIR)``
    returned; ``trace`` is then its reference rank's, the lowest rank id: ``multirank.reference_files``) the ranks
    part too: ``summary.ranks`` (imbalance per step, the straggler with its bs against the median bs), the tables
    ``ranks``, ``rank_by_step``, ``rank_steps``, ``rank_collectives``, ``rank_per_collective`` and the rank
    findings among the findings (docs/multirank.md)."""
    if ranks is not None and getattr(ranks, "command", None) != "imbalance":
        raise UsageError("report(ranks=…) takes the result of tracekit.imbalance(RUN_DIR)")
    if getattr(trace, "is_run", False):  # a tracekit.load_run Run: its reference rank's report with the ranks part
        from ..findings.imbalance_findings import run_inputs

        trace, ranks = run_inputs(trace, ranks, steps)
    ann = as_annotation(ann)
    st = find_steps(trace, steps, ann=ann)
    kernels = int(kinds_mask(trace.events, ("kernel",)).sum())  # info's count; its tables are not needed here
    wall = decompose(trace, ag="ptop", steps=st)
    wall_local = decompose(trace, ag="ptop+local", steps=st)
    s = wall.summary
    summary = {
        "rank": trace.meta.get("rank"),
        "num_sms": trace.meta.get("num_sms"),
        "kernels": kernels,
        "steps": s["steps"],
        "marker": s["marker"],
        "phases": st.phases,
        "trustworthy": st.trustworthy,
        "median_wall_ns": s["median_wall_ns"],
        "median_busy_ns": s["median_busy_ns"],
        "median_ag_only_ns": s["median_ag_only_ns"],
        "median_idle_ns": s["median_idle_ns"],
        "median_ag_only_local_ns": wall_local.summary["median_ag_only_ns"],
    }
    tables = {"wall": wall.tables["per_step"], "steps": st.table}
    warnings = merge_warnings(wall.warnings)
    if ann is not None and ann.blocks is not None:
        part, (block_spans, block_lane) = _block_part(trace, ann, st, categories)
    else:  # any model: the automatic layers name what the step is made of
        part, (block_spans, block_lane) = _layer_part(trace, st, categories)
    ag = AllGatherOptions.of(ag).with_annotation(ann)
    agopts = ag.as_keywords()
    ex = None
    if (trace.events["copy_kind"] == "PtoP").any():
        ag_part, ex = _allgather_part(trace, st, ag)
        part = _joined(part, ag_part)
    main = ann.main_stream if ann is not None and isinstance(ann.main_stream, int) else None
    comm = communication(trace, main_stream=main, ag=ag, steps=st)
    summary.update(part[0])
    summary["median_critical_comm_ns_by_class"] = comm.summary["median_critical_ns_per_step_by_class"]
    summary["median_side_comm_ns_by_class"] = comm.summary["median_side_ns_per_step_by_class"]
    tables.update(part[1])
    tables["comm"] = comm.tables["per_step"]
    tables["health"] = st.health
    warnings = merge_warnings(warnings, part[2])
    from ..findings.trace_findings import findings

    summary.update(shapes_part(trace))
    fnd = findings(trace, ann, log=log, steps=st, ag=ag, ranks=ranks)  # a run's: ranked with the rank findings
    tables["findings"] = fnd.tables["findings"]
    summary["findings"] = fnd.summary["findings"]
    summary["top_finding"] = fnd.summary["top"]
    if log is not None:
        led = ledger(log)
        tables["ledger"] = led.tables["rows"]
        warnings = merge_warnings(warnings, led.warnings)
    typical = median_step(st)
    if typical is not None:
        summary["timeline_step"] = typical
        tables["timeline"] = step_timeline(
            trace,
            st,
            typical,
            blocks=block_spans,
            block_lane=block_lane,
            allgathers=ex.tables["per_ag"] if ex is not None else None,
            exposed=ex.tables["intervals"] if ex is not None else None,
            categories=categories,
        )
    inputs = [trace_input(trace)] + ([{"path": log.path}] if log is not None else [])
    params = {
        "annotation": ann.ref if ann else None,
        "log": log.path if log is not None else None,
        **st.options.as_params(),
        "group_size": agopts["group_size"],
        "sizes": agopts["sizes"],
    }
    if ranks is not None:  # `report RUN_DIR`: the ranks of one run, this trace their reference rank's
        from .ranks_part import add_ranks

        inputs, warnings = add_ranks(ranks, summary, tables, inputs, params, warnings, fnd)
    return Result(command="report", inputs=inputs, params=params, summary=summary, tables=tables, warnings=warnings)


def shapes_part(trace: Trace) -> dict:
    """For a trace whose kernels a CUDA/HIP graph replayed: ``shapes``, one line saying what share of the kernel
    time has its op's shapes (and FLOPs and bytes) and from how many capture traces (docs/replay.md), or, where no
    replayed kernel has an op, what to record (``RECORD_HINT``); ``shapes_pct``, ``shaped_pct`` (with FLOPs or
    bytes) and ``capture_traces`` (used). Nothing for a trace without graph replays."""
    from ..hardware.shapes import kernel_shapes

    ks = kernel_shapes(trace)
    if not ks.graph_kernels:
        return {}
    from ..hardware.kernel_ops import kernel_ops

    r = kernel_ops(trace).replay
    t = ks.table
    dur = trace.events["dur_ns"].to_numpy()[t["row"].to_numpy()]
    total = float(dur.sum()) or 1.0
    with_shape = 100.0 * float(dur[t["model"].notna().to_numpy(dtype=bool)].sum()) / total
    used = len({int(c) for c in r.capture[r.capture >= 0].tolist()})
    graph_pct = 100.0 * ks.graph_ns / total
    if used:
        line = (
            f"for {with_shape:.1f} % of kernel time (FLOPs or bytes for {ks.shaped_pct:.1f} %), from {used}"
            f" capture trace{'s' if used > 1 else ''}"
        )
    else:
        line = f"{graph_pct:.1f} % of kernel time is replayed from CUDA graphs with no op or shapes: " + (
            ks.replay_hint or "tracekit replay TRACE says why"
        )
    return {"shapes": line, "shapes_pct": with_shape, "shaped_pct": ks.shaped_pct, "capture_traces": used}


Part = tuple[dict, dict, list[str]]  # what one part adds to the report: summary entries, tables, warnings


def _joined(a: Part, b: Part) -> Part:
    """Two parts' additions, ``a``'s first."""
    return {**a[0], **b[0]}, {**a[1], **b[1]}, merge_warnings(a[2], b[2])


def _block_part(trace: Trace, ann: Annotation, st, categories) -> tuple[Part, tuple]:
    """With an annotation that has blocks: kernel time per block type and op tag, the one-step table, and the block
    spans the timeline draws (with their lane)."""
    b = block_stats(trace, ann, steps=st, categories=categories)
    spans = annotate(trace, ann, st.table).blocks
    summary = {
        "median_kernel_ns_by_block_type": b.summary["median_kernel_ns_by_type"],
        "blocks_per_step": b.summary["blocks_per_step"],
        "layers_from": f"annotation {ann.name}",
    }
    tables = {
        "block_types": b.tables["per_step_type"],
        "op_tags": b.tables["per_tag"],
        "one_step": b.tables["one_step"],
    }
    return (summary, tables, list(b.warnings)), (spans, "blocks")


def _layer_part(trace: Trace, st, categories) -> tuple[Part, tuple]:
    """Without one: the automatic layers (any model), the shipped annotation that fits the trace if one does, the
    one-step table, and the layer spans the timeline draws (with their lane)."""
    lay = layers(trace, steps=st, categories=categories, missing_ok=True)
    summary: dict = {}
    warnings: list[str] = []
    fit = best_fit(trace, st, layers=lay)
    if fit:
        summary["fitting_annotation"] = fit[0]
        warnings = [
            f"annotation {fit[0]} fits this trace (score {fit[1]:.2f}; `tracekit annotations` ranks them):"
            f" rerun with -a {fit[0]}"
        ]
    summary.update(
        {
            "layers_from": "automatic",
            "layers_per_step": lay.summary["layers_per_step"],
            "layer_types": lay.summary["types"],
        }
    )
    tables = {
        "layers": lay.tables["layers"],
        "layer_types": lay.tables["layer_types"],
        "one_step": lay.tables["one_step"],
    }
    warnings = merge_warnings(warnings, lay.warnings, [automatic_note(lay)] if lay.summary["layers_per_step"] else [])
    return (summary, tables, warnings), (lay.tables["layers"], "layers")


def _allgather_part(trace: Trace, st, ag: AllGatherOptions) -> tuple[Part, Result]:
    """When the trace has PtoP copies: every weight AllGather, its bandwidth and its exposure (the exposure result
    too: the timeline draws its AllGathers and exposed intervals)."""
    res = allgathers(trace, ag=ag, steps=st)
    ex = exposure(trace, ag=ag, steps=st)
    summary = {
        "allgathers": res.summary["allgathers"],
        "group_size": res.summary["group_size"],
        "median_received_bytes_per_step": res.summary["median_received_bytes_per_step"],
        "median_copy_gbps": res.summary["median_copy_gbps"],
        "median_exposed_ns_per_step": ex.summary["median_exposed_ns_per_step"],
        "median_exposed_ns_per_step_by_type": ex.summary["median_exposed_ns_per_step_by_type"],
    }
    tables = {
        "allgather_types": res.tables["per_step_type"],
        "exposure_types": ex.tables["per_step_type"],
        "bandwidth": res.tables["bandwidth"],
    }
    return (summary, tables, list(res.warnings)), ex
