"""Which of many name rules each distinct kernel name matches, in one pass over the names (op tags: an annotation
may hold 100,000 of them).

A rule's pattern that is a plain literal (``gemm``, ``at::native::fill``, ``cuda\\.graph``: no operator, only escaped
punctuation) or a literal anchored at the start (``^nccl``) is found through one trie walk of each name: a literal
is searched exactly as the regex would be (a substring; at position 0 when anchored). Any other pattern is a
regex run on the time-bounded engine (:mod:`tracekit.regexes`), as a user's pattern, but only on the names that hold
a literal the regex cannot match without (its longest literal run at the top level, when it has one). The answer is
the same set of names as searching every pattern in every name.
"""

from __future__ import annotations

import re
import re._parser as sre
from typing import Iterable, Sequence

from ..regexes import bounded

_META = set(".^$*+?{}[]\\|()")
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")  # an escaped ASCII punctuation character: that character


def literal_of(pattern: str) -> tuple[str, bool] | None:
    """(text, anchored) when ``pattern`` is a literal (or ``^`` and a literal), else None. A backslash is allowed
    only before ASCII punctuation (``\\.``), which both regex engines read as that character."""
    anchored = pattern.startswith("^")
    body = pattern[1:] if anchored else pattern
    if "\\" in body:
        if re.search(r"\\(?![!-/:-@\[-`{-~])", body):
            return None
        parts = _ESCAPED.split(body)  # text, escaped char, text, ...
        if any(ch in _META for part in parts[0::2] for ch in part):
            return None
        return "".join(parts), anchored
    if any(ch in _META for ch in body):
        return None
    return body, anchored


def required_literal(pattern: str) -> str | None:
    """The longest run of literal characters at the top level of ``pattern`` (a sequence, no alternation at the top,
    no flags): every name it matches holds that text. None when there is none (or the pattern is not read)."""
    try:
        parsed = sre.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    if parsed.state.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    best, cur = "", []
    for op, av in parsed:
        if op is sre.LITERAL:
            cur.append(chr(av))
            continue
        if len(cur) > len(best):
            best = "".join(cur)
        cur = []
    if len(cur) > len(best):
        best = "".join(cur)
    return best or None


class _Trie:
    """Literals in a trie of dicts: each node maps a character to its child; key None holds the ids ending there."""

    def __init__(self) -> None:
        self.root: dict = {}

    def add(self, text: str, ident: int) -> None:
        node = self.root
        for ch in text:
            node = node.setdefault(ch, {})
        node.setdefault(None, []).append(ident)

    def found(self, name: str, anchored_only: bool = False) -> list[int]:
        """Ids of the literals that occur in ``name`` (only at its start when ``anchored_only``)."""
        out: list[int] = []
        root = self.root
        n = len(name)
        for i in range(1 if anchored_only else n + 1):
            ends = root.get(None)
            if ends:
                out.extend(ends)
            node, j = root, i
            while j < n:
                node = node.get(name[j])
                if node is None:
                    break
                ends = node.get(None)
                if ends:
                    out.extend(ends)
                j += 1
        return out


def matching_rules(patterns: Sequence[str], names: Iterable[str], where: Sequence[str]) -> list[list[int]]:
    """For each name, the (sorted) indices of the patterns that ``search`` finds in it. ``where`` names each
    pattern for the error of a regex that runs past its time bound. Rules that share a pattern are matched once."""
    names = [str(n) for n in names]
    rules_of: dict[str, list[int]] = {}
    for i, p in enumerate(patterns):
        rules_of.setdefault(p, []).append(i)
    distinct = list(rules_of)
    floating, anchored = _Trie(), _Trie()
    unhinted: list[int] = []  # regexes (by index in distinct) tried on every name
    hinted: dict[int, list[int]] = {}  # hint id (negative) -> the regexes tried on the names that hold it
    hint_ids: dict[str, int] = {}
    for k, p in enumerate(distinct):
        lit = literal_of(p)
        if lit is not None:
            (anchored if lit[1] else floating).add(lit[0], k)
            continue
        hint = required_literal(p)
        if hint is None:
            unhinted.append(k)
            continue
        if hint not in hint_ids:
            hint_ids[hint] = -1 - len(hint_ids)
            floating.add(hint, hint_ids[hint])
        hinted.setdefault(hint_ids[hint], []).append(k)
    compiled: dict[int, object] = {}
    out: list[list[int]] = []
    for name in names:
        hits = set(floating.found(name)) | set(anchored.found(name, anchored_only=True))
        found = [k for k in hits if k >= 0]
        tries = sorted([*unhinted, *(k for h in hits if h < 0 for k in hinted[h])])
        for k in tries:  # in the rules' order: a pattern that runs past its bound fails as it did one by one
            rx = compiled.get(k)
            if rx is None:
                rx = compiled[k] = bounded(distinct[k], where[rules_of[distinct[k]][0]])
            if rx.search(name):
                found.append(k)
        out.append(sorted(i for k in found for i in rules_of[distinct[k]]))
    return out
