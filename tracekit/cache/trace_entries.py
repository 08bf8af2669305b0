"""The cache's trace entries: a trace's normalised events table, as an uncompressed Arrow IPC file (Feather v2).

A cache entry is valid while the source file has the same size, mtime, ctime, inode and content checksum and was
written by the same tracekit version and cache format (the key, :mod:`tracekit.cache.keys`). Entries live in
``$TRACEKIT_CACHE_DIR`` (default ``~/.cache/tracekit``), named by a hash of the source's absolute path, so
read-only trace directories work and trace folders are not littered. Writes go to a unique temporary file in the
cache directory and are renamed into place (:func:`tracekit.cache.tempfiles.replaced`), so concurrent loads never
see a partial file (a reader that has the old file mapped keeps it).

The cache owns only what it wrote: an entry is a regular file whose name is ``NAME.<20 hex>.arrow`` and whose Arrow
schema (stored at the start of the file and again in its footer) holds tracekit's key; a temporary file is
``.tmp-tracekit-PID-XXXXXXXX.arrow`` (``.tmp-XXXXXXXX.arrow|parquet`` before). Anything else in the folder is the
user's (``tracekit cache info|clear`` neither count nor remove it), and a FIFO, device or symbolic link at an
entry's path is never opened or replaced.

The Arrow file is followed by a seal (:mod:`tracekit.cache.integrity`, format 7 on): a CRC-32 of all its bytes,
checked before anything of the entry is parsed — a damaged entry is removed with one warning and the trace read
again. ``pyarrow.ipc.open_file`` reads an entry once the trailer's 32 bytes are cut off.

Why uncompressed Arrow IPC (format 4 on; formats up to 3 were lz4 parquet): it is read by memory-mapping the
file and copying the columns into pandas, ~0.03-0.06 s for 670k events against ~0.13-0.2 s for parquet with
any codec (parquet's decoding, not its decompression, is the cost) and ~0.08-0.18 s for lz4 Arrow IPC. It
takes ~130 bytes an event on disk (87 MB for a 300 MB JSON / 19 MB .json.gz trace, parquet 19 MB);
``docs/ingest.md`` has the measurements.
"""

from __future__ import annotations

import errno
import json
import logging
import mmap
import os
import re
import stat
from pathlib import Path
from typing import Any

import pandas as pd

from ..schema import EVENT_COLUMNS
from ..trace import IngestReport, Trace
from . import integrity
from .integrity import Damaged, dropped
from .keys import entry_file, key_of, matches
from .tempfiles import is_temporary_of, remove_stale_temporaries, replaced

log = logging.getLogger(__name__)
SUFFIX = ".arrow"
LEGACY_SUFFIXES = (".parquet",)  # formats 1-3: never read, listed and removed by `tracekit cache info|clear`
_META_KEY = b"tracekit"
_ARROW_MAGIC = b"ARROW1"


# names the cache writes; anything else in the folder is not tracekit's
ENTRY_NAME = re.compile(r"(?s)^.{1,60}\.[0-9a-f]{20}\.(?:arrow|parquet)$")
TMP_NAME = re.compile(r"^\.tmp-(?:tracekit-\d+-)?[a-z0-9_]{8}\.(?:arrow|parquet)$")

_warned: set[str] = set()


# --------------------------------------------------------------------------- paths, and what is tracekit's


def cache_path(source: Path, cache_dir: Path | None = None, suffix: str = SUFFIX) -> Path:
    """Where the trace entry of ``source`` is kept (``NAME.<20 hex>.arrow``; ``.parquet`` of formats 1-3)."""
    return entry_file(source, suffix, cache_dir)


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        log.warning("%s", message)


def _kind(mode: int) -> str:
    return (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a symbolic link"
        if stat.S_ISLNK(mode)
        else "a folder"
        if stat.S_ISDIR(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a regular file"
    )


def _not_usable(path: Path, exc: OSError, doing: str) -> None:
    """One warning per cache folder and cause: the trace is read (or was read) without the cache."""
    folder = path.parent
    e = exc.errno
    if e in (errno.ENOTDIR, errno.EEXIST) and folder.exists() and not folder.is_dir():
        what, msg = str(folder), f"the cache folder {folder} is a file, not a folder"
    elif e in (errno.EACCES, errno.EPERM):
        what, msg = f"{folder}:perm", f"the cache folder {folder} cannot be {doing} (permission denied)"
    elif e == errno.EROFS:
        what, msg = f"{folder}:rofs", f"the cache folder {folder} is on a read-only file system"
    elif e in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        what, msg = f"{folder}:space", f"no space left for the cache entry {path}"
    else:
        what, msg = f"{folder}:{e}", f"the cache entry {path} cannot be {doing} ({exc.strerror or exc})"
    _warn_once(what, f"{msg}; the trace is read without the cache — fix that, or pass --cache-dir DIR (or --no-cache)")


def _not_regular(path: Path, mode: int, doing: str) -> None:
    _warn_once(
        f"{path}:special",
        f"the cache entry {path} is {_kind(mode)}, not a file tracekit wrote, so it is not "
        f"{doing}; the trace is read without the cache — remove it, or pass --cache-dir DIR",
    )


def open_entry(path: Path) -> mmap.mmap | None:
    """``path`` memory-mapped read-only when it is a regular file; None when it is absent or empty. A FIFO, device,
    socket or symbolic link is never opened (it would block, or be someone else's): OSError(EINVAL) then, with its
    st_mode as the exception's ``mode``. Never follows the last component's link, never waits."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        exc = OSError(errno.EINVAL, "not a regular file", str(path))
        exc.mode = st.st_mode  # type: ignore[attr-defined]
        raise exc
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the lstat
            exc = OSError(errno.EINVAL, "not a regular file", str(path))
            exc.mode = st.st_mode  # type: ignore[attr-defined]
            raise exc
        if st.st_size == 0:
            return None
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def stored_metadata(path: Path) -> dict[str, Any] | None:
    """What a file at a tracekit entry name stores (key, meta, report), from the schema at the start of the file
    (so an entry cut later is still recognised), or None when it is not a tracekit cache entry."""
    import pyarrow as pa
    from pyarrow import ipc

    try:
        if path.name.endswith(SUFFIX):
            mm = open_entry(path)
            if mm is None or mm[:6] != _ARROW_MAGIC:
                return None
            try:
                buf = pa.py_buffer(mm)
                schema = ipc.open_stream(pa.BufferReader(buf.slice(8))).schema
                raw = (schema.metadata or {}).get(_META_KEY)
                del schema, buf
            finally:
                try:
                    mm.close()
                except BufferError:
                    pass
        else:
            import pyarrow.parquet as pq  # an entry of formats 1-3

            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return None
            with open(path, "rb") as fh:
                if fh.read(4) != b"PAR1":
                    return None
            raw = (pq.read_schema(path).metadata or {}).get(_META_KEY)
        stored = json.loads(raw) if raw else None
    except (OSError, ValueError, pa.ArrowException):
        return None
    if not (
        isinstance(stored, dict)
        and isinstance(stored.get("key"), dict)
        and isinstance(stored["key"].get("format"), int)
        and isinstance(stored.get("report"), dict)
    ):
        return None
    return stored


def read_metadata(path: Path) -> dict[str, Any]:
    """What an entry stores besides the table (its key, the trace's meta and report); ValueError when ``path`` is
    not a tracekit cache entry."""
    stored = stored_metadata(path)
    if stored is None:
        raise ValueError(f"{path} is not a tracekit cache entry")
    return stored


# --------------------------------------------------------------------------- read


def read(source: Path, cache_dir: Path | None = None) -> Trace | None:
    """The cached Trace for ``source``, or None when absent, stale or unreadable (a cache folder that cannot be
    read, or something else than a file at the entry's path, is warned about once)."""
    path = cache_path(source, cache_dir)
    try:
        mm = open_entry(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if getattr(exc, "mode", None) is not None:
            _not_regular(path, exc.mode, "read")  # type: ignore[attr-defined]
        else:
            _not_usable(path, exc, "read")
        return None
    if mm is None:
        return None
    try:
        with memoryview(mm) as whole:  # the seal first: nothing of a damaged entry is parsed
            old = not integrity.is_sealed(whole) and whole[-6:] == _ARROW_MAGIC  # format 6 or before: no seal
            n = 0 if old else integrity.sealed_length(whole)
    except Damaged as exc:
        try:
            mm.close()
        except BufferError:  # the last reference unmaps it
            pass
        dropped(log, path, exc, "the trace is read again")
        return None
    if old:
        mm.close()
        return None  # never read: the trace is read again and the entry replaced
    import pyarrow as pa  # loaded with pandas already; pyarrow.ipc costs nothing more
    from pyarrow import ipc

    try:
        # the mapping goes with the last reference to it (the columns are copied out, see _restore_dtypes); a
        # concurrent writer replaces the file by rename, so what is mapped never changes under the reader
        reader = ipc.open_file(pa.py_buffer(mm).slice(0, n))
        stored = json.loads(reader.schema.metadata[_META_KEY])
        if not matches(stored.get("key"), source):
            return None
        table = reader.read_all()
        if table.num_rows != stored["report"]["events_kept"]:
            raise ValueError(f"{table.num_rows} rows, the report says {stored['report']['events_kept']}")
        for i, field in enumerate(table.schema):
            if pa.types.is_dictionary(field.type):  # codes out of range would be misread, not refused
                table.column(i).validate(full=True)
        del reader
        events = _restore_dtypes(table.to_pandas())
        del table
        report = IngestReport(**stored["report"])
        meta = stored["meta"]
    except Exception as exc:  # noqa: BLE001 - a damaged cache is never fatal: ingest again
        log.info("ignoring unreadable cache %s: %s", path, exc)
        return None
    finally:
        reader = table = None  # noqa: F841 - let go of the buffers before the map is closed
        try:
            mm.close()  # nothing points into it any more (else the last reference unmaps it)
        except BufferError:
            pass
    report.from_cache = True
    return Trace(events=events, meta=meta, report=report)


def _restore_dtypes(events):
    for col in events.columns:
        dtype = events[col].dtype
        if isinstance(dtype, pd.CategoricalDtype) and len(dtype.categories):
            # to_pandas copies the codes out of the mapped file but not the categories (Arrow-backed strings
            # that point into it), which would keep the whole file mapped — resident, counted in the RSS, its disk
            # space held after `tracekit cache clear` — for the Trace's life: copy them (a few hundred strings)
            cats = dtype.categories
            events[col] = events[col].cat.rename_categories(pd.Index(cats.to_numpy(), dtype=cats.dtype))
    # an all-null categorical can come back as an object column; the schema says what it is
    for col, (dtype, _, _) in EVENT_COLUMNS.items():
        if dtype == "category" and col in events and not isinstance(events[col].dtype, pd.CategoricalDtype):
            events[col] = events[col].astype(pd.CategoricalDtype(pd.Index([], dtype=object)))
    return events


# --------------------------------------------------------------------------- write


def _write_table(tmp_name: str, table) -> None:
    from pyarrow import ipc

    # uncompressed: it is read by mapping the file, ~2-3x faster than lz4 (see the module's docstring)
    with ipc.new_file(tmp_name, table.schema, options=ipc.IpcWriteOptions(compression=None)) as writer:
        writer.write_table(table)


def write(
    source: Path, trace: Trace, cache_dir: Path | None = None, before: dict[str, Any] | None = None
) -> Path | None:
    """Store ``trace`` atomically; failures (read-only disk, full disk, a cache folder that is a file or cannot be
    written) warn once and leave the load as it is. ``before``: the key taken before the file was read — a file that
    changed during the read (still being written) is not cached, so a later run does not get a cut trace with a
    stale "truncated" warning. SIGTERM/SIGHUP/SIGINT during the write remove the temporary file, then act as usual."""
    import pyarrow as pa

    path = cache_path(source, cache_dir)
    try:
        now = key_of(source, whole=None if before is None else bool(before.get("whole")))
    except OSError as exc:
        log.info("not caching %s: %s", source, exc)
        return None
    if before is not None and before != now:
        log.info("not caching %s: it changed while it was read", source)
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        _not_usable(path, exc, "written")
        return None
    else:
        if not stat.S_ISREG(st.st_mode):  # a FIFO, a link, a folder: not ours to replace
            _not_regular(path, st.st_mode, "replaced")
            return None
    try:
        table = pa.Table.from_pandas(trace.events, preserve_index=False)
        payload = {"key": now, "meta": trace.meta, "report": trace.report.to_dict()}
        metadata = dict(table.schema.metadata or {})
        metadata[_META_KEY] = json.dumps(payload).encode()
        table = table.replace_schema_metadata(metadata)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        log.info("could not write cache %s: %s", path, exc)
        return None
    try:
        with replaced(path, SUFFIX) as tmp_name:
            _write_table(tmp_name, table)
            integrity.seal_file(tmp_name)
    except (OSError, pa.ArrowException) as exc:
        err = exc if isinstance(exc, OSError) else _arrow_os_error(exc)
        _not_usable(path, err, "written")
        return None
    for suffix in LEGACY_SUFFIXES:  # this source's entry in an older format is dead weight now
        try:
            legacy = cache_path(source, cache_dir, suffix)
            if stored_metadata(legacy) is not None:
                legacy.unlink()
        except OSError:
            pass
    remove_stale_temporaries(path.parent, is_temporary)
    return path


def _arrow_os_error(exc: Exception) -> OSError:
    m = re.search(r"\[errno (\d+)\]", str(exc), re.I)  # pyarrow's IO errors carry it in the text
    return OSError(int(m.group(1)) if m else errno.EIO, str(exc))


# --------------------------------------------------------------------------- temporaries


def is_temporary(path: Path, st: os.stat_result) -> bool:
    """A temporary file of a trace entry's write: its name, a regular file, and empty or starting as an entry does
    (Arrow IPC, or parquet in formats 1-3)."""
    return is_temporary_of(path, st, TMP_NAME, (_ARROW_MAGIC, b"PAR1"))
