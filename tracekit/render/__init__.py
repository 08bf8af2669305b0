"""Turn any :class:`~tracekit.result.Result` into text: rich tables (``tables``), json, csv, md (``formats``)."""
from __future__ import annotations

import json

from ..result import Result
from .formats import FORMATS, to_csv, to_json_obj, to_markdown

__all__ = ["FORMATS", "emit"]


def emit(result: Result, fmt: str, *, table: str | None = None) -> str:
    """Render ``result`` as text in ``fmt``: table (for people), json, csv or md."""
    if fmt == "json":
        return json.dumps(to_json_obj(result), indent=1, ensure_ascii=False) + "\n"
    if fmt == "csv":
        return to_csv(result, table)
    if fmt == "md":
        return to_markdown(result)
    if fmt == "table":
        from .tables import to_text

        return to_text(result)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
