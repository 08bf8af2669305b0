"""The cache's result entries: a command's whole Result, so that running it again costs what reading it costs.

``tracekit report`` re-run on the same trace with the same options (to see it as ``-f html``, ``-f json`` or
``--all`` after the table) gives the same Result: the analyses ran once. An entry is stored beside the trace's
own entry (:mod:`tracekit.cache.trace_entries`), one per source file and command, and holds the key it was made
under; it is used only when the key the command makes now is equal to it, whole. The key
(:func:`tracekit.cache.reuse_key.result_key`, made by the CLI's ``tracekit.cli.reuse``) holds everything the Result
depends on: the trace file's cache key (size, mtime, ctime, inode and a checksum, ``keys.key_of``), every option,
the annotation's content, the content of every other file the command reads, the library versions, and
``reuse_key.code_fingerprint`` — a checksum of tracekit's own code and data files — so that a changed rule,
annotation or analysis is never answered with an old Result.

Entries are Python pickles (a Result of pandas tables round-trips exactly; Arrow would change some dtypes). A
pickle runs code when it is read, so an entry is read only when it is a regular file owned by this user that no
one else may write, in a folder no one else may write (the rule Python's own bytecode cache relies on); anything
else is ignored and recomputed. A damaged or unreadable entry is never fatal: the command computes the Result.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import re
import stat
from pathlib import Path
from typing import Any

from ..result import Result
from .keys import entry_file
from .tempfiles import is_temporary_of, remove_stale_temporaries, replaced

log = logging.getLogger(__name__)

RESULT_SUFFIX = ".result"
RESULT_FORMAT = 1
MAGIC = b"TRACEKIT-RESULT\n"
RESULT_NAME = re.compile(r"(?s)^.{1,60}\.[0-9a-f]{20}\.[a-z_]{1,20}\.result$")
RESULT_TMP_NAME = re.compile(r"^\.tmp-tracekit-\d+-[a-z0-9_]{8}\.result$")


def entry_path(source: Path, command: str, cache_dir: Path | None = None) -> Path:
    """Where ``command``'s Result for ``source`` is kept: one entry per source file and command."""
    return entry_file(source, f".{command}{RESULT_SUFFIX}", cache_dir)


def _trusted(st: os.stat_result) -> bool:
    """Ours alone: owned by this user and writable by no one else (where the platform has owners)."""
    if not hasattr(os, "getuid"):
        return True
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read_entry(path: Path) -> bytes | None:
    """The entry's bytes, when it is a regular file we may trust in a folder we may trust; else None."""
    try:
        folder = os.stat(path.parent)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and _trusted(st) and _trusted(folder)):
            log.info("not reading %s: not a regular file of this user's alone", path)
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def _canonical(key: dict[str, Any]) -> bytes:
    return json.dumps(key, sort_keys=True, default=str).encode()


def get(source: Path, command: str, key: dict[str, Any], cache_dir: Path | None = None) -> Result | None:
    """The Result stored for ``source`` and ``command`` under exactly ``key``, or None (absent, another key,
    damaged, or not trusted)."""
    path = entry_path(source, command, cache_dir)
    data = _read_entry(path)
    if data is None or not data.startswith(MAGIC):
        return None
    try:
        buf = io.BytesIO(data)
        buf.seek(len(MAGIC))
        head = json.loads(buf.readline())
        if head.get("format") != RESULT_FORMAT or head.get("key") != json.loads(_canonical(key)):
            return None
        result = pickle.load(buf)
    except Exception as exc:  # noqa: BLE001 - a damaged entry is never fatal: compute again
        log.info("ignoring unreadable result entry %s: %s", path, exc)
        return None
    return result if isinstance(result, Result) and result.command == command else None


def put(source: Path, command: str, key: dict[str, Any], result: Result, cache_dir: Path | None = None) -> Path | None:
    """Store ``result`` under ``key``, atomically (a temporary file renamed over the entry). A folder that cannot be
    written, or a Result that cannot be pickled, leaves the command as it was: nothing is stored."""
    path = entry_path(source, command, cache_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None  # a FIFO, a link, a folder at the entry's name: not ours to replace
        except FileNotFoundError:
            pass
        head = json.dumps(
            {"format": RESULT_FORMAT, "command": command, "source": str(source), "key": json.loads(_canonical(key))}
        ).encode()
        body = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        with replaced(path, RESULT_SUFFIX) as tmp, open(tmp, "wb") as fh:
            fh.write(MAGIC + head + b"\n" + body)
    except (OSError, pickle.PicklingError, TypeError, AttributeError, ValueError) as exc:
        log.info("not storing the %s result of %s: %s", command, source, exc)
        return None
    remove_stale_temporaries(path.parent, is_result_temporary)  # of result writes killed before their rename
    return path


def is_result_temporary(path: Path, st: os.stat_result) -> bool:
    """A temporary file of a result write: its name, a regular file, and empty or starting as an entry does."""
    return is_temporary_of(path, st, RESULT_TMP_NAME, (MAGIC,))


def stored_head(path: Path) -> dict[str, Any] | None:
    """What a result entry says of itself (format, command, source, key) without unpickling it; None when the file
    is not a result entry."""
    try:
        with open(path, "rb") as fh:
            if fh.read(len(MAGIC)) != MAGIC:
                return None
            head = json.loads(fh.readline())
    except (OSError, ValueError):
        return None
    return head if isinstance(head, dict) and isinstance(head.get("key"), dict) else None
