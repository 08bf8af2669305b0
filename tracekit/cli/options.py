"""The option groups every command shares, each declared once: the step flags, the cache flags, the output flags.

A command names a group in one line of its signature, ``step_flags: StepFlags = STEP_FLAGS``, and receives one
object: ``tracekit.cli.groups.App`` (the typer app of every command) spreads the group's options into the command's
signature in that place, so ``--help`` lists them there, and hands the command the object the group makes of them:

- ``STEP_FLAGS`` (``--step-name``, ``--min-step-ms``, ``--phase``, ``--step-source``, ``--steps-file``) and
  ``RANK_STEP_FLAGS`` (the same but ``--phase``: the ranks of a run are matched over every step) make a
  :class:`StepFlags`, whose ``options(ann)`` is the one ``StepOptions`` the command's analyses share;
- ``CACHE`` (``--no-cache``, ``--cache-dir``) and ``NO_CACHE`` (``--no-cache`` only) make a :class:`CacheFlags`,
  the ``cache=`` and ``cache_dir=`` that ``tracekit.load`` and the sweeps take;
- ``REPLAY`` (``--capture``, ``--eager-map``, ``--graph-annotations``) makes a :class:`ReplayFlags`, the
  ``capture=``, ``eager_map=`` and ``graph_annotations=`` keywords of the analyses that attribute graph-replayed
  kernels (docs/replay.md);
- ``OUTPUT`` (``--format``, ``--out``, ``--table``, ``--full-paths``) and ``PRINTED`` (``--format``, ``--table``,
  ``--full-paths``: the command's own ``--out`` writes its files) make an :class:`Output`, which writes a result
  (``_output``).

Like every module here, it imports typer, the standard library and the CLI's own modules at its top, and the API
inside the functions that call it: ``--help`` loads no pandas.
"""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from .common import Fmt, _load, _output
from .groups import OptionGroup


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


def gbps_or_bus(param: typer.CallbackParam, value: Optional[str]) -> Optional[str]:
    """``--hbm-gbps``: a finite positive number of GB/s, or ``bus``; anything else is a usage error (exit 2)."""
    if value is None or value.strip().lower() == "bus":
        return value
    try:
        number = float(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is neither a number of GB/s nor 'bus'") from None
    if not (math.isfinite(number) and number > 0):
        raise typer.BadParameter(f"{value!r} is not a bandwidth: give a finite number of GB/s above 0, or 'bus'")
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
CaptureOpt = Annotated[
    Optional[list[Path]],
    typer.Option(
        "--capture",
        help="A capture trace of the CUDA/HIP graphs the trace replays, or a folder of them (repeatable; default:"
        " capture_traces/ beside the trace); docs/replay.md.",
    ),
]
EagerMapOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--eager-map", help="An eager trace of the same model to attribute replayed kernels (not yet: refused)."
    ),
]
GraphAnnotationsOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--graph-annotations",
        help="PyTorch's CUDA graph kernel annotations saved as JSON (graph node id -> module FQN; default:"
        " kernel_annotations_rank<R>_*.json beside the trace); docs/replay.md.",
    ),
]
TableOpt = Annotated[Optional[str], typer.Option("--table", help="csv: the one table to write (default: the first).")]
FullPathsOpt = Annotated[
    bool,
    typer.Option(
        "--full-paths",
        help="html: show paths as given (default: relative to the page's folder, or the file name alone, in the"
        " page and its json sidecar; docs/html.md).",
    ),
]


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
        return _load(trace, not self.cache, self.cache_dir)


@dataclasses.dataclass(frozen=True)
class Output:
    """``--format``, ``--out``, ``--table`` and ``--full-paths``: where and how a command's result is written."""

    format: Fmt = Fmt.table
    out: Optional[Path] = None
    table: Optional[str] = None
    full_paths: bool = False

    def write(self, result) -> None:
        """Warnings to stderr, the result to stdout or ``--out`` (``tracekit.cli.common._output``)."""
        _output(result, self.format, self.out, self.table, full_paths=self.full_paths)


@dataclasses.dataclass(frozen=True)
class ReplayFlags:
    """``--capture`` (repeatable) and ``--eager-map``: where the ops of graph-replayed kernels come from, as the
    ``capture=`` and ``eager_map=`` keywords the API takes."""

    capture: tuple[Path, ...] = ()
    eager_map: Optional[Path] = None
    graph_annotations: Optional[Path] = None

    def keywords(self) -> dict[str, Any]:
        return {
            "capture": list(self.capture) or None,
            "eager_map": self.eager_map,
            **({"graph_annotations": self.graph_annotations} if self.graph_annotations is not None else {}),
        }


def _value(v: Any) -> Any:
    return v.value if isinstance(v, Enum) else v


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
OUTPUT = OptionGroup(
    Output,
    ("format", FormatOpt, Fmt.table),
    ("out", OutOpt, None),
    ("table", TableOpt, None),
    ("full_paths", FullPathsOpt, False),
)
REPLAY = OptionGroup(
    lambda capture=None, eager_map=None, graph_annotations=None: ReplayFlags(
        tuple(capture or ()), eager_map, graph_annotations
    ),
    ("capture", CaptureOpt, None),
    ("eager_map", EagerMapOpt, None),
    ("graph_annotations", GraphAnnotationsOpt, None),
)
PRINTED = OptionGroup(
    Output, ("format", FormatOpt, Fmt.table), ("table", TableOpt, None), ("full_paths", FullPathsOpt, False)
)


# The ranks a run had (issue 40), shared by the commands that read a run: imbalance, report RUN_DIR, findings RUN_DIR
WorldSizeOpt = Annotated[
    Optional[int],
    typer.Option(
        "--world-size",
        min=1,
        help="Ranks the run had (default: the traces' distributedInfo, else the highest rank + 1): the ranks"
        " without a file are named and the imbalance marked a lower bound.",
    ),
]
