"""Repeated warnings folded for people: a 16-rank run says the same thing of every rank, and 34 lines of it bury
the one warning that differs. Warnings that differ only in their numbers, paths and rank ids are "alike"; a group of
``FOLD_AT`` or more alike is shown as its first warning and "… and N more like it". The terminal (stderr), the
Markdown and the HTML page fold; the JSON keeps every warning (docs/json-contract.md: ``warnings``). A warning that
is another with a rank's context before it (``ranks: rank 0: …``) is the same fact, shown once; stderr wraps each
to the terminal's width (:func:`warning_lines`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FOLD_AT = 3  # two alike warnings are both shown; three or more are folded

_PATH = re.compile(r"(?:[A-Za-z]:)?[\w.+~-]*(?:/[\w.+@=~-]+)+/?")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")


def shape_of(warning: str) -> str:
    """What alike warnings share: the text with paths, numbers and rank ids replaced by placeholders."""
    return _NUMBER.sub("<n>", _PATH.sub("<path>", warning))


@dataclass(frozen=True)
class Folded:
    """One line to show: a warning and how many alike ones it stands for (0: none folded into it)."""

    text: str
    more: int = 0

    @property
    def more_text(self) -> str | None:
        """The line that follows a folded warning, None when nothing was folded."""
        return f"… and {self.more} more like it" if self.more else None


_CONTEXT = re.compile(r"(?:ranks: |rank \d+: )+")  # what a run's part prefixes to a rank's own warning


def same_facts(warnings: list[str]) -> list[str]:
    """``warnings`` without the copies of one fact: a warning that is another one of the list with a rank's context
    before it (``ranks: rank 0: W`` beside ``W``: the reference rank's own warning, said again by the run's ranks
    part) is that warning, shown once. Two ranks' warnings alike but for their rank both stay."""
    have = set(warnings)
    out = []
    for w in dict.fromkeys(warnings):  # an exact repeat, once
        m = _CONTEXT.match(w)
        if m and w[m.end() :] in have:
            continue
        out.append(w)
    return out


def fold_warnings(warnings: list[str], fold_at: int = FOLD_AT) -> list[Folded]:
    """``warnings`` in their order, each fact once (:func:`same_facts`), each group of ``fold_at`` or more alike
    warnings (:func:`shape_of`) shown once, where its first member stood, with the count of the others."""
    warnings = same_facts(list(warnings))
    groups: dict[str, list[str]] = {}
    for w in warnings:
        groups.setdefault(shape_of(w), []).append(w)
    out: list[Folded] = []
    done: set[str] = set()
    for w in warnings:
        key = shape_of(w)
        members = groups[key]
        if len(members) < fold_at:
            out.append(Folded(w))
        elif key not in done:
            done.add(key)
            out.append(Folded(members[0], len(members) - 1))
    return out


def folded_lines(warnings: list[str], fold_at: int = FOLD_AT) -> list[str]:
    """The folded warnings as plain lines: each shown warning, and after a folded one its "… and N more like it"
    (indented with two spaces)."""
    lines = []
    for f in fold_warnings(warnings, fold_at):
        lines.append(f.text)
        if f.more_text:
            lines.append("  " + f.more_text)
    return lines


def warning_lines(warnings: list[str], width: int | None) -> list[str]:
    """The warnings as the terminal's stderr shows them: folded (:func:`fold_warnings`), each ``warning: …`` wrapped
    to ``width`` (None: one line each, as a log wants them) with a number never split from its unit and a path
    folded between its folders (``human.wrap_prose``)."""
    from .human import safe_text, wrap_prose

    out = []
    for f in fold_warnings(warnings):
        text = f"warning: {safe_text(f.text)}"
        out += wrap_prose(text, width) if width else [text]
        if f.more_text:
            out.append("  " + f.more_text)
    return out


__all__ = ["FOLD_AT", "Folded", "fold_warnings", "folded_lines", "same_facts", "shape_of", "warning_lines"]
