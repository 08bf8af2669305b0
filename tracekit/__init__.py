"""tracekit: where each millisecond of an LLM decode step goes, from torch-profiler traces and sglang logs.

The Python API the CLI is a thin layer over::

    import tracekit
    trace = tracekit.load("trace.json.gz")
    tracekit.report(trace, annotation="k3_dp16")
    tracekit.wall("trace.json.gz", ag="ptop+local", step_name="...").tables["per_step"]
    tracekit.kernels(trace, top=10).tables["kernels"]

Every command is a public function of the same name (``tracekit wall`` is ``tracekit.wall``, ``tracekit waves trace``
is ``tracekit.waves_trace``), also reachable by the function's own name (``tracekit.decompose``); those names are
generated from the one list of commands, ``tracekit/registry.py``. Each takes what its command takes, spelled as the
CLI spells it: a trace as a path or a loaded Trace, ``annotation=`` a name, a path or an Annotation, and the long
options as keywords (``--step-name`` is ``step_name=``; tracekit/analyses/steps/keywords.py). The few names that are not commands (``load``,
``load_annotation``, ``StepOptions``, …) are the one explicit list ``_API`` below. Everything is imported on first
use, so ``import tracekit`` (and ``tracekit --version``) loads neither pandas nor numpy.
"""

from ._version import __version__ as __version__
from .errors import InputError as InputError
from .errors import MissingDataError as MissingDataError
from .errors import TracekitError as TracekitError
from .registry import public_functions as _public_functions

# The public names that are not commands: name -> the module under tracekit that defines it.
_API: dict[str, str] = {
    "load": "ingest",
    "Trace": "trace",
    "IngestReport": "trace",
    "load_annotation": "annotation.spec",
    "as_annotation": "annotation.spec",
    "load_profile": "gpu_specs",
    "resolve_profile": "gpu_specs",
    "as_profile": "gpu_specs",
    "find_steps": "analyses.steps.resolve",
    "step_options": "analyses.steps.resolve",
    "StepOptions": "analyses.steps.resolve",
    "Steps": "analyses.steps.resolve",
    "AllGatherOptions": "analyses.options",
    "segment_allgathers": "analyses.comm.segments",
    "allgather_options": "analyses.comm.segments",
    "annotated": "analyses.steps.resolve",
    "annotated_steps": "analyses.steps.resolve",
    "find_layers": "analyses.structure.layers",
    "one_step_table": "analyses.time.onestep",
    "one_step_tables": "analyses.time.onestep",
    "categorize": "analyses.categories",
    "load_categories": "analyses.categories",
    "trace_categories": "analyses.categories",
    "compare_findings": "analyses.findings.op_compare",
    "best_fit": "analyses.structure.fit",
    "PlotInput": "analyses.fleet.plot_data",
    "read_log": "ingest.sglang_log",
    "read_bench": "ingest.bench",
    "discover": "ingest.discover",
    "load_run": "analyses.fleet.multirank.run",
    "Run": "analyses.fleet.multirank.run",
    "launch_config": "ingest.launch_script",
    "load_side": "fan_out",
    "collect": "exporters.parquet",
    "emit": "render",
    "save_figure": "render.plots",
}
# ...and the commands: tracekit.<command> and tracekit.<its function's name> -> "module:function"
_COMMANDS: dict[str, str] = _public_functions()
_clash = sorted(set(_API) & set(_COMMANDS))
if _clash:
    raise RuntimeError(f"tracekit/__init__.py: {_clash} are both commands and entries of _API; remove them from _API")

__all__ = sorted(["__version__", "TracekitError", "InputError", "MissingDataError", *_API, *_COMMANDS])


def __dir__() -> list[str]:
    """The public names (the lazily imported ones too, so that completion in a notebook shows every analysis)."""
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})


def __getattr__(name: str):
    from importlib import import_module

    if name in _COMMANDS:
        module, _, attr = _COMMANDS[name].partition(":")
    elif name in _API:
        module, attr = _API[name], name
    else:
        raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value
