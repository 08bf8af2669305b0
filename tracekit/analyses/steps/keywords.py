"""The one decorator on every command's function: it takes what the CLI takes, spelled as the CLI spells it.

A trace as a path (loaded with :func:`tracekit.load`, cached unless ``no_cache=True``, as the CLI does) or a loaded
Trace; an annotation as a name, a path or an Annotation, positionally or as ``annotation=``; a launch log as a path;
and the CLI's long options as keywords (``--step-name`` is ``step_name=``, ``--min-step-ms`` is ``min_step_ms=``,
``--ag-size`` is ``ag_size=``, ``--qlen`` is ``qlen=``), which become the objects the function's signature names
(``steps=`` a StepOptions, ``ag=`` an AllGatherOptions, capacity's ``dims=``). A wrong type is one sentence.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from dataclasses import dataclass

from ...annotation.spec import as_annotation
from ...errors import TAKES_TRACE, ArgumentTypeError, type_name
from ..options import AllGatherOptions

__all__ = ["ArgumentTypeError", "options_as_objects", "STEP_FLAGS", "AG_FLAGS", "SPELLINGS"]


# --------------------------------------------------------------------------------------------------
# the CLI's spellings as keywords
# --------------------------------------------------------------------------------------------------

# the step flags (every command that finds steps): the CLI's name -> step_options' keyword
STEP_FLAGS = {
    "step_name": "step_name",
    "min_step_ms": "min_step_ns",
    "phase": "phase",
    "step_source": "source",
    "steps_file": "steps_file",
}
# the AllGather flags: the CLI's name -> AllGatherOptions' field
AG_FLAGS = {"group_size": "group_size", "ag_size": "sizes", "local_copy": "local_copy"}
# a CLI option whose parameter has another name: the CLI's name -> the parameter names it may be, in order
SPELLINGS = {
    "annotation": ("ann", "annotations"),
    "annotation_b": ("ann_b",),
    "qlen": ("q_len",),
    "var": ("variables",),
    "kind": ("kinds",),
    "set": ("settings",),
    "dim": ("dims",),
    "log2": ("log_b",),
    "out": ("out_dir",),
}
# a CLI option in another unit: the CLI's name -> (the parameter, the factor)
UNITS = {"time_us": ("time_ns", 1000)}
# how a path given for a trace or a log is read: the CLI's --no-cache, --cache-dir and --patterns
READING = ("no_cache", "cache_dir", "patterns")
TAKES_ANNOTATION = "an annotation name, a path to an annotation file or an Annotation"
TAKES_LOG = "a path to a launch log or a parsed log (tracekit.read_log)"


@dataclass(frozen=True)
class _Plan:
    """What the decorator needs to know of one function's signature, read once."""

    sig: inspect.Signature
    traces: tuple[str, ...]  # parameters that hold a Trace (or a tuple of them)
    logs: tuple[str, ...]  # parameters that hold a parsed launch log
    anns: tuple[str, ...]  # parameters that hold an annotation (ann, ann_b)
    ann: str | None  # the parameter the step options read the annotation from
    ag: str | None  # where the AllGatherOptions go
    groups: tuple[tuple[str, type], ...]  # parameters whose default is an options dataclass (capacity's dims)

    @classmethod
    def of(cls, fn) -> "_Plan":
        sig = inspect.signature(fn)
        ps = sig.parameters

        def text(p):
            return str(p.annotation) if p.annotation is not inspect.Parameter.empty else ""

        traces = tuple(n for n, p in ps.items() if "Trace" in text(p))
        logs = tuple(n for n in ("log", "log_b") if n in ps and "Path" not in text(ps[n]))
        anns = tuple(n for n in ("ann", "ann_b") if n in ps)
        ann = "ann" if "ann" in ps else ("annotation" if "annotation" in ps else None)
        if "ag" in ps and ps["ag"].default is None:
            ag = "ag"
        else:  # ag= is wall's and the exports' other option (which copies count): the objects go to allgather=
            ag = "allgather" if "allgather" in ps else None
        groups = tuple(
            (n, type(p.default))
            for n, p in ps.items()
            if dataclasses.is_dataclass(p.default) and not isinstance(p.default, type)
        )
        return cls(sig, traces, logs, anns, ann, ag, groups)


def options_as_objects(fn):
    """Decorate a public function so that it takes what the CLI takes (see the module's doc): paths for traces and
    logs, an annotation by name as ``annotation=``, the CLI's long options as keywords, which become the objects its
    signature names (``steps=``, ``ag=``, ``dims=``). Its signature (``help()``) is the function's own."""
    plan = _Plan.of(fn)
    takes = plan.sig.parameters
    name = fn.__name__

    order = list(takes)
    read = (*plan.traces, *plan.anns, *plan.logs)  # what a path may be given for
    checked = [(order.index(k), k) for k in read if takes[k].kind != inspect.Parameter.KEYWORD_ONLY]

    # a trace or log the function cannot run without: None there is a wrong type, not "no trace"
    required = frozenset(k for k in (*plan.traces, *plan.logs) if takes[k].default is not None)

    @functools.wraps(fn)
    def call(*args, **kw):
        plain = all(k in takes for k in kw) and all(
            _plain(v := args[i] if i < len(args) else kw.get(k)) and not (v is None and k in required)
            for i, k in checked
        )
        if plain:
            plain = all(_plain(kw[k]) for k in read if k in kw)
        if not plain:
            args, kw = _as_objects(name, plan, args, kw, required)
        return fn(*args, **kw)

    call.__signature__ = plan.sig
    return call


def _plain(value) -> bool:
    """A value the function takes as it is, with nothing to read or check: None, a Trace, an Annotation."""
    from ...annotation.spec import Annotation
    from ...trace import Trace

    return value is None or isinstance(value, (Trace, Annotation)) or getattr(value, "is_run", False)  # load_run's


def _as_objects(name: str, plan: _Plan, args: tuple, kw: dict, required=frozenset()) -> tuple[tuple, dict]:
    """The CLI's spellings as the function's parameters, its paths read."""
    takes = plan.sig.parameters
    kw = dict(kw)
    reading = {k: kw.pop(k) for k in READING if k in kw and k not in takes}
    steps_ann = None  # an annotation that only gives the step options (wall, overlap, layers: no ann parameter)
    for cli, params in SPELLINGS.items():
        if cli in kw and cli not in takes:
            target = next((p for p in params if p in takes), None)
            if target is None and cli == "annotation" and "steps" in takes:
                steps_ann = kw.pop(cli)
                if steps_ann is not None and not isinstance(steps_ann, (str, os.PathLike)):
                    steps_ann = _annotation(name, cli, steps_ann)
                continue
            if target is None:
                raise TypeError(f"{name}() takes no {cli}= (the CLI's --{cli.replace('_', '-')} is another command's)")
            if target in kw:
                raise TypeError(f"{name}(): {cli}= and {target}= are the same option; pass one of them")
            kw[target] = kw.pop(cli)
    for cli, (param, factor) in UNITS.items():
        if cli in kw and cli not in takes and param in takes:
            value = kw.pop(cli)
            kw[param] = None if value is None else int(round(value * factor))
    step_kw = {STEP_FLAGS[k]: kw.pop(k) for k in list(kw) if k in STEP_FLAGS and k not in takes}
    ag_kw = {AG_FLAGS[k]: kw.pop(k) for k in list(kw) if k in AG_FLAGS and k not in takes}
    group_kw = {}
    for param, cls in plan.groups:
        fields = {f.name for f in dataclasses.fields(cls)}
        group_kw[param] = {k: kw.pop(k) for k in list(kw) if k in fields and k not in takes}
    # --graph-annotations: a replay source (docs/replay.md) of every command that takes capture=, set on the trace
    side = kw.pop("graph_annotations") if "graph_annotations" in kw and "capture" in takes else None
    unknown = [k for k in kw if k not in takes]
    if unknown:
        raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}")
    args = _positional(plan, args, kw)
    try:
        bound = plan.sig.bind_partial(*args, **kw)
    except TypeError as exc:
        raise TypeError(f"{name}(): {exc}") from None
    given = bound.arguments
    for k in plan.traces:
        if k in given:
            if given[k] is None and k in required:
                raise ArgumentTypeError(f"{k} must be {TAKES_TRACE}, not None")
            given[k] = _trace(name, k, given[k], reading)
    for k in plan.anns:
        if given.get(k) is not None:
            given[k] = _annotation(name, k, given[k])
    for k in plan.logs:
        if k in given:
            given[k] = _log(name, k, given[k], reading, k in required)
    if side is not None and plan.traces and given.get(plan.traces[0]) is not None:
        from ...ingest.graph_annotations import use_graph_annotations

        use_graph_annotations(given[plan.traces[0]], side)
    if "cache" in takes and "cache" not in given and reading.get("no_cache"):
        given["cache"] = False
    for param, values in group_kw.items():
        if values:
            base = given.get(param, takes[param].default)
            given[param] = dataclasses.replace(base, **values)
    ann = given.get(plan.ann) if plan.ann else steps_ann
    if "steps" in takes and given.get("steps") is None and (step_kw or ann is not None):
        if step_kw.get("min_step_ns") is not None:
            step_kw["min_step_ns"] = int(round(step_kw["min_step_ns"] * 1_000_000))
        from .model import step_options

        given["steps"] = step_options(ann, **step_kw)
    elif step_kw:
        flags = ", ".join(f"{k}=" for k in step_kw)
        if "steps" in takes:
            raise TypeError(f"{name}(): steps= and {flags} are the same options; pass one of them")
        raise TypeError(f"{name}() finds no steps: it takes no {flags}")
    if ag_kw:
        if plan.ag is None:
            raise TypeError(f"{name}() takes no AllGather options ({', '.join(f'{k}=' for k in ag_kw)})")
        if given.get(plan.ag) is not None:
            raise TypeError(f"{name}(): {plan.ag}= and the AllGather flags are the same options; pass one of them")
        given[plan.ag] = AllGatherOptions(
            group_size=ag_kw.get("group_size"), sizes=ag_kw.get("sizes") or (), local_copy=ag_kw.get("local_copy")
        )
    return bound.args, bound.kwargs


def _positional(plan: _Plan, args: tuple, kw: dict) -> tuple:
    """An annotation given by keyword frees its positional place: ``export(trace, "out_dir", annotation="k3")``
    binds "out_dir" to the parameter after ``ann``."""
    ps = list(plan.sig.parameters)
    if not plan.anns or "ann" not in kw or not args:
        return args
    at = ps.index("ann")
    if len(args) <= at:
        return args
    rest = [p for p in ps if p != "ann"]
    for p, value in zip(rest[at : len(args)], args[at:]):
        if p in kw:
            raise TypeError(f"got multiple values for argument {p!r}")
        kw[p] = value
    return args[:at]


def _trace(name: str, param: str, value, reading: dict):
    """A path loaded as the CLI loads it (cached unless no_cache), a Trace as it is, a pair for a pair."""
    from ...trace import Trace

    if value is None or isinstance(value, Trace) or getattr(value, "is_run", False):  # a Run: report, findings
        return value
    if isinstance(value, (str, os.PathLike)):
        from ...ingest import load

        return load(value, cache=not reading.get("no_cache"), cache_dir=reading.get("cache_dir"))
    if isinstance(value, (tuple, list)):
        return tuple(_trace(name, param, v, reading) for v in value)
    raise ArgumentTypeError(f"{param} must be {TAKES_TRACE}, not {type_name(value)}")


def _log(name: str, param: str, value, reading: dict, required: bool):
    """A launch log's path read as the CLI reads it, a parsed log as it is; anything else is one sentence."""
    from ...ingest.sglang_log import SglangLog, read_log

    if isinstance(value, (str, os.PathLike)):
        return read_log(value, patterns=reading.get("patterns") or ())
    if isinstance(value, SglangLog) or (value is None and not required):
        return value
    raise ArgumentTypeError(f"{param} must be {TAKES_LOG}, not {type_name(value)}")


def _annotation(name: str, param: str, value):
    from ...annotation.spec import Annotation

    if isinstance(value, Annotation):
        return value
    if isinstance(value, (str, os.PathLike)):
        return as_annotation(value, name=param)
    raise ArgumentTypeError(f"{param} must be {TAKES_ANNOTATION}, not {type_name(value)}")
