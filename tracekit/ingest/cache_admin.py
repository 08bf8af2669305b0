"""What the cache holds, and clearing it (``tracekit cache info|clear``).

Entries of every format are listed and cleared: the Arrow IPC files of format 4 and the parquet files of
formats 1-3, which a load never reads (their ``format`` column says which is which)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..result import Result
from .cache import _META_KEY, LEGACY_SUFFIXES, SUFFIX, default_cache_dir, read_metadata

CACHE_COLUMNS = ["file", "bytes", "source", "source_bytes", "version", "format"]


def _entries(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for suffix in (SUFFIX, *LEGACY_SUFFIXES) for p in root.glob(f"*{suffix}") if p.is_file())


def _stored(p: Path) -> dict:
    if p.name.endswith(SUFFIX):
        return read_metadata(p)
    import pyarrow.parquet as pq  # an entry of formats 1-3

    return json.loads(pq.read_schema(p).metadata[_META_KEY])


def _describe(p: Path) -> dict:
    row = {"file": p.name, "bytes": p.stat().st_size, "source": None, "source_bytes": None, "version": None,
           "format": None}
    try:
        meta = _stored(p)
    except Exception:  # noqa: BLE001 - a damaged entry is listed, not fatal: the cache rewrites it
        return row
    key = meta.get("key", {}) if isinstance(meta, dict) else {}
    report = meta.get("report", {}) if isinstance(meta, dict) else {}
    row.update(source=report.get("path"), source_bytes=key.get("size"),
               version=key.get("version"), format=key.get("format"))
    return row


def cache_info(cache_dir: str | Path | None = None) -> Result:
    """`tracekit cache info`: where the cache is, its entries and their size."""
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    rows = [_describe(p) for p in _entries(root)]
    table = pd.DataFrame(rows, columns=CACHE_COLUMNS)
    summary = {"cache_dir": str(root), "exists": root.is_dir(), "entries": len(rows),
               "total_bytes": int(table["bytes"].sum()) if rows else 0}
    return Result(command="cache", inputs=[], params={"action": "info", "cache_dir": str(root)}, summary=summary,
                  tables={"entries": table})


def cache_clear(cache_dir: str | Path | None = None) -> Result:
    """`tracekit cache clear`: remove every cache entry (the cache's .arrow files and the .parquet files of older
    formats; nothing else in the folder)."""
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    removed, freed = [], 0
    for p in _entries(root):
        size = p.stat().st_size
        try:
            p.unlink()
        except OSError as exc:
            raise InputError(f"{p} could not be removed ({exc.strerror or exc}); check the permissions of {root}") from exc
        removed.append({"file": p.name, "bytes": size})
        freed += size
    return Result(command="cache", inputs=[], params={"action": "clear", "cache_dir": str(root)},
                  summary={"cache_dir": str(root), "removed": len(removed), "freed_bytes": freed},
                  tables={"removed": pd.DataFrame(removed, columns=["file", "bytes"])})
