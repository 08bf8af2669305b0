"""The step finder's types and data: the options every command resolves once, the dialects of
``tracekit/data/steps.json``, and :class:`Steps` (docs/steps.md)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from ...launch_apis import gpu_work_pattern, graph_launch_pattern
from ... import intervals as iv
from ...annotation import as_annotation
from ...errors import DataFileError, InputError, UsageError
from ...regexes import bounded

PHASES = ("decode", "prefill", "verify", "draft", "mixed", "idle", "unknown")
PHASE_CHOICES = ("auto", "all") + PHASES
SOURCE_CHOICES = ("auto", "gpu", "cpu")
SOURCES = ("gpu_annotation", "cpu_launch_window", "whole_trace")
# the columns of format 1 first, in their order; then what steps/2 added
STEP_COLUMNS = ["step", "name", "start_ns", "dur_ns", "end_ns", "bs", "source", "phase", "tokens", "kernels"]
HEALTH_COLUMNS = ["step", "check", "ok", "detail"]
DEFAULT_MIN_STEP_NS = 0  # empty markers are found by content; the floor is only a user filter
MAX_STEP_NS = 86_400 * 10**9  # a floor beyond a day is a typo (and 1e308 ms is no int64)


def median_ns(values) -> int | float | None:
    """Median as an int when it is a whole number of ns (it is .5 for an even count of odd sums)."""
    arr = np.asarray(values)
    if arr.size == 0:
        return None
    m = float(np.median(arr))
    return int(m) if m.is_integer() else m


# --------------------------------------------------------------------------------------------------
# options: the one place where flags and an annotation become the step parameters
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepOptions:
    """What every command asks of the step finder (hashable: the cache key)."""

    name: str | None = None  # a marker name, exact or a regex (full match); None = the dialects
    min_step_ns: int = DEFAULT_MIN_STEP_NS  # keep steps longer than this (a user filter)
    phase: str = "auto"  # auto = decode steps when there are any, else all
    source: str = "auto"  # auto | gpu | cpu
    steps_file: str | None = None  # a user dialect file, tried before the shipped dialects
    strict: bool = True  # False: the name came from an annotation, and the dialects are tried when it is absent

    def as_params(self) -> dict:
        """The ``params`` entries of a result that say how the steps were found (the same in every command)."""
        return {
            "step_name": self.name,
            "min_step_ns": self.min_step_ns,
            "phase": self.phase,
            "step_source": self.source,
            "steps_file": self.steps_file,
        }

    @staticmethod
    def given_params(steps: "StepOptions | None", ann=None) -> dict:
        """The step options as the user gave them, the ``params`` of a sweep: None where the annotation's (or the
        default) applies — no step name of its own (``strict``), the annotation's floor — and every field None when
        ``steps`` is None."""
        if steps is None:
            return {"step_name": None, "min_step_ns": None, "phase": None, "step_source": None, "steps_file": None}
        floor = step_options(ann).min_step_ns
        return {
            "step_name": steps.name if steps.strict else None,
            "min_step_ns": None if steps.min_step_ns == floor else steps.min_step_ns,
            "phase": steps.phase,
            "step_source": steps.source,
            "steps_file": steps.steps_file,
        }


def step_options(
    ann=None,
    *,
    step_name: str | None = None,
    min_step_ns: int | None = None,
    phase: str | None = None,
    source: str | None = None,
    steps_file=None,
) -> StepOptions:
    """Explicit options override the annotation's ``step`` section, which overrides the defaults. ``ann``: an
    Annotation, or a name or path (:func:`tracekit.annotation.as_annotation`)."""
    spec = getattr(as_annotation(ann), "step", None)
    name = step_name if step_name is not None else (spec.name if spec else None)
    if min_step_ns is None:
        min_step_ns = int(round(spec.min_ms * 1e6)) if spec else DEFAULT_MIN_STEP_NS
    phase = phase or "auto"
    source = source or "auto"
    if phase not in PHASE_CHOICES:
        raise UsageError(f"--phase must be one of {', '.join(PHASE_CHOICES)}, not {phase!r}")
    if source not in SOURCE_CHOICES:
        raise UsageError(f"--step-source must be one of {', '.join(SOURCE_CHOICES)}, not {source!r}")
    if min_step_ns != min_step_ns or min_step_ns < 0 or min_step_ns > MAX_STEP_NS:  # NaN, negative, beyond a day
        raise UsageError(
            f"--min-step-ms must be between 0 and {MAX_STEP_NS // 1_000_000:,} ms (a day), not {min_step_ns / 1e6:g}"
        )
    return StepOptions(
        name=name,
        min_step_ns=int(min_step_ns),
        phase=phase,
        source=source,
        steps_file=str(steps_file) if steps_file is not None else None,
        strict=step_name is not None,
    )


# --------------------------------------------------------------------------------------------------
# dialects (data)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    name: str
    label: str
    pattern: re.Pattern
    kinds: tuple[str, ...]
    phase: str | None = None
    modes: tuple[tuple[str, str], ...] = ()

    def fields(self, m: re.Match) -> tuple[str, int | None, int | None]:
        """(phase, bs, tokens) of a marker name this dialect matched."""
        g = {k: v for k, v in m.groupdict().items() if v is not None}
        num = {k: int(v) for k, v in g.items() if v.isdigit()}
        bs, tokens, phase = num.get("bs"), num.get("tokens"), self.phase
        if "mode" in g:
            phase = dict(self.modes).get(g["mode"], "unknown")
        if "prefill_n" in num or "decode_n" in num:
            p, d = num.get("prefill_n", 0), num.get("decode_n", 0)
            phase = "mixed" if p and d else "prefill" if p else "decode" if d else "idle"
            bs = p + d if bs is None else bs
        if tokens is None and ("prefill_tokens" in num or "decode_tokens" in num):
            tokens = num.get("prefill_tokens", 0) + num.get("decode_tokens", 0)
        return phase or "unknown", bs, tokens


@dataclass(frozen=True)
class StepRules:
    dialects: tuple[Dialect, ...]
    empty_fraction: float
    gpu_cover_min: float
    launch_kinds: tuple[str, ...]
    graph_launch: re.Pattern
    overlap_ns: int
    gpu_launch: re.Pattern = re.compile("^(cudaLaunch|cuLaunch|hipLaunch)")  # runtime calls that put work on the GPU
    capture: re.Pattern = re.compile("^cudaStreamBeginCapture")  # runtime calls of a graph capture
    unrecorded_max: float = 0.01  # share of GPU launches with no GPU record above which steps are not trusted

    def dialect_of(self, name: str) -> Dialect | None:
        """The dialect whose pattern matches this marker name whole (the annotation's name is often one)."""
        return next((d for d in self.dialects if d.pattern.fullmatch(name)), None)


def _dialects(doc: dict, src: str, user: bool = False) -> list[Dialect]:
    out = []
    for i, d in enumerate(doc.get("dialects", [])):
        try:
            kinds = tuple(d.get("kinds", ["gpu_annotation", "cpu_annotation"]))
            bad = [k for k in kinds if k not in ("gpu_annotation", "cpu_annotation")]
            phase = d.get("phase")
            modes = tuple((str(k), str(v)) for k, v in d.get("modes", {}).items())
            wrong = [p for p in [phase, *(v for _, v in modes)] if p is not None and p not in PHASES]
            if bad or wrong:
                raise ValueError(f"unknown kind(s) {bad}" if bad else f"unknown phase(s) {wrong}")
            pattern = (
                bounded(d["pattern"], f"{src}: $.dialects[{i}].pattern", DataFileError)
                if user
                else re.compile(d["pattern"])
            )  # a user's pattern runs time-bounded (tracekit.regexes)
            out.append(Dialect(str(d["name"]), str(d.get("label", d["name"])), pattern, kinds, phase, modes))
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise DataFileError(f"{src}: $.dialects[{i}] is invalid ({exc}); see docs/steps.md") from exc
    return out


@lru_cache(maxsize=8)
def step_rules(steps_file: str | None = None) -> StepRules:
    """The shipped dialects, with a user file's dialects (tried first) when given."""
    src = "tracekit/data/steps.json"
    doc = json.loads(resources.files("tracekit.data").joinpath("steps.json").read_text(encoding="utf-8"))
    dialects = _dialects(doc, src)
    if steps_file:
        path = Path(steps_file)
        try:
            user = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"{path}: cannot read the step dialect file ({exc.strerror or exc})") from exc
        except ValueError as exc:
            raise DataFileError(f'{path}: not JSON ({exc}); a step dialect file is {{"dialects": [...]}}') from exc
        if not isinstance(user, dict):
            raise DataFileError(f'{path}: a step dialect file is a JSON object {{"dialects": [...]}}')
        dialects = _dialects(user, str(path), user=True) + dialects
    return StepRules(
        tuple(dialects),
        float(doc["empty_fraction"]),
        float(doc["gpu_cover_min"]),
        tuple(doc["launch_runtime_kinds"]),
        graph_launch_pattern(),
        int(doc["same_stream_overlap_ns"]),
        gpu_work_pattern(),
        re.compile(doc["capture"]),
        float(doc["unrecorded_max"]),
    )


# --------------------------------------------------------------------------------------------------
# the result
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Steps:
    """Step windows (``table`` has STEP_COLUMNS), how they were found, and whether they can be trusted."""

    table: pd.DataFrame
    marker: str  # the dialect's label, the user's name, or "whole trace"
    match: str  # exact | regex | a dialect name | whole_trace | user
    options: StepOptions = StepOptions()
    candidates: int = 0  # marker spans seen
    empty: int = 0  # marker spans that held no step
    below_floor: int = 0  # steps not longer than min_step_ns
    phases: dict = field(default_factory=dict)  # steps per phase before the phase selection
    health: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=HEALTH_COLUMNS))
    warnings: list[str] = field(default_factory=list)

    @property
    def min_step_ns(self) -> int:
        return self.options.min_step_ns

    @property
    def starts(self) -> np.ndarray:
        return self.table["start_ns"].to_numpy(np.int64)

    @property
    def ends(self) -> np.ndarray:
        return self.table["end_ns"].to_numpy(np.int64)

    @property
    def trustworthy(self) -> bool:
        return bool(self.health["ok"].all()) if len(self.health) else True

    @property
    def reasons(self) -> list[str]:
        bad = self.health[~self.health["ok"].astype(bool)]
        out: list[str] = []
        for check, grp in bad.groupby("check", sort=False):
            steps = sorted(s for s in grp["step"].tolist() if s >= 0)
            where = f"step(s) {_span_list(steps)}: " if steps else ""
            out.append(f"{check}: {where}{grp['detail'].iloc[0]}")
        return out

    def step_of(self, times) -> np.ndarray:
        """The step each time falls in (its start, usually), -1 outside every step: the one rule for that."""
        k = iv.window_of(times, self.starts, self.ends)
        return np.where(k >= 0, self.table["step"].to_numpy(np.int64)[np.clip(k, 0, None)], -1)

    @classmethod
    def from_table(cls, table: pd.DataFrame, *, marker: str = "user") -> "Steps":
        """Steps a user made (a table with start_ns and end_ns, or dur_ns): for notebooks."""
        if "start_ns" not in table or not ({"end_ns", "dur_ns"} & set(table.columns)):
            raise UsageError("steps= needs a table with start_ns and end_ns (or dur_ns) columns, in int64 ns")
        t = table.sort_values("start_ns", kind="stable").reset_index(drop=True)
        start = t["start_ns"].to_numpy(np.int64)
        end = t["end_ns"].to_numpy(np.int64) if "end_ns" in t else start + t["dur_ns"].to_numpy(np.int64)
        out = pd.DataFrame(
            {
                "step": np.arange(len(t), dtype=np.int64),
                "name": t["name"].astype(str).to_numpy() if "name" in t else marker,
                "phase": t["phase"].to_numpy() if "phase" in t else "unknown",
                "bs": pd.array(t["bs"] if "bs" in t else [None] * len(t), dtype="Int64"),
                "tokens": pd.array(t["tokens"] if "tokens" in t else [None] * len(t), dtype="Int64"),
                "start_ns": start,
                "dur_ns": end - start,
                "end_ns": end,
                "source": marker,
                "kernels": pd.array([None] * len(t), dtype="Int64"),
            }
        )
        return cls(out[STEP_COLUMNS], marker=marker, match="user", candidates=len(out))


def _span_list(steps: list[int]) -> str:
    shown = ", ".join(str(s) for s in steps[:8])
    return shown + (f", … ({len(steps)} in all)" if len(steps) > 8 else "")
