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

An entry is ``MAGIC``, a JSON line saying what it is (format, command, source, key), the Result in
:mod:`tracekit.cache.result_codec`'s format — JSON and the raw buffers of numeric columns, read back to the same
dtypes, and never code: a tampered entry can give wrong numbers, not run anything (format 1 was a pickle, which
does; its entries are never read now, and are replaced) — and the seal of :mod:`tracekit.cache.integrity`, a
CRC-32 of every byte before it, checked before anything is parsed. An entry whose seal does not agree is removed
with one warning and the command computes its Result; one of another format or key is recomputed silently. An
entry is still read only when it is a regular file owned by this user that no one else may write, in a folder no
one else may write: another user's entry could not run code, but it could lie.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..result import Result
from . import integrity, result_codec
from .integrity import Damaged, dropped, is_sealed, trailer
from .keys import entry_file
from .tempfiles import is_temporary_of, remove_stale_temporaries, replaced

log = logging.getLogger(__name__)

RESULT_SUFFIX = ".result"
RESULT_FORMAT = 2  # 1: a pickle; 2: result_codec's JSON and buffers, sealed with a CRC-32
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
    """The Result stored for ``source`` and ``command`` under exactly ``key``, or None (absent, another format or
    key, not trusted, or damaged — which is removed with one warning)."""
    path = entry_path(source, command, cache_dir)
    data = _read_entry(path)
    if data is None:
        return None
    try:
        if not is_sealed(data):  # an entry of format 1 (or someone else's file): never read
            head, _ = _head(data)
            if head is None or head.get("format") == RESULT_FORMAT:
                raise Damaged("it has no checksum trailer")
            return None
        body = memoryview(data)[: integrity.sealed_length(data)]
        head, end = _head(body)
        if head is None or head.get("format") != RESULT_FORMAT:
            raise Damaged("its header cannot be read")
        if head.get("key") != json.loads(_canonical(key)):
            return None  # made under other options, another trace or another tracekit: recomputed
        result = result_codec.decode(body[end:])
        if result.command != command:
            raise Damaged(f"it holds a {result.command} result")
    except Exception as exc:  # noqa: BLE001 - a damaged entry is never fatal: compute again
        if data.startswith(MAGIC) or is_sealed(data):
            dropped(log, path, exc, f"the {command} is computed again")
        return None
    return result


def _head(data) -> tuple[dict[str, Any] | None, int]:
    """The JSON line after MAGIC, and where the Result starts after it; (None, 0) when there is none."""
    raw = bytes(data[: 1 << 20])
    if not raw.startswith(MAGIC) or b"\n" not in raw[len(MAGIC) :]:
        return None, 0
    end = raw.index(b"\n", len(MAGIC))
    try:
        head = json.loads(raw[len(MAGIC) : end])
    except ValueError:
        return None, 0
    return (head, end + 1) if isinstance(head, dict) else (None, 0)


def put(source: Path, command: str, key: dict[str, Any], result: Result, cache_dir: Path | None = None) -> Path | None:
    """Store ``result`` under ``key``, atomically (a temporary file renamed over the entry). A folder that cannot be
    written, or a Result holding what result_codec does not store, leaves the command as it was: nothing is
    stored."""
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
        data = MAGIC + head + b"\n" + result_codec.encode(result)
        with replaced(path, RESULT_SUFFIX) as tmp, open(tmp, "wb") as fh:
            fh.write(data + trailer(data))
    except (OSError, TypeError, ValueError) as exc:  # result_codec.Unsupported is a TypeError
        log.info("not storing the %s result of %s: %s", command, source, exc)
        return None
    remove_stale_temporaries(path.parent, is_result_temporary)  # of result writes killed before their rename
    return path


def is_result_temporary(path: Path, st: os.stat_result) -> bool:
    """A temporary file of a result write: its name, a regular file, and empty or starting as an entry does."""
    return is_temporary_of(path, st, RESULT_TMP_NAME, (MAGIC,))


def stored_head(path: Path) -> dict[str, Any] | None:
    """What a result entry says of itself (format, command, source, key) without reading its Result; None when the
    file is not a result entry."""
    try:
        with open(path, "rb") as fh:
            if fh.read(len(MAGIC)) != MAGIC:
                return None
            head = json.loads(fh.readline())
    except (OSError, ValueError):
        return None
    return head if isinstance(head, dict) and isinstance(head.get("key"), dict) else None
