"""Parquet cache of a normalised events table.

A cache entry is valid while the source file has the same size and mtime and was written by
the same tracekit version. Entries live in ``$TRACEKIT_CACHE_DIR`` (default
``~/.cache/tracekit``), named by a hash of the source's absolute path, so read-only trace
directories work and trace folders are not littered. Writes go to a unique temporary file in
the cache directory and are renamed into place, so concurrent loads never see a partial file.
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
CACHE_FORMAT = 3  # 3: the key holds a content fingerprint
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


def cache_path(source: Path, cache_dir: Path | None = None) -> Path:
    digest = hashlib.sha1(str(source.resolve()).encode()).hexdigest()[:20]
    return (cache_dir or default_cache_dir()) / f"{source.name[:60]}.{digest}.parquet"


def read(source: Path, cache_dir: Path | None = None) -> Trace | None:
    """The cached Trace for ``source``, or None when absent, stale or unreadable."""
    path = cache_path(source, cache_dir)
    if not path.exists():
        return None
    import pyarrow.parquet as pq  # imported only when a cache is used: it costs ~40 MiB

    try:
        table = pq.read_table(path)
        stored = json.loads(table.schema.metadata[_META_KEY])
        if stored.get("key") != _key(source):
            return None
        events = _restore_dtypes(table.to_pandas())
    except Exception as exc:  # a damaged cache is never fatal: ingest again
        log.info("ignoring unreadable cache %s: %s", path, exc)
        return None
    report = IngestReport(**stored["report"])
    report.from_cache = True
    return Trace(events=events, meta=stored["meta"], report=report)


def _restore_dtypes(events):
    # parquet cannot tell an all-null categorical from an object column; the schema can
    for col, (dtype, _, _) in EVENT_COLUMNS.items():
        if dtype == "category" and col in events and not isinstance(events[col].dtype, pd.CategoricalDtype):
            events[col] = events[col].astype(pd.CategoricalDtype(pd.Index([], dtype=object)))
    return events


def write(source: Path, trace: Trace, cache_dir: Path | None = None, before: dict[str, Any] | None = None) -> Path | None:
    """Store ``trace`` atomically; failures (read-only disk, full disk) only log. ``before``: the key taken before
    the file was read — a file that changed during the read (still being written) is not cached, so a later run
    does not get a cut trace with a stale "truncated" warning."""
    import pyarrow as pa
    import pyarrow.parquet as pq

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
        fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet", dir=path.parent)
        os.close(fd)
        pq.write_table(table, tmp_name, compression="lz4")  # reads ~2x faster than zstd
        os.replace(tmp_name, path)
        tmp_name = None
        return path
    except (OSError, pa.ArrowException) as exc:
        log.info("could not write cache %s: %s", path, exc)
        return None
    finally:
        if tmp_name and os.path.exists(tmp_name):
            os.unlink(tmp_name)
