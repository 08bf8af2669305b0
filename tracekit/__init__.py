"""tracekit: where each millisecond of an LLM decode step goes, from torch-profiler traces."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import InputError, MissingDataError, TracekitError  # noqa: E402
from .ingest import load  # noqa: E402
from .trace import IngestReport, Trace  # noqa: E402

__all__ = ["__version__", "load", "Trace", "IngestReport", "TracekitError", "InputError", "MissingDataError"]
