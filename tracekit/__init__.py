"""tracekit: where each millisecond of an LLM decode step goes, from torch-profiler traces and sglang logs.

The Python API the CLI is a thin layer over::

    import tracekit
    trace = tracekit.load("trace.json.gz")
    tracekit.decompose(trace, ag="ptop+local").tables["per_step"]
    tracekit.block_stats(trace, tracekit.load_annotation("k3_dp16")).summary

Analysis functions are imported on first use, so ``import tracekit`` stays light.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

from .errors import InputError, MissingDataError, TracekitError  # noqa: E402
from .ingest import load  # noqa: E402
from .trace import IngestReport, Trace  # noqa: E402

_LAZY = {
    "trace_info": "analyses.info", "kernel_stats": "analyses.kernels", "find_steps": "analyses.steps",
    "steps_result": "analyses.steps", "decompose": "analyses.decompose", "temporal": "analyses.decompose",
    "overlap": "analyses.overlap", "segment_allgathers": "analyses.allgather", "allgather_result": "analyses.allgather",
    "exposure": "analyses.allgather", "communication": "analyses.allgather", "block_stats": "analyses.blocks",
    "annotated": "analyses.blocks", "kernel_selection_stats": "analyses.blocks", "report": "analyses.report",
    "analyze": "analyses.sweep", "compare": "analyses.compare", "rank_map": "analyses.ranks",
    "imbalance": "analyses.imbalance", "ledger": "analyses.memory", "log_result": "analyses.memory",
    "capacity": "analyses.capacity", "load_annotation": "annotate.spec", "annotate": "annotate.blocks",
    "read_log": "ingest.sglang_log", "read_bench": "ingest.bench", "discover": "ingest.discover",
}

__all__ = ["__version__", "load", "Trace", "IngestReport", "TracekitError", "InputError", "MissingDataError",
           *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
