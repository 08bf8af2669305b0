"""Findings for people: a numbered list (title, gain, basis; then how, evidence, what to try and the command), not a
grid of truncated cells; every line wraps at words (nothing is cut, so no number is). Any result's table with the findings columns is drawn this way by ``terminal.to_text``."""

from __future__ import annotations

import pandas as pd

from .human import safe_text, shorter_names, wrap_prose

NEEDED = {
    "rank",
    "title",
    "gain_ms_per_step",
    "gain_pct",
    "gain_gib",
    "basis",
    "how",
    "evidence",
    "suggestion",
    "command",
    "minor",
}
MAJOR_SHOWN = 10  # without --all: the first major findings in full, the rest as one line each
SECTION_SHOWN = 5  # a findings section of another command: the first major ones, one line each


def is_findings(df: pd.DataFrame) -> bool:
    return NEEDED <= set(df.columns)


def _gain(r) -> str:
    if not pd.isna(r["gain_gib"]):
        tok = r.get("gain_tokens")
        return f"{float(r['gain_gib']):.2f} GiB" + ("" if tok is None or pd.isna(tok) else f", {int(tok):,} tokens")
    if pd.isna(r["gain_ms_per_step"]):
        return "no gain estimated"
    pct = "" if pd.isna(r["gain_pct"]) else f", {float(r['gain_pct']):.1f} %"
    return f"{float(r['gain_ms_per_step']):,.3f} ms/step{pct}"


def findings_lines(
    name: str, df: pd.DataFrame, width: int, all_rows: bool, *, detailed: bool = True, wide: bool = False
) -> list[str]:
    """The findings table ``name`` as a numbered list that fits ``width``: in full (``detailed``: the findings
    command) or one line each for the first ones (a section of report or compare). A kernel name too wide for a line
    is shown in its short form unless ``wide`` (``--wide``; json keeps it whole)."""

    def text_of(value) -> str:
        text = safe_text(value)
        return text if wide else shorter_names(text, width - 10)

    major = df[~df["minor"].astype(bool)]
    minor = df[df["minor"].astype(bool)]
    out = wrap_prose(
        safe_text(f"{name} — {len(df)} ({len(major)} major, {len(minor)} minor; gains overlap, so they do not add up)"),
        width,
    )
    if not detailed and not all_rows:
        for _, r in major.head(SECTION_SHOWN).iterrows():
            out += wrap_prose(f"{int(r['rank'])}. {text_of(r['title'])}  [{r['basis']}]", width)
        out += wrap_prose("    (tracekit findings shows each with its evidence and what to try)", width, "    ")
        return out
    full = df if all_rows else major.head(MAJOR_SHOWN)
    for _, r in full.iterrows():
        head = f"{int(r['rank'])}. {text_of(r['title'])}"
        tag = f"  [{_gain(r)}; {r['basis']}{'; minor' if r['minor'] else ''}]"
        out += wrap_prose(head + tag, width)
        for label, key in (("how ", "how"), ("data", "evidence"), ("try ", "suggestion"), ("see ", "command")):
            text = text_of(r[key]) if isinstance(r[key], str) and r[key] else ""
            if text:
                out += wrap_prose(f"    {label}  {text}", width, indent="    ")
    if not all_rows:
        rest = pd.concat([major.iloc[MAJOR_SHOWN:], minor])
        for _, r in rest.iterrows():
            out += wrap_prose(f"{int(r['rank'])}. {text_of(r['title'])}{'  [minor]' if r['minor'] else ''}", width)
        if len(rest):
            out += wrap_prose("    (--all shows every finding in full)", width, "    ")
    return out
