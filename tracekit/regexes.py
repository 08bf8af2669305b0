"""Regular expressions from users — annotations, selectors, ``--step-name``, step-dialect files — run with a time
bound, so that a pattern that backtracks without end (``(a+)+$``) is one sentence, not a hang.

They run on the ``regex`` package (the same syntax as ``re`` for what tracekit's files use) within a time budget
per compiled pattern: :data:`TIMEOUT_S` plus :data:`PER_NAME_S` a name, in all, across every name it is run on (a
budget per name let one slow pattern over 150 names take 69 s). Each is evaluated once per distinct name, never per event; a real pattern takes
microseconds a name. tracekit's own patterns are linear in the name's length (a test runs them on 1 MB names) and
use ``re``.
"""

from __future__ import annotations

import re
import time

import regex

from .errors import UsageError

TIMEOUT_S = 1.0  # per pattern, over all the names one run matches it against ...
PER_NAME_S = 1e-4  # ... plus this much per name (a real pattern takes 1-5 us a name; 200,000 names get 21 s)


class BoundedPattern:
    """A compiled user pattern whose ``search`` / ``fullmatch`` calls together give up after :data:`TIMEOUT_S`."""

    def __init__(self, pattern: str, where: str, error: type[Exception] = UsageError, flags: int = 0):
        try:
            self.rx = regex.compile(pattern, flags=regex.VERSION0 | _regex_flags(flags))
        except (regex.error, re.error) as exc:
            raise error(f"{where}: {pattern!r} is not a valid regular expression ({exc})") from None
        self.pattern, self.where, self.error = pattern, where, error
        self.groupindex = self.rx.groupindex
        self.spent = 0.0  # seconds of matching so far
        self.names = 0  # names matched so far

    def _run(self, fn, text: str):
        left = TIMEOUT_S + PER_NAME_S * (self.names + 1) - self.spent
        t0 = time.perf_counter()
        try:
            if left <= 0:
                raise TimeoutError
            return fn(text, timeout=left)
        except TimeoutError:
            allowed = TIMEOUT_S + PER_NAME_S * (self.names + 1)
            raise self.error(
                f"{self.where}: the pattern {self.pattern!r} took more than {allowed:.2g} s over"
                f" {self.names + 1:,} name(s) (it backtracks without end on names like the latest, of"
                f" {len(text):,} characters); rewrite it, e.g. without nested repetition like"
                " (a+)+"
            ) from None
        finally:
            self.spent += time.perf_counter() - t0
            self.names += 1

    def search(self, text: str):
        return self._run(self.rx.search, text)

    def match(self, text: str):
        return self._run(self.rx.match, text)

    def fullmatch(self, text: str):
        return self._run(self.rx.fullmatch, text)


def bounded(pattern, where: str = "a pattern", error: type[Exception] = UsageError, flags: int = 0):
    """``pattern`` (a string) as a :class:`BoundedPattern`; an already compiled pattern is returned as it is.
    ``flags`` are ``re``'s (``re.I``, ``re.ASCII``, ...)."""
    if isinstance(pattern, str):
        return BoundedPattern(pattern, where, error, flags)
    return pattern


def _regex_flags(flags: int) -> int:
    """``re`` flags as the ``regex`` package numbers them: the same bits, but for ASCII."""
    out = int(flags) & int(re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.UNICODE)
    return out | (int(regex.ASCII) if flags & re.ASCII else 0)
