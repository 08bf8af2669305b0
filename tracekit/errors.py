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
    raise UsageError(f"{name} must be {must_be}, not {type(value).__name__}")
