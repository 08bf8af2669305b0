"""The HTML a notebook shows for a :class:`~tracekit.result.Result` (``Result._repr_html_``).

Plain HTML tables — the summary, then each table's first :data:`ROWS` rows — with the same units and relative
times as the terminal (``human.py``). Every string is HTML-escaped after control characters are made visible, so a
kernel name cannot inject markup or script. ``result.frames()`` has every row.
"""
from __future__ import annotations

import html

from ..result import Result, table_rows
from .human import column, display_frame, label_of, origin_of, safe_text, value_text

ROWS = 20


def _e(text: str) -> str:
    return html.escape(safe_text(text), quote=True)


def to_html(result: Result, *, rows: int = ROWS) -> str:
    origin = origin_of(result)
    out = [f"<div class=\"tracekit-result\"><p><b>tracekit {_e(result.command)}</b> <code>{_e(result.schema)}</code>"
           "</p>"]
    if result.summary:
        out.append("<table><thead><tr><th>key</th><th>value</th></tr></thead><tbody>")
        out += [f"<tr><td>{_e(label_of(k, result.summary))}</td><td>{_e(value_text(k, v, origin))}</td></tr>"
                for k, v in result.summary.items()]
        out.append("</tbody></table>")
    for name, df in result.tables.items():
        n = len(df)
        out.append(f"<p><b>{_e(name)}</b> ({n:,} row{'s' if n != 1 else ''})</p>")
        if not n:
            continue
        df = display_frame(df)
        records = table_rows(df, spread=False)
        cols = [column(c, [r[c] for r in records], origin) for c in df.columns]
        out.append("<table><thead><tr>" + "".join(f"<th>{_e(c.header)}</th>" for c in cols) + "</tr></thead><tbody>")
        for r in records[:rows]:
            out.append("<tr>" + "".join(
                f"<td style=\"text-align:{'right' if c.numeric else 'left'}\">{_e(c.fmt(r[c.name]))}</td>"
                for c in cols) + "</tr>")
        out.append("</tbody></table>")
        if n > rows:
            out.append(f"<p><i>… {n - rows:,} more rows: <code>result.frames()[{_e(repr(name))}]</code> has every"
                       " row</i></p>")
    if origin is not None:
        out.append(f"<p><i>{_e(origin.note())}</i></p>")
    if result.warnings:
        out.append("<p><b>warnings</b></p><ul>" + "".join(f"<li>{_e(w)}</li>" for w in result.warnings) + "</ul>")
    out.append("</div>")
    return "\n".join(out)
