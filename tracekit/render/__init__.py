"""Turn any :class:`~tracekit.result.Result` into text or files: one renderer object per format (``formats``: json,
csv, md, table, html), each drawing the text and owning its format's file writing, for the CLI and
``Result.save`` alike; terminal tables (``terminal``, laid out by ``table_layout``), md (``markdown``), csv
(``csv_text``), the HTML page and the notebook display (``html/``); ``files`` writes outputs whole or not at all (a
directory of files: ``outdir``)."""

from __future__ import annotations

from ..result import Result
from .formats import FORMATS, RENDERERS, SUFFIXES, Renderer, Saved, format_of, renderer, save
from ..errors import TAKES_RESULT, check_argument

__all__ = ["FORMATS", "RENDERERS", "SUFFIXES", "Renderer", "Saved", "emit", "format_of", "renderer", "save"]


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
    check_argument(result, "result", TAKES_RESULT, Result)
    return renderer(fmt, table=table, all_rows=all_rows, width=width, wide=wide).text(result)
