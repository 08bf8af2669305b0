"""Rich tables for people (not a contract: scripts use --format json or csv)."""
from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from ..result import Result
from .formats import _human_frame, _human_value


def to_text(result: Result, width: int = 160, color: bool = False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color, soft_wrap=False)
    if result.summary:
        t = Table(title=f"tracekit {result.command}", show_header=False, title_justify="left")
        t.add_column("key", style="bold")
        t.add_column("value")
        for k, v in result.summary.items():
            t.add_row(k, _human_value(k, v))
        console.print(t)
    for name, df in result.tables.items():
        headers, rows = _human_frame(df, max_chars=70)
        t = Table(title=name, title_justify="left")
        for h in headers:
            t.add_column(h, overflow="fold", justify="right" if df[h].dtype.kind in "iuf" else "left")
        for r in rows:
            t.add_row(*r)
        console.print(t)
    return buf.getvalue()
