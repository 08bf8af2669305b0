"""The option groups every command shares, each declared once: the step flags, the cache flags, the output flags.

A command names a group in one line of its signature, ``step_flags: StepFlags = STEP_FLAGS``, and receives one
object; :class:`App` (the typer app of ``tracekit/cli/common.py`` and of every command group) spreads the group's
options into the command's signature in that place, so ``--help`` lists them there, parses them as its own options,
and hands the command the object the group makes of them:

- ``STEP_FLAGS`` (``--step-name``, ``--min-step-ms``, ``--phase``, ``--step-source``, ``--steps-file``) and
  ``RANK_STEP_FLAGS`` (the same but ``--phase``: the ranks of a run are matched over every step) make a
  :class:`StepFlags`, whose ``options(ann)`` is the one ``StepOptions`` the command's analyses share;
- ``CACHE`` (``--no-cache``, ``--cache-dir``) and ``NO_CACHE`` (``--no-cache`` only) make a :class:`CacheFlags`,
  the ``cache=`` and ``cache_dir=`` that ``tracekit.load`` and the sweeps take;
- ``OUTPUT`` (``--format``, ``--out``, ``--table``) and ``PRINTED`` (``--format``, ``--table``: the command's own
  ``--out`` writes its files) make an :class:`Output`, which writes a result (``_output``).

This module imports typer and the standard library only: ``--help`` loads no pandas.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer


class Fmt(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    md = "md"
    html = "html"


class PhaseChoice(str, Enum):
    auto = "auto"
    all = "all"
    decode = "decode"
    prefill = "prefill"
    verify = "verify"
    draft = "draft"
    mixed = "mixed"
    idle = "idle"
    unknown = "unknown"


class SourceChoice(str, Enum):
    auto = "auto"
    gpu = "gpu"
    cpu = "cpu"


MAX_STEP_MS = 9.2e12  # int64 nanoseconds, in ms: a longer filter cannot be a time tracekit holds


def _step_ms(value: Optional[float]) -> Optional[float]:
    """--min-step-ms is a finite number of ms that fits int64 ns (1e308 or nan is a usage error here, not later)."""
    if value is not None and not (0 <= value <= MAX_STEP_MS):  # nan fails both comparisons
        raise typer.BadParameter(
            f"{value!r} is not a step length: give milliseconds from 0 to {MAX_STEP_MS:.3g}", param_hint="--min-step-ms"
        )
    return value


StepNameOpt = Annotated[
    Optional[str],
    typer.Option(
        "--step-name",
        help="The annotation that marks a step: its exact name, or a regex matching whole names"
        " (default: the dialects of tracekit/data/steps.json, in order; docs/steps.md).",
    ),
]
MinStepOpt = Annotated[
    Optional[float],
    typer.Option(
        "--min-step-ms",
        min=0,
        callback=_step_ms,
        help="Keep only steps longer than this, in ms (a filter; default: the annotation's"
        " step.min_ms, else 0). Empty markers are dropped by their content anyway.",
    ),
]
PhaseOpt = Annotated[
    PhaseChoice,
    typer.Option(
        "--phase",
        help="Which steps: decode, prefill, verify, draft, mixed, idle, unknown or all (default auto:"
        " the decode steps when there are any, else all).",
    ),
]
StepSourceOpt = Annotated[
    SourceChoice,
    typer.Option(
        "--step-source",
        help="Step windows from GPU marker spans (gpu), from the GPU work launched inside CPU marker"
        " spans (cpu), or auto: the GPU span unless it covers under half of that work.",
    ),
]
StepsFileOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--steps-file", help="A JSON file of extra step dialects, tried before the shipped ones (docs/steps.md)."
    ),
]
NoCacheOpt = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        help="Neither read nor write the cache (of traces already read, and of report and findings results).",
    ),
]
CacheDirOpt = Annotated[
    Optional[Path],
    typer.Option("--cache-dir", help="Cache directory (default $TRACEKIT_CACHE_DIR or ~/.cache/tracekit)."),
]
FormatOpt = Annotated[
    Fmt,
    typer.Option(
        "--format",
        "-f",
        help="Output format: table (for people), json, csv, md, or html (one self-contained page; with"
        " --out FILE.html the -f json document is written beside it as FILE.json).",
    ),
]
OutOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--out",
        "-o",
        help="Write to this file instead of stdout; its folder must exist. csv: a name with a suffix"
        " (x.csv) is one file (the first table, or --table); a name without one is a folder"
        " (created) with one file per table.",
    ),
]
TableOpt = Annotated[Optional[str], typer.Option("--table", help="csv: the one table to write (default: the first).")]


@dataclasses.dataclass(frozen=True)
class StepFlags:
    """The five step flags as given; :meth:`options` resolves them with an annotation's defaults."""

    step_name: Optional[str] = None
    min_step_ms: Optional[float] = None
    phase: str = "auto"
    step_source: str = "auto"
    steps_file: Optional[Path] = None

    def options(self, ann=None):
        """The flags + the annotation's defaults → the one StepOptions every analysis of the command shares."""
        from ..analyses.steps.resolve import step_options

        return step_options(
            ann,
            step_name=self.step_name,
            min_step_ns=int(round(self.min_step_ms * 1_000_000)) if self.min_step_ms is not None else None,
            phase=self.phase,
            source=self.step_source,
            steps_file=self.steps_file,
        )

    def of_ranks(self):
        """The StepOptions of a run's ranks (``tracekit imbalance``): every phase, no annotation."""
        return dataclasses.replace(self, phase="all").options(None)


@dataclasses.dataclass(frozen=True)
class CacheFlags:
    """``--no-cache`` and ``--cache-dir`` as the keywords ``tracekit.load`` takes."""

    cache: bool = True
    cache_dir: Optional[Path] = None

    def load(self, trace: Optional[Path]):
        """The trace (the bundled sample when None), read through the cache unless ``--no-cache``."""
        from .common import _load

        return _load(trace, not self.cache, self.cache_dir)


@dataclasses.dataclass(frozen=True)
class Output:
    """``--format``, ``--out`` and ``--table``: where and how a command's result is written."""

    format: Fmt = Fmt.table
    out: Optional[Path] = None
    table: Optional[str] = None

    def write(self, result) -> None:
        """Warnings to stderr, the result to stdout or ``--out`` (``tracekit.cli.common._output``)."""
        from .common import _output

        _output(result, self.format, self.out, self.table)


def _value(v: Any) -> Any:
    return v.value if isinstance(v, Enum) else v


class OptionGroup:
    """Options declared once, taken by a command as one object: ``members`` are (name, declaration, default) in the
    order ``--help`` lists them, ``make`` turns their parsed values (keywords) into the object."""

    def __init__(self, make: Callable[..., Any], *members: tuple[str, Any, Any]):
        self.make, self.members = make, members

    def with_option(self, name: str, declaration: Any, default: Any = None) -> OptionGroup:
        """The group with member ``name`` declared otherwise (its own help, say)."""
        return OptionGroup(self.make, *((n, declaration, default) if n == name else (n, d, v) for n, d, v in self))

    def __iter__(self):
        return iter(self.members)

    def parameters(self) -> list[inspect.Parameter]:
        return [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=d, default=v) for n, d, v in self]


STEP_FLAGS = OptionGroup(
    lambda **kw: StepFlags(**{k: _value(v) for k, v in kw.items()}),
    ("step_name", StepNameOpt, None),
    ("min_step_ms", MinStepOpt, None),
    ("phase", PhaseOpt, PhaseChoice.auto),
    ("step_source", StepSourceOpt, SourceChoice.auto),
    ("steps_file", StepsFileOpt, None),
)
RANK_STEP_FLAGS = OptionGroup(
    lambda **kw: STEP_FLAGS.make(phase="all", **kw), *(m for m in STEP_FLAGS if m[0] != "phase")
)
CACHE = OptionGroup(
    lambda no_cache=False, cache_dir=None: CacheFlags(cache=not no_cache, cache_dir=cache_dir),
    ("no_cache", NoCacheOpt, False),
    ("cache_dir", CacheDirOpt, None),
)
NO_CACHE = OptionGroup(CACHE.make, ("no_cache", NoCacheOpt, False))
OUTPUT = OptionGroup(Output, ("format", FormatOpt, Fmt.table), ("out", OutOpt, None), ("table", TableOpt, None))
PRINTED = OptionGroup(Output, ("format", FormatOpt, Fmt.table), ("table", TableOpt, None))


def with_groups(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as typer sees it: each parameter whose default is an :class:`OptionGroup` replaced by the group's
    options, in its place; called with them parsed, it calls ``fn`` with the group's object instead."""
    sig = inspect.signature(fn, eval_str=True)
    groups = {n: p.default for n, p in sig.parameters.items() if isinstance(p.default, OptionGroup)}
    if not groups:
        return fn
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        params += groups[p.name].parameters() if p.name in groups else [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)]

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        for name, group in groups.items():
            kwargs[name] = group.make(**{n: kwargs.pop(n) for n, _, _ in group})
        return fn(**kwargs)

    command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


class App(typer.Typer):
    """A typer app whose commands may take option groups (:func:`with_groups`); the command functions stay as
    written (callable with the groups' objects)."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        register = super().command(*args, **kwargs)

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            register(with_groups(fn))
            return fn

        return decorator
