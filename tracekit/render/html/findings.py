"""The findings on the page: a card per finding, ranked, the minor ones collapsed after the major ones."""

from __future__ import annotations

import pandas as pd

from ...result import plain_value
from .tables import esc, num


def _finding_html(r: dict) -> str:
    if num(r.get("gain_gib")) is not None:
        gain = f"{float(r['gain_gib']):.2f} GiB"
    elif num(r.get("gain_ms_per_step")) is not None:
        pct = num(r.get("gain_pct"))
        gain = f"{float(r['gain_ms_per_step']):.3f} ms/step" + (f" ({pct:.1f} %)" if pct is not None else "")
    else:
        gain = "no gain estimated"
    minor = bool(plain_value(r.get("minor")))
    title = str(r.get("title") or "")
    return (
        f'<div class="finding{" minor" if minor else ""}"><span class="gain">{esc(gain)}</span>'
        f'<h3 title="{esc(title)}">{int(r["rank"])}. {esc(title)}<span class="tag">{esc(r.get("basis") or "")}'
        f"</span>{'<span class=tag>minor</span>' if minor else ''}</h3>"
        f"<p><b>How:</b> {esc(r.get('how') or '')}</p><p><b>Evidence:</b> {esc(r.get('evidence') or '')}</p>"
        f"<p><b>Try:</b> {esc(r.get('suggestion') or '')}</p>"
        f"<p><b>See:</b> <code>{esc(r.get('command') or '')}</code></p></div>"
    )


def findings_html(df: pd.DataFrame) -> str:
    """The findings, ranked: the major ones as cards, the minor ones (``minor``: under the thresholds) behind one
    closed ``<details>`` after them. A long name wraps inside its card (its full text on hover)."""
    rows = df.to_dict("records")
    major = [r for r in rows if not bool(plain_value(r.get("minor")))]
    minor = [r for r in rows if bool(plain_value(r.get("minor")))]
    out = "".join(_finding_html(r) for r in major)
    if not major:
        out += '<p class="note">no finding above the thresholds (docs/findings.md: --min-pct)</p>'
    if minor:
        out += (
            f'<details class="minor-findings"><summary>{len(minor):,} minor finding{"s" if len(minor) != 1 else ""}'
            " (each under the thresholds)</summary>" + "".join(_finding_html(r) for r in minor) + "</details>"
        )
    return out
