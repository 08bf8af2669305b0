"""What the parquet cache holds, and clearing it (``tracekit cache info|clear``)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from ..errors import InputError
from ..result import Result
from .cache import _META_KEY, default_cache_dir

CACHE_COLUMNS = ["file", "bytes", "source", "source_bytes", "version", "format"]


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.parquet") if p.is_file()) if root.is_dir() else []


def _describe(p: Path) -> dict:
    row = {"file": p.name, "bytes": p.stat().st_size, "source": None, "source_bytes": None, "version": None,
           "format": None}
    try:
        meta = json.loads(pq.read_schema(p).metadata[_META_KEY])
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
    """`tracekit cache clear`: remove every cache entry (the cache's parquet files; nothing else in the folder)."""
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
