"""Repeated warnings folded for people: a 16-rank run says the same thing of every rank, and 34 lines of it bury
the one warning that differs. Warnings that differ only in their numbers, paths and rank ids are "alike"; a group of
``FOLD_AT`` or more alike is shown as its first warning and "… and N more like it". The terminal (stderr), the
Markdown and the HTML page fold; the JSON keeps every warning (docs/json-contract.md: ``warnings``).
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


def fold_warnings(warnings: list[str], fold_at: int = FOLD_AT) -> list[Folded]:
    """``warnings`` in their order, each group of ``fold_at`` or more alike warnings (:func:`shape_of`) shown once,
    where its first member stood, with the count of the others."""
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


__all__ = ["FOLD_AT", "Folded", "fold_warnings", "folded_lines", "shape_of"]
