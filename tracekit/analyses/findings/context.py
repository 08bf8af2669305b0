"""The one input every findings source of a trace reads: :class:`Context` (the trace, its steps, the hardware
profile, the launch log and the options, resolved once by :func:`.trace_findings.findings`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from ...annotation import Annotation
from ...data import record_hint
from ...gpu_specs import HardwareProfile
from ...trace import Trace
from ..options import AllGatherOptions
from .rules import words


@dataclass
class Context:
    """What every source of one trace reads: the trace, its steps and the options, resolved once."""

    trace: Trace
    ann: Annotation | None
    steps: Any
    step_ns: float
    hw: HardwareProfile | None
    log: Any
    ag: AllGatherOptions  # the user's merged with the annotation's (AllGatherOptions.with_annotation)
    sms: int | None
    bs: float | None = None
    warnings: list[str] = field(default_factory=list)
    cache: dict = field(default_factory=dict)  # what several sources share, computed once (the kernel arrays)

    def words(self, kind: str, **values) -> dict[str, str]:
        meta = getattr(self.trace, "meta", None) or {}
        return words(
            kind,
            trace=self.trace.path,
            ann_opt=f" -a {shlex.quote(self.ann.ref)}" if self.ann is not None else "",
            log=getattr(self.log, "path", "LOG"),
            # what records what a finding's words advise recording, in the words of the trace's profiler
            hint_launches=record_hint(meta, "launches"),
            hint_shapes=record_hint(meta, "shapes"),
            **values,
        )


__all__ = ["Context"]
