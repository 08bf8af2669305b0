"""Analyses: pure functions from a Trace (and explicit parameters) to a Result."""
from .info import trace_info
from .kernels import kernel_stats

__all__ = ["trace_info", "kernel_stats"]
