"""Column names, dtypes and categories of the events table (documented in docs/events-schema.md)."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from .errors import MissingDataError

KINDS = [
    "kernel",
    "memcpy",
    "memset",
    "sync",
    "gpu_annotation",
    "cpu_op",
    "cpu_annotation",
    "runtime",
    "python",
    "instant",
    "other",
]
GPU_ACTIVITY_KINDS = ("kernel", "memcpy", "memset")
COPY_KINDS = ["HtoD", "DtoH", "DtoD", "PtoP", "HtoH", "memset", "other"]
COMM_CLASSES = ["nccl", "deepep", "custom_all_reduce", "all_to_all"]

# name -> (dtype, unit, meaning). Order is the column order of the table.
EVENT_COLUMNS: dict[str, tuple[str, str, str]] = {
    "event_id": ("int64", "", "index of the record in the file's traceEvents (file order)"),
    "start_ns": ("int64", "ns", "start, exact: ts (µs text) × 1000, on the trace's own clock"),
    "dur_ns": ("int64", "ns", "duration (0 for instant events)"),
    "end_ns": ("int64", "ns", "start_ns + dur_ns"),
    "name": ("category", "", "event name as written"),
    "cat": ("category", "", "Kineto category as written (kernel, gpu_memcpy, cpu_op, …)"),
    "kind": ("category", "", "one of " + ", ".join(KINDS)),
    "device": ("int32", "", "GPU index (args.device, else the lane pid) for GPU events; -1 on the CPU"),
    "stream": ("int64", "", "CUDA/HIP stream (args.stream, else the lane tid) for GPU events; -1 on the CPU"),
    "pid": ("int64", "", "process id / GPU lane; -1 where the file has a string"),
    "tid": ("int64", "", "thread id / stream lane; -1 where the file has a string"),
    "correlation": ("int64", "", "launch correlation id; -1 if absent. Shared by all kernels of one CUDA-graph replay"),
    "external_id": ("int64", "", "Kineto 'External id'; -1 if absent"),
    "bytes": ("int64", "B", "bytes moved by a memcpy/memset; -1 if unknown (AMD writes none)"),
    "copy_kind": ("category", "", "memcpy/memset class: " + ", ".join(COPY_KINDS) + "; <NA> for non-copies"),
    "comm_class": ("category", "", "communication kernel class: " + ", ".join(COMM_CLASSES) + "; <NA> for compute"),
    "collective": ("category", "", "NCCL collective parsed from the name (AllReduce, AllGather, …)"),
    "algo": ("category", "", "NCCL algorithm parsed from the name (RING, TREE, NVLS, …)"),
    "protocol": ("category", "", "NCCL protocol parsed from the name (LL, LL128, SIMPLE)"),
    "grid_x": ("int32", "", "launch grid x; -1 if unknown"),
    "grid_y": ("int32", "", "launch grid y; -1 if unknown"),
    "grid_z": ("int32", "", "launch grid z; -1 if unknown"),
    "block_x": ("int32", "", "thread block x; -1 if unknown"),
    "block_y": ("int32", "", "thread block y; -1 if unknown"),
    "block_z": ("int32", "", "thread block z; -1 if unknown"),
    "registers": ("int32", "", "registers per thread; -1 if unknown"),
    "shared_mem": ("int64", "B", "shared memory per block; -1 if unknown"),
    "graph_id": ("int64", "", "CUPTI graph id of a graph-replayed kernel (args 'graph id'); -1 if absent"),
    "graph_node_id": (
        "int64",
        "",
        "CUPTI graph node id (args 'graph node id'), also on capture launches; -1 if absent",
    ),
    "shapes": (
        "category",
        "",
        "a cpu_op's recorded inputs (profiles taken with record_shapes=True): the JSON text"
        " [Input Dims, Input type, Concrete Inputs] as written (null where absent); <NA> for"
        " other events and ops without Input Dims",
    ),
}


# the columns the block engine (tracekit.annotation.annotate) adds to the events table (same layout as EVENT_COLUMNS)
ANNOTATION_COLUMNS: dict[str, tuple[str, str, str]] = {
    "step": ("int64", "", "decode step the event starts in; -1 outside every step"),
    "block": ("int64", "", "block index within the step; -1 outside every block"),
    "block_type": ("category", "", "block type from the annotation (head, KDA, MoE, …); <NA> outside blocks"),
    "layer": ("int64", "", "= block"),
    "type_layer": ("int64", "", "index among the step's blocks of the same type; -1 outside blocks"),
    "op_tag": ("category", "", "op tag from the annotation (kernels only); <NA> when untagged"),
}


def require_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise MissingDataError naming the absent columns."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise MissingDataError(f"{what} needs the column(s) {', '.join(missing)}, which the table lacks")
