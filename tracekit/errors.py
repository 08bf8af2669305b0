"""Errors that reach people: each carries an exit code and one sentence saying what to do."""

from __future__ import annotations


class TracekitError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class InputError(TracekitError):
    """The input is missing, unreadable, corrupt or of the wrong kind (exit 3)."""

    exit_code = 3


class ResourceLimitError(InputError):
    """The input needs more than tracekit may spend on it: a compressed file that decompresses far beyond any trace
    (a likely decompression bomb), or more memory than the process may use (exit 3). The sentence says how to raise
    the limit. Readers that fall back to another reader on an InputError let this one through."""


class MissingDataError(TracekitError):
    """The input is valid but lacks what the analysis needs, e.g. no GPU events (exit 4)."""

    exit_code = 4


class DataFileError(TracekitError):
    """A knowledge file (annotation, class patterns) is malformed (exit 3)."""

    exit_code = 3


class OutputError(TracekitError):
    """An output cannot be written: a directory where a file should be, no such folder, no permission, a read-only
    file system, a full disk, another writer (exit 3). Nothing partial is left behind."""

    exit_code = 3


class WorkerError(TracekitError):
    """The work could not be done where it was sent: a worker process died (killed, out of memory) while analysing
    a file, or the Dask scheduler given cannot be reached in time (exit 3). The sentence names the file or the
    address and what to do."""

    exit_code = 3


class UsageError(TracekitError):
    """A bad option or option value (exit 2), e.g. an unknown --phase."""

    exit_code = 2


def named_or_loaded(value, cls: type, load, *, name: str, must_be: str):
    """What an analysis calls on an argument a notebook may give as the CLI takes it: None stays None, a
    ``cls`` is itself, a name or a path is loaded with ``load``; anything else is a UsageError that names the
    argument (``name``) and what it ``must_be``."""
    import os

    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, (str, os.PathLike)):
        return load(value)
    raise ArgumentTypeError(f"{name} must be {must_be}, not {type_name(value)}")


class ArgumentTypeError(UsageError, TypeError):
    """An argument of a type the function does not take: one sentence naming the argument, what it takes and what
    it got (a TypeError for Python, a usage error for the CLI's exit code)."""


# what a public function's first argument may be, in words: one place for every function's sentence
TAKES_PATH = "a path (str or Path)"
TAKES_TRACE = "a path (str or Path) or a loaded Trace (tracekit.load)"
TAKES_RESULT = "a Result (what a tracekit command returns)"


def type_name(value) -> str:
    """What a value is, for a sentence: ``None``, or its type's name."""
    return "None" if value is None else type(value).__name__


def check_argument(value, param: str, takes: str, *types: type, paths: bool = False, none: bool = False):
    """``value`` when it is one of ``types``, a path (str or ``os.PathLike``, with ``paths``) or None (with
    ``none``); anything else is the one sentence every public function says of its first argument: ``PARAM must be
    TAKES, not TYPE`` (an :class:`ArgumentTypeError`). Called on a function's first line, before any work."""
    import os

    if (value is None and none) or (paths and isinstance(value, (str, os.PathLike))) or isinstance(value, types):
        return value
    raise ArgumentTypeError(f"{param} must be {takes}, not {type_name(value)}")


def check_items(value, param: str, takes: str, *types: type, paths: bool = False) -> list:
    """``value`` as a list of items, each one of ``types`` or a path (with ``paths``): one item alone, or a list or
    tuple of them; anything else (None, a DataFrame, a list holding something else) is :func:`check_argument`'s
    sentence."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        try:
            check_argument(item, param, takes, *types, paths=paths)
        except ArgumentTypeError:
            got = type_name(value) if item is value else f"a {type_name(value)} holding {type_name(item)}"
            raise ArgumentTypeError(f"{param} must be {takes}, not {got}") from None
    return items
