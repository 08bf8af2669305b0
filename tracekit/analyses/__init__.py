"""Analyses: pure functions from a Trace (and explicit parameters) to a Result."""

from .comm.allgather import allgathers
from .comm.communication import communication
from .comm.exposure import exposure
from .comm.segments import segment_allgathers
from .time.decompose import decompose, temporal
from .time.info import trace_info
from .hardware.kernel_stats import kernel_stats
from .time.overlap import overlap
from .steps.resolve import find_steps, step_windows

__all__ = [
    "segment_allgathers",
    "allgathers",
    "exposure",
    "communication",
    "trace_info",
    "kernel_stats",
    "find_steps",
    "step_windows",
    "decompose",
    "temporal",
    "overlap",
]
