"""Turn any :class:`~tracekit.result.Result` into bytes: rich tables, json, csv, md."""
from .formats import FORMATS, emit

__all__ = ["FORMATS", "emit"]
