"""What the cache holds, and clearing it (``tracekit cache info|clear``).

Only what tracekit wrote counts: an entry is a regular file named ``NAME.<20 hex>.arrow`` (or ``.parquet``, formats
1-3, which a load never reads) whose schema holds tracekit's key (``tracekit.cache.trace_entries.stored_metadata``);
a temporary file is ``.tmp-…`` of a write, empty or started as an entry. A result entry is
``NAME.<20 hex>.<command>.result`` starting with its own header (``tracekit.cache.result_entries``): a command's
Result kept for the same inputs. Everything else in the folder — a user's ``notes.parquet``, tracekit's own exports,
links, FIFOs — is left as it is and only counted (``other_files``). Entries of every format are listed and cleared
(their ``format`` column says which is which); temporary files are removed by ``clear`` once no write has touched
them for ``STALE_TMP_S`` (``tracekit.cache.tempfiles``; a write in progress is left alone)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..result import Result, shown_text
from .keys import default_cache_dir
from .result_entries import RESULT_NAME, is_result_temporary, stored_head
from .tempfiles import CACHE_TMP_PREFIX, STALE_TMP_S, is_stale
from .trace_entries import ENTRY_NAME, is_temporary, stored_metadata
from ..errors import check_argument

# holds: "events" (a trace read, tracekit.cache.trace_entries) or "<command> result" (tracekit.cache.result_entries)
CACHE_COLUMNS = ["file", "bytes", "source", "source_bytes", "version", "format", "holds"]


def _root(cache_dir: str | Path | None) -> Path:
    return Path(cache_dir) if cache_dir else default_cache_dir()


def _scan(root: Path) -> tuple[list[dict], list[tuple[Path, os.stat_result]], int]:
    """(entries as rows with their path, temporary files, how many other things the folder holds)."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return [], [], 0
    except OSError as exc:
        raise InputError(
            f"the cache folder {root} cannot be read ({exc.strerror or exc}); check its permissions or"
            " pass another --cache-dir"
        ) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(
            f"{root} is not a folder; pass the cache's folder as --cache-dir (default"
            " $TRACEKIT_CACHE_DIR or ~/.cache/tracekit)"
        )
    try:
        with os.scandir(root) as it:
            found = sorted((e.name, e.path) for e in it)
    except OSError as exc:
        raise InputError(
            f"the cache folder {root} cannot be listed ({exc.strerror or exc}); check its permissions"
            " or pass another --cache-dir"
        ) from exc
    entries, temporaries, others = [], [], 0
    for name, path in found:
        p = Path(path)
        try:
            st = os.lstat(p)
        except OSError:
            continue  # gone meanwhile
        if stat.S_ISREG(st.st_mode) and ENTRY_NAME.match(name):
            stored = stored_metadata(p)
            if stored is not None:
                key, report = stored["key"], stored["report"]
                entries.append(_row(p, st, report.get("path"), key, key.get("format"), "events"))
                continue
        elif stat.S_ISREG(st.st_mode) and RESULT_NAME.match(name):
            head = stored_head(p)
            if head is not None:
                key = head["key"].get("trace", {}).get("file") or {}
                entries.append(
                    _row(p, st, head.get("source"), key, head.get("format"), f"{head.get('command')} result")
                )
                continue
        elif name.startswith(CACHE_TMP_PREFIX) and (is_temporary(p, st) or is_result_temporary(p, st)):
            temporaries.append((p, st))
            continue
        others += 1
    return entries, temporaries, others


def _row(p: Path, st: os.stat_result, source, key: dict, fmt, holds: str) -> dict:
    """One entry as a row (names shown as text every output can hold, ``shown_text``)."""
    return {
        "path": p,
        "file": shown_text(p.name),
        "bytes": st.st_size,
        "source": shown_text(source) if source is not None else None,
        "source_bytes": key.get("size"),
        "version": key.get("version"),
        "format": fmt,
        "holds": holds,
    }


def cache_info(cache_dir: str | Path | None = None) -> Result:
    """`tracekit cache info`: where the cache is, its entries and their size; what else the folder holds is counted,
    not listed."""
    check_argument(cache_dir, "cache_dir", "a path (str or Path) of a cache folder or None", paths=True, none=True)
    root = _root(cache_dir)
    entries, temporaries, others = _scan(root)
    table = pd.DataFrame([{c: e[c] for c in CACHE_COLUMNS} for e in entries], columns=CACHE_COLUMNS)
    summary = {
        "cache_dir": str(root),
        "exists": root.is_dir(),
        "entries": len(entries),
        "total_bytes": int(sum(e["bytes"] for e in entries)),
        "temporary_files": len(temporaries),
        "stale_temporary_files": sum(1 for _, st in temporaries if is_stale(st)),
        "other_files": others,
    }
    warnings = []
    if others:
        warnings.append(
            f"{root} holds {others} other file(s) that are not tracekit cache entries; `tracekit cache"
            " clear` leaves them"
        )
    return Result(
        command="cache",
        inputs=[],
        params={"action": "info", "cache_dir": str(root)},
        summary=summary,
        tables={"entries": table},
        warnings=warnings,
    )


def cache_clear(cache_dir: str | Path | None = None) -> Result:
    """`tracekit cache clear`: remove every cache entry (the cache's .arrow files and the .parquet files of older
    formats, recognised by their name and the key inside) and the temporary files of writes that were killed; nothing
    else in the folder."""
    check_argument(cache_dir, "cache_dir", "a path (str or Path) of a cache folder or None", paths=True, none=True)
    root = _root(cache_dir)
    entries, temporaries, others = _scan(root)
    removed, freed = [], 0
    for e in entries:
        if _unlink(e["path"], root):
            removed.append({"file": e["file"], "bytes": e["bytes"]})
            freed += e["bytes"]
    stale = 0
    for p, st in temporaries:
        if is_stale(st) and _unlink(p, root):
            stale += 1
            freed += st.st_size
    summary = {
        "cache_dir": str(root),
        "removed": len(removed),
        "freed_bytes": freed,
        "stale_temporary_files_removed": stale,
        "temporary_files_left": len(temporaries) - stale,
        "other_files_left": others,
    }
    warnings = []
    if others:
        warnings.append(f"left {others} file(s) in {root} that are not tracekit cache entries")
    if len(temporaries) - stale:
        warnings.append(
            f"left {len(temporaries) - stale} temporary file(s) in {root} that a write modified in the last"
            f" {STALE_TMP_S // 60} minutes (a load may be writing them)"
        )
    return Result(
        command="cache",
        inputs=[],
        params={"action": "clear", "cache_dir": str(root)},
        summary=summary,
        tables={"removed": pd.DataFrame(removed, columns=["file", "bytes"])},
        warnings=warnings,
    )


def _unlink(p: Path, root: Path) -> bool:
    try:
        p.unlink()
    except FileNotFoundError:
        return False  # removed meanwhile (another clear, or a load replacing it)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise InputError(
                f"{p} could not be removed ({exc.strerror or exc}); check the permissions of {root}"
            ) from exc
        raise InputError(f"{p} could not be removed ({exc.strerror or exc})") from exc
    return True
