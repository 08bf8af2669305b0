"""Cache of a normalised events table, as an uncompressed Arrow IPC file (Feather v2).

A cache entry is valid while the source file has the same size, mtime and content fingerprint and was
written by the same tracekit version and cache format. Entries live in ``$TRACEKIT_CACHE_DIR`` (default
``~/.cache/tracekit``), named by a hash of the source's absolute path, so read-only trace directories work and
trace folders are not littered. Writes go to a unique temporary file in the cache directory and are renamed
into place, so concurrent loads never see a partial file (a reader that has the old file mapped keeps it).

Why uncompressed Arrow IPC (format 4; formats up to 3 were lz4 parquet): it is read by memory-mapping the
file and copying the columns into pandas, ~0.03-0.06 s for 670k events against ~0.13-0.2 s for parquet with
any codec (parquet's decoding, not its decompression, is the cost) and ~0.08-0.18 s for lz4 Arrow IPC. It
takes ~130 bytes an event on disk (87 MB for a 300 MB JSON / 19 MB .json.gz trace, parquet 19 MB);
``docs/ingest.md`` has the measurements.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from .._version import __version__
from ..schema import EVENT_COLUMNS
from ..trace import IngestReport, Trace

log = logging.getLogger(__name__)
CACHE_FORMAT = 4  # 3: the key holds a content fingerprint; 4: uncompressed Arrow IPC instead of lz4 parquet
SUFFIX = ".arrow"
LEGACY_SUFFIXES = (".parquet",)  # formats 1-3: never read, listed and removed by `tracekit cache info|clear`
_PROBE = 1 << 16  # bytes hashed at each end of the file
_META_KEY = b"tracekit"


def default_cache_dir() -> Path:
    env = os.environ.get("TRACEKIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tracekit"


def _key(source: Path) -> dict[str, Any]:
    """What the cached entry must agree on: size, mtime, tracekit's version and format, and a fingerprint of the
    file's first and last 64 KiB — a file replaced by one of the same size with its mtime kept (``cp -p``,
    ``rsync -t``, ``tar x``) misses."""
    st = source.stat()
    h = hashlib.sha1()
    with open(source, "rb") as fh:
        h.update(fh.read(_PROBE))
        if st.st_size > 2 * _PROBE:
            fh.seek(st.st_size - _PROBE)
        h.update(fh.read(_PROBE))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "fingerprint": h.hexdigest()[:24],
            "version": __version__, "format": CACHE_FORMAT}


def key(source: Path) -> dict[str, Any] | None:
    """The cache key of ``source`` now (take it before reading the file; :func:`write` compares)."""
    try:
        return _key(source)
    except OSError:
        return None


def cache_path(source: Path, cache_dir: Path | None = None, suffix: str = SUFFIX) -> Path:
    digest = hashlib.sha1(str(source.resolve()).encode()).hexdigest()[:20]
    return (cache_dir or default_cache_dir()) / f"{source.name[:60]}.{digest}{suffix}"


def read_metadata(path: Path) -> dict[str, Any]:
    """What an entry stores besides the table (its key, the trace's meta and report), from the file's footer."""
    import pyarrow as pa
    from pyarrow import ipc

    with pa.memory_map(str(path)) as src:
        return json.loads(ipc.open_file(src).schema.metadata[_META_KEY])


def read(source: Path, cache_dir: Path | None = None) -> Trace | None:
    """The cached Trace for ``source``, or None when absent, stale or unreadable."""
    path = cache_path(source, cache_dir)
    if not path.exists():
        return None
    import pyarrow as pa  # loaded with pandas already; pyarrow.ipc costs nothing more
    from pyarrow import ipc

    try:
        # the mapping goes with the last reference to it (the columns are copied out, see _restore_dtypes); a
        # concurrent writer replaces the file by rename, so what is mapped never changes under the reader
        reader = ipc.open_file(pa.memory_map(str(path)))
        stored = json.loads(reader.schema.metadata[_META_KEY])
        if stored.get("key") != _key(source):
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


def write(source: Path, trace: Trace, cache_dir: Path | None = None, before: dict[str, Any] | None = None) -> Path | None:
    """Store ``trace`` atomically; failures (read-only disk, full disk) only log. ``before``: the key taken before
    the file was read — a file that changed during the read (still being written) is not cached, so a later run
    does not get a cut trace with a stale "truncated" warning."""
    import pyarrow as pa
    from pyarrow import ipc

    path = cache_path(source, cache_dir)
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        now = _key(source)
        if before is not None and before != now:
            log.info("not caching %s: it changed while it was read", source)
            return None
        table = pa.Table.from_pandas(trace.events, preserve_index=False)
        payload = {"key": now, "meta": trace.meta, "report": trace.report.to_dict()}
        metadata = dict(table.schema.metadata or {})
        metadata[_META_KEY] = json.dumps(payload).encode()
        table = table.replace_schema_metadata(metadata)
        fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=path.parent)
        os.close(fd)
        # uncompressed: it is read by mapping the file, ~2-3x faster than lz4 (see the module's docstring)
        with ipc.new_file(tmp_name, table.schema, options=ipc.IpcWriteOptions(compression=None)) as writer:
            writer.write_table(table)
        os.replace(tmp_name, path)
        tmp_name = None
        for suffix in LEGACY_SUFFIXES:  # this source's entry in an older format is dead weight now
            try:
                cache_path(source, cache_dir, suffix).unlink(missing_ok=True)
            except OSError:
                pass
        return path
    except (OSError, pa.ArrowException) as exc:
        log.info("could not write cache %s: %s", path, exc)
        return None
    finally:
        if tmp_name and os.path.exists(tmp_name):
            os.unlink(tmp_name)
