"""Turn any :class:`~tracekit.result.Result` into text: terminal tables (``tables``), json, csv, md (``formats``), the
HTML page (``html``, its parts in ``html_*``); ``files`` writes outputs whole or not at all (a directory of files:
``outdir``), ``notebook`` is the HTML a notebook shows."""

from __future__ import annotations

from ..result import Result
from .formats import FORMATS, to_csv, to_markdown

__all__ = ["FORMATS", "emit"]


def emit(
    result: Result,
    fmt: str,
    *,
    table: str | None = None,
    all_rows: bool = False,
    width: int | None = None,
    wide: bool = False,
) -> str:
    """Render ``result`` as text in ``fmt``: table (for people), json, csv, md or html (a self-contained page).

    ``all_rows`` shows every row in the human formats (table, md), which otherwise show the top rows of long
    tables; json and csv always hold every row. ``wide`` shows kernel names whole in the human formats (table, md),
    which otherwise shorten them into what a person recognises (json and csv always hold the full name). ``width`` is
    the terminal's (default: ``COLUMNS``, the real width, or 100)."""
    if fmt == "json":
        return result.to_json()
    if fmt == "csv":
        return to_csv(result, table)
    if fmt == "md":
        return to_markdown(result, all_rows=all_rows, wide=wide)
    if fmt == "table":
        from .tables import to_text

        return to_text(result, width=width, all_rows=all_rows, wide=wide)
    if fmt == "html":
        from .html import to_html

        return to_html(result)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
