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

from ._version import __version__  # noqa: E402
from .errors import InputError, MissingDataError, TracekitError  # noqa: E402
from .ingest import load  # noqa: E402
from .trace import IngestReport, Trace  # noqa: E402

_LAZY = {
    "trace_info": "analyses.info", "kernel_stats": "analyses.kernels", "find_steps": "analyses.steps",
    "steps_result": "analyses.steps", "decompose": "analyses.decompose", "temporal": "analyses.decompose",
    "overlap": "analyses.overlap", "segment_allgathers": "analyses.allgather", "allgather_result": "analyses.allgather",
    "exposure": "analyses.allgather", "communication": "analyses.allgather", "block_stats": "analyses.blocks",
    "annotated": "analyses.blocks", "kernel_selection_stats": "analyses.blocks", "report": "analyses.report",
    "analyze": "sweeps", "compare": "analyses.compare", "rank_map": "analyses.ranks",
    "imbalance": "sweeps", "ledger": "analyses.memory", "log_result": "analyses.memory",
    "capacity": "analyses.capacity", "load_annotation": "annotation.spec", "annotate": "annotation.blocks",
    "read_log": "ingest.sglang_log", "read_bench": "ingest.bench", "discover": "ingest.discover",
    "get_steps": "analyses.steps", "step_options": "analyses.steps", "StepOptions": "analyses.steps",
    "Steps": "analyses.steps", "allgather_options": "analyses.allgather", "annotated_steps": "analyses.blocks",
    "roofline": "analyses.roofline", "hbm_bytes": "analyses.hbm", "kernel_waves": "analyses.waves",
    "waves_calc": "analyses.waves", "compare_deployments": "sweeps", "bench_result": "sweeps",
    "load_side": "sweeps", "launch_config": "ingest.launch_script", "export_parquet": "exporters.parquet",
    "collect": "exporters.parquet", "annotate_trace": "exporters.perfetto", "load_profile": "hardware",
    "resolve_profile": "hardware", "hw_profiles": "hardware", "emit": "render",
    "decomposition_points": "analyses.plot_data", "blocks_points": "analyses.plot_data",
    "exposure_points": "analyses.plot_data", "PlotInput": "analyses.plot_data",
    "cache_info": "ingest.cache_admin", "cache_clear": "ingest.cache_admin",
    "layers": "analyses.layers", "find_layers": "analyses.layers", "suggest": "analyses.suggest",
    "suggest_result": "analyses.suggest", "one_step_table": "analyses.onestep", "one_step_tables": "analyses.onestep",
    "categorize": "analyses.categories", "load_categories": "analyses.categories",
    "trace_categories": "analyses.categories", "findings": "analyses.findings",
    "compare_findings": "analyses.findings_compare", "whatif": "analyses.whatif",
    "as_annotation": "annotation.spec", "as_profile": "hardware", "annotation_fit": "analyses.fit",
    "best_fit": "analyses.fit",
    "timeline_figure": "render.plots", "ledger_figure": "render.plots", "save_figure": "render.plots",
}

__all__ = ["__version__", "load", "Trace", "IngestReport", "TracekitError", "InputError", "MissingDataError",
           *_LAZY]


def __dir__() -> list[str]:
    """The lazily imported names too, so that completion in a notebook shows every analysis."""
    return sorted(set(globals()) | set(_LAZY))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
