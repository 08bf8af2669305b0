"""Regular expressions from users — annotations, selectors, ``--step-name``, step-dialect files — run with a time
bound, so that a pattern that backtracks without end (``(a+)+$``) is one sentence, not a hang.

They run on the ``regex`` package (the same syntax as ``re`` for what tracekit's files use) with a timeout per
search; each is evaluated once per distinct name, never per event. tracekit's own patterns are linear in the
name's length (a test runs them on 1 MB names) and use ``re``.
"""
from __future__ import annotations

import re

import regex

from .errors import UsageError

TIMEOUT_S = 1.0  # per name: a real name takes microseconds


class BoundedPattern:
    """A compiled user pattern whose ``search`` / ``fullmatch`` give up after :data:`TIMEOUT_S`."""

    def __init__(self, pattern: str, where: str, error: type[Exception] = UsageError):
        try:
            self.rx = regex.compile(pattern, flags=regex.VERSION0)
        except (regex.error, re.error) as exc:
            raise error(f"{where}: {pattern!r} is not a valid regular expression ({exc})") from None
        self.pattern, self.where, self.error = pattern, where, error
        self.groupindex = self.rx.groupindex

    def _run(self, fn, text: str):
        try:
            return fn(text, timeout=TIMEOUT_S)
        except TimeoutError:
            raise self.error(f"{self.where}: the pattern {self.pattern!r} took more than {TIMEOUT_S:g} s on a name of"
                             f" {len(text):,} characters (it backtracks without end); rewrite it, e.g. without"
                             " nested repetition like (a+)+") from None

    def search(self, text: str):
        return self._run(self.rx.search, text)

    def fullmatch(self, text: str):
        return self._run(self.rx.fullmatch, text)


def bounded(pattern, where: str = "a pattern", error: type[Exception] = UsageError):
    """``pattern`` (a string) as a :class:`BoundedPattern`; an already compiled pattern is returned as it is."""
    if isinstance(pattern, str):
        return BoundedPattern(pattern, where, error)
    return pattern
