"""The HTML a notebook shows for a :class:`~tracekit.result.Result` (``Result._repr_html_``): the same sections as
the HTML report (``tracekit.render.html``: findings, summary, pictures, tables, warnings) with its styles scoped to
the cell, and each table's first :data:`ROWS` rows. Every string is escaped after control characters are made
visible, so a kernel name cannot inject markup or script. ``result.frames()`` has every row.
"""

from __future__ import annotations

from ..result import Result
from .html import scoped_css, sections

ROWS = 20
SCOPE = ".tracekit-result"


def to_html(result: Result, *, rows: int = ROWS) -> str:
    parts = sections(result, rows=rows, page=False, more="<code>result.frames()[NAME]</code> has every row")
    return f'<div class="tracekit-result"><style>{scoped_css(SCOPE)}</style>{"".join(parts)}</div>'
