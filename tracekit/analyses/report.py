"""`tracekit report`: the main job — one trace's decode step, end to end, in one result.

Steps, the wall decomposition under both AllGather definitions, kernel time per block type (with an
annotation), every weight AllGather and its exposure (when the trace has PtoP copies) and the
communication on the critical path. Each part is the same function its own command runs.
"""
from __future__ import annotations

from ..annotate import Annotation
from ..result import Result, trace_input
from ..trace import Trace
from .allgather import allgather_result, communication, exposure
from .blocks import block_stats
from .decompose import decompose
from .info import trace_info
from .steps import DEFAULT_MIN_STEP_NS


def report(trace: Trace, ann: Annotation | None = None, *, step_name: str | None = None,
           min_step_ns: int | None = None) -> Result:
    name = step_name if step_name is not None else (ann.step.name if ann else None)
    floor = min_step_ns if min_step_ns is not None else (
        int(round(ann.step.min_ms * 1e6)) if ann else DEFAULT_MIN_STEP_NS)
    info = trace_info(trace)
    wall = decompose(trace, ag="ptop", step_name=name, min_step_ns=floor)
    wall_local = decompose(trace, ag="ptop+local", step_name=name, min_step_ns=floor)
    s = wall.summary
    summary = {
        "rank": info.summary["rank"], "num_sms": info.summary["num_sms"], "kernels": info.summary["kernels"],
        "steps": s["steps"], "marker": s["marker"], "median_wall_ns": s["median_wall_ns"],
        "median_busy_ns": s["median_busy_ns"], "median_ag_only_ns": s["median_ag_only_ns"],
        "median_idle_ns": s["median_idle_ns"],
        "median_ag_only_local_ns": wall_local.summary["median_ag_only_ns"],
    }
    tables = {"wall": wall.tables["per_step"]}
    warnings = list(wall.warnings)
    if ann is not None and ann.blocks is not None:
        b = block_stats(trace, ann, step_name=name, min_step_ns=floor)
        summary["median_kernel_ns_by_block_type"] = b.summary["median_kernel_ns_by_type"]
        summary["blocks_per_step"] = b.summary["blocks_per_step"]
        tables["block_types"] = b.tables["per_step_type"]
        tables["op_tags"] = b.tables["per_tag"]
        warnings += [w for w in b.warnings if w not in warnings]
    if (trace.events["copy_kind"] == "PtoP").any():
        kw = {"group_size": ann.allgather.group_size if ann else None, "sizes": ann.allgather.sizes if ann else {},
              "local_copy_pattern": ann.allgather.local_copy if ann else None, "step_name": name,
              "min_step_ns": floor}
        ag = allgather_result(trace, **kw)
        ex = exposure(trace, **kw)
        summary.update({"allgathers": ag.summary["allgathers"], "group_size": ag.summary["group_size"],
                        "median_received_bytes_per_step": ag.summary["median_received_bytes_per_step"],
                        "median_copy_gbps": ag.summary["median_copy_gbps"],
                        "median_exposed_ns_per_step": ex.summary["median_exposed_ns_per_step"],
                        "median_exposed_ns_per_step_by_type": ex.summary["median_exposed_ns_per_step_by_type"]})
        tables["allgather_types"] = ag.tables["per_step_type"]
        tables["exposure_types"] = ex.tables["per_step_type"]
        tables["bandwidth"] = ag.tables["bandwidth"]
        warnings += [w for w in ag.warnings if w not in warnings]
    comm = communication(trace, local_copy_pattern=ann.allgather.local_copy if ann else None, step_name=name,
                         min_step_ns=floor)
    summary["median_critical_comm_ns_by_class"] = comm.summary["median_critical_ns_per_step_by_class"]
    summary["median_side_comm_ns_by_class"] = comm.summary["median_side_ns_per_step_by_class"]
    tables["comm"] = comm.tables["per_step"]
    return Result(command="report", inputs=[trace_input(trace)],
                  params={"annotation": ann.name if ann else None, "step_name": name, "min_step_ns": floor},
                  summary=summary, tables=tables, warnings=warnings)
