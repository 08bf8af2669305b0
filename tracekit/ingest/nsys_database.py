"""An Nsight Systems SQLite export, opened read-only and checked: whether a file is an SQLite database at all (its
magic header), whether it is whole (the header's page count against the file's size), whether it is an nsys export
(its tables), and the read-only connection that never writes a journal, a WAL or a shared-memory file beside it.
Every failure is one :class:`~tracekit.errors.InputError` sentence naming the file (exit 3).

The columns themselves are read by :mod:`tracekit.ingest.nsys_sqlite`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

import numpy as np

from ..errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
EXPORT_HINT = "nsys export --type sqlite --output FILE.sqlite FILE.nsys-rep"
# an nsys export always has these; a kernel or NVTX table says it recorded something tracekit reads
NSYS_MARKERS = ("StringIds",)
NSYS_EVENT_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME")
NOT_NSYS = "is an SQLite database but not an Nsight Systems export"


def is_sqlite(head: bytes) -> bool:
    """Whether the first bytes of a file are SQLite's magic header."""
    return head[:16] == SQLITE_MAGIC


class Database:
    """A read-only connection to one export, with its table names and columns, and ``fetch`` of integer columns
    into numpy (``fetchall`` of a few columns at a time: one C-level conversion, no Python statement per row)."""

    def __init__(self, source: Path, shown: str):
        self.source, self.shown = source, shown
        _check_header(source, shown)
        self.con = _connect(source, shown)
        try:
            names = self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise database_error(shown, exc) from exc
        self.tables = {str(n[0]) for n in names}
        if not all(t in self.tables for t in NSYS_MARKERS):
            self.close()
            raise InputError(f"{shown} {NOT_NSYS} (it has no StringIds table); pass the output of {EXPORT_HINT}")
        if not any(t in self.tables for t in NSYS_EVENT_TABLES):
            self.close()
            raise InputError(
                f"{shown} is an Nsight Systems export without kernels, CUDA API calls or NVTX ranges (no"
                f" {', '.join(NSYS_EVENT_TABLES)} table); profile with nsys profile --trace=cuda,nvtx and export again"
            )
        self._columns: dict[str, list[str]] = {}

    def close(self) -> None:
        self.con.close()

    def columns(self, table: str) -> list[str]:
        if table not in self._columns:
            rows = self.query(f'PRAGMA table_info("{table}")') if table in self.tables else []
            self._columns[table] = [str(r[1]) for r in rows]
        return self._columns[table]

    def query(self, sql: str, params: tuple = ()) -> list:
        try:
            return self.con.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise database_error(self.shown, exc) from exc

    def ints(self, table: str, exprs: list[str], where: str = "") -> np.ndarray:
        """The integer expressions ``exprs`` of every row of ``table`` (rowid order) as an (n, len(exprs)) int64
        array; NULL is -1 (each expression is written so)."""
        sql = f'SELECT {", ".join(exprs)} FROM "{table}"{" WHERE " + where if where else ""} ORDER BY rowid'
        rows = self.query(sql)
        if not rows:
            return np.zeros((0, len(exprs)), dtype=np.int64)
        try:
            return np.array(rows, dtype=np.int64).reshape(len(rows), len(exprs))
        except (OverflowError, ValueError, TypeError) as exc:
            raise InputError(
                f"{self.shown}: the table {table} holds a value that is not an integer in a column that must be"
                f" one ({exc}); pass an unmodified export ({EXPORT_HINT})"
            ) from exc


def column_or(db: Database, table: str, column: str, default: int = -1) -> str:
    """The SQL of a column with NULL as ``default``, or the default itself when the table lacks the column (an older
    export)."""
    return f'coalesce("{column}", {default})' if column in db.columns(table) else str(default)


def _check_header(source: Path, shown: str) -> None:
    """A database whose file is shorter than its header says (a copy cut short) is refused before SQLite reads it."""
    try:
        with open(source, "rb") as fh:
            head = fh.read(100)
        size = source.stat().st_size
    except OSError as exc:
        raise InputError(f"{shown} could not be read ({exc.strerror or exc}); check the path and permissions") from exc
    if len(head) < 100:
        raise InputError(
            f"{shown} is a truncated SQLite database ({size} bytes, less than its header); export it again"
        )
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    valid = head[24:28] == head[92:96]  # the in-header page count is valid when the change counters agree
    if valid and pages and size < page * pages:
        raise InputError(
            f"{shown} is a truncated SQLite database ({size:,} of its {page * pages:,} bytes); copy or export it again"
        )


def _connect(source: Path, shown: str) -> sqlite3.Connection:
    """Read-only: ``mode=ro`` never creates a journal; ``immutable=1`` besides for a database in WAL mode (header
    bytes 18-19 = 2), which SQLite would otherwise open with a -shm file beside it. A database another process holds
    locked answers at once (no busy wait) and says so."""
    with open(source, "rb") as fh:
        head = fh.read(20)
    wal = head[18:20] == b"\x02\x02"
    uri = f"file:{quote(str(source.resolve()))}?mode=ro" + ("&immutable=1" if wal else "")
    try:
        con = sqlite3.connect(uri, uri=True, timeout=0.2, check_same_thread=False)
        con.execute("PRAGMA query_only = 1")
        con.execute("PRAGMA temp_store = MEMORY")
    except sqlite3.DatabaseError as exc:
        raise database_error(shown, exc) from exc
    return con


def database_error(shown: str, exc: sqlite3.DatabaseError) -> InputError:
    """One sentence for what SQLite said: locked, damaged, or not a database."""
    msg = str(exc)
    if "locked" in msg or "busy" in msg:
        return InputError(
            f"{shown} is locked by another process (a profiler or export still writing it?); wait until it has"
            " finished and run again"
        )
    if "malformed" in msg or "not a database" in msg or "disk I/O" in msg or "corrupt" in msg:
        return InputError(f"{shown} is a damaged SQLite database ({msg}); copy or export it again ({EXPORT_HINT})")
    return InputError(f"{shown} could not be read as an Nsight Systems export ({msg}); export it again ({EXPORT_HINT})")
