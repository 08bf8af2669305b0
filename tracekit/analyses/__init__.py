"""Analyses: pure functions from a Trace (and explicit parameters) to a Result."""
from .allgather import allgather_result, communication, exposure, segment_allgathers
from .decompose import decompose, temporal
from .info import trace_info
from .kernels import kernel_stats
from .overlap import overlap
from .steps import find_steps, steps_result

__all__ = ["segment_allgathers", "allgather_result", "exposure", "communication", "trace_info", "kernel_stats", "find_steps", "steps_result", "decompose", "temporal", "overlap"]
