"""An Nsight Systems SQLite export, opened read-only and checked: whether a file is an SQLite database at all (its
magic header), whether it is whole (the header's page count against the file's size), whether it is an nsys export
(its tables), and the read-only connection that never writes a journal, a WAL or a shared-memory file beside it.
Every failure is one :class:`~tracekit.errors.InputError` sentence naming the file (exit 3). The generic read-only
part (:class:`ReadOnlySqlite`) serves the other profilers' SQLite files too (rocprofv3's rocpd database).

The columns themselves are read by :mod:`tracekit.ingest.nsys_sqlite`.
"""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pyarrow as pa

from ..errors import InputError
from .sqlite_kinds import refusal

try:  # the Arrow reader (ADBC's SQLite driver): columns straight into Arrow, no Python object per row
    import adbc_driver_sqlite.dbapi as adbc_sqlite
except ImportError:  # pragma: no cover - a dependency; sqlite3's fetchall is the slower fallback
    adbc_sqlite = None

SQLITE_MAGIC = b"SQLite format 3\x00"
EXPORT_HINT = "nsys export --type sqlite --output FILE.sqlite FILE.nsys-rep"
# an nsys export always has these; a kernel or NVTX table says it recorded something tracekit reads (a database
# without them is refused with the sentence of what it is: tracekit/data/sqlite_kinds.json)
NSYS_MARKERS = ("StringIds",)
NSYS_EVENT_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME")
# a table of at least this many rows is read in rowid ranges, READERS at a time (a b-tree range seek each), so that
# both cores read the largest table and finish together; a smaller table is one query
SPLIT_ROWS = 65_536
READERS = 2
BATCH_OPTION = "adbc.sqlite.query.batch_rows"  # ADBC's SQLite statement option: rows per batch read
ONE_BATCH = 2**31 - 2  # the most rows ADBC's SQLite driver takes for one batch (2**31 - 1 is refused)


def is_sqlite(head: bytes) -> bool:
    """Whether the first bytes of a file are SQLite's magic header."""
    return head[:16] == SQLITE_MAGIC


class ReadOnlySqlite:
    """A read-only connection to one SQLite file of a profiler (``sqlite3``, for the small queries), its table and
    view names, and query results read column-wise into Arrow (:meth:`arrow`, through ADBC's SQLite driver on its own
    read-only connection). ``what`` and ``hint`` name the kind of file and how to make it again in the sentences
    of its errors."""

    def __init__(self, source: Path, shown: str, what: str = "an Nsight Systems export", hint: str = EXPORT_HINT):
        self.source, self.shown, self.what, self.hint = source, shown, what, hint
        _check_header(source, shown)
        self.con = _connect(source, shown, what, hint)
        try:
            names = self.con.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise database_error(shown, exc, what, hint) from exc
        self.tables = {str(n[0]) for n in names if n[1] == "table"}
        self.views = {str(n[0]) for n in names if n[1] == "view"}
        self._columns: dict[str, list[str]] = {}

    def close(self) -> None:
        self.con.close()

    def arrow(self, sql: str, batch_rows: int | None = None) -> pa.Table:
        """The result of ``sql`` as an Arrow table, read column-wise (ADBC, on a read-only connection of its own, so
        that tables can be read in parallel threads); through ``fetchall`` where the driver is not installed. The
        driver infers each column's type from its first batch of rows (``batch_rows``, else its default, 1024): a
        column NULL in all of them is taken for an integer one."""
        if adbc_sqlite is None:  # pragma: no cover
            cur = self.con.execute(sql)
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
            return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})
        try:
            with adbc_sqlite.connect(_uri(self.source)) as con, con.cursor() as cur:
                if batch_rows is not None:
                    cur.adbc_statement.set_options(**{BATCH_OPTION: str(min(max(batch_rows, 1), ONE_BATCH))})
                cur.execute(sql)
                return cur.fetch_arrow_table()
        except (adbc_sqlite.Error, OSError) as exc:  # a reader's error reaches Python as Arrow's OSError
            raise database_error(self.shown, exc, self.what, self.hint) from exc

    def columns(self, table: str) -> list[str]:
        if table not in self._columns:
            known = table in self.tables or table in self.views
            rows = self.query(f'PRAGMA table_info("{table}")') if known else []
            self._columns[table] = [str(r[1]) for r in rows]
        return self._columns[table]

    def query(self, sql: str, params: tuple = ()) -> list:
        try:
            return self.con.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise database_error(self.shown, exc, self.what, self.hint) from exc


class Database(ReadOnlySqlite):
    """A read-only connection to one nsys export, checked to be one (its tables), with the columns of its event
    tables read column-wise into Arrow: integers into numpy (:meth:`ints`), texts as Arrow strings (:meth:`ints_and_text`),
    never a Python object per row."""

    def __init__(self, source: Path, shown: str):
        self._strings: tuple[np.ndarray, pa.Array] | None = None
        self._lock = threading.Lock()
        self._bounds: dict[str, tuple[int, int]] = {}
        self._readers: ThreadPoolExecutor | None = None  # made at the first read (READERS threads)
        super().__init__(source, shown)
        if not all(t in self.tables for t in NSYS_MARKERS) or not any(t in self.tables for t in NSYS_EVENT_TABLES):
            self.close()  # what the file is instead, by its tables (sqlite_kinds.json), in one sentence
            raise refusal(shown, frozenset(self.tables | self.views))

    def close(self) -> None:
        if self._readers is not None:
            self._readers.shutdown()
        super().close()

    def rowids(self, table: str) -> tuple[int, int]:
        """The first and last rowid of ``table`` (two b-tree lookups; (1, 0) when it is empty)."""
        with self._lock:
            if table not in self._bounds:
                lo, hi = self.query(  # one aggregate per SELECT: each is a b-tree lookup, not a scan
                    f'SELECT coalesce((SELECT min(rowid) FROM "{table}"), 1), coalesce((SELECT max(rowid) FROM "{table}"), 0)'
                )[0]
                self._bounds[table] = (int(lo), int(hi))
            return self._bounds[table]

    def string_ids(self) -> tuple[np.ndarray, pa.Array]:
        """StringIds as (ids ascending, their texts), read once."""
        with self._lock:
            if self._strings is None:
                tab = self.arrow("SELECT id, CAST(value AS TEXT) AS value FROM StringIds ORDER BY id")
                ids = tab.column(0).to_numpy().astype(np.int64) if tab.num_rows else np.zeros(0, dtype=np.int64)
                texts = tab.column(1).combine_chunks() if tab.num_rows else pa.array([], type=pa.string())
                self._strings = (ids, texts)
            return self._strings

    def ints(self, table: str, exprs: list[str], where: str = "") -> np.ndarray:
        """The integer expressions ``exprs`` of every row of ``table`` (rowid order) as an (n, len(exprs)) int64
        array; NULL is -1 (each expression is written so)."""
        return self._int_matrix(table, exprs, self._select(table, exprs, where=where))

    def ints_and_text(self, table: str, exprs: list[str], column: str) -> tuple[np.ndarray, pa.ChunkedArray]:
        """:meth:`ints` and the text ``column`` of every row (Arrow strings, in the chunks read; NULL where none),
        in one pass over the table."""
        tab = self._select(table, exprs, text=column)
        return self._int_matrix(table, exprs, tab.drop_columns([tab.column_names[-1]])), tab.column(len(exprs))

    def _select(self, table: str, exprs: list[str], where: str = "", text: str | None = None) -> pa.Table:
        cols = ", ".join(
            [f"{e} AS c{i}" for i, e in enumerate(exprs)] + ([f'CAST("{text}" AS TEXT) AS t'] if text else [])
        )
        ranges = self._ranges(table)
        sqls = [
            f'SELECT {cols} FROM "{table}"'
            + (" WHERE " + " AND ".join(f"({w})" for w in (where, between) if w) if where or between else "")
            + " ORDER BY rowid"
            for between, _ in ranges
        ]
        with self._lock:  # every table's reads go through READERS threads: never more reads than cores at once
            if self._readers is None:
                self._readers = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="tracekit-sqlite")
        try:  # each range one batch: its columns' types are inferred from all its rows, not its first 1024
            parts = list(self._readers.map(self.arrow, sqls, [rows for _, rows in ranges]))
        except InputError as exc:  # the driver refuses a column whose type changes from row to row
            if "type mismatch" not in str(exc).lower():
                raise
            raise self._not_integer(table, str(exc)) from exc
        if text:  # a range without any text reads as an integer column of NULLs: it is a text column of NULLs
            parts = [_null_texts(t, "t") for t in parts]
        if len(parts) == 1:
            return parts[0]
        try:  # a range whose column is all NULL reads as Arrow's null type: the others' type is taken
            return pa.concat_tables(parts, promote_options="default")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # an integer in one range, a text in another
            raise self._not_integer(table, str(exc)) from exc

    def _ranges(self, table: str) -> list[tuple[str, int]]:
        """The rowid ranges ``table`` is read in (a condition, "" for the whole table, and the most rows it can
        hold): READERS equal ranges of a table of SPLIT_ROWS rows or more, which the readers' threads read at the
        same time. Ranges in rowid order, each read ORDER BY rowid, so that their rows one after another are the
        table's."""
        lo, hi = self.rowids(table)
        if hi - lo + 1 < SPLIT_ROWS:
            return [("", hi - lo + 1)]
        step = -(-(hi - lo + 1) // READERS)
        return [(f"rowid BETWEEN {a} AND {min(a + step - 1, hi)}", step) for a in range(lo, hi + 1, step)]

    def _int_matrix(self, table: str, exprs: list[str], tab: pa.Table) -> np.ndarray:
        out = np.empty((tab.num_rows, len(exprs)), dtype=np.int64, order="F")  # a column is contiguous
        for i, col in enumerate(tab.columns):
            if not (pa.types.is_integer(col.type) or pa.types.is_null(col.type)):
                raise self._not_integer(table, f"{exprs[i]} is {col.type}")
            if col.null_count:
                raise self._not_integer(table, f"{exprs[i]} holds NULL")
            at = 0
            for chunk in col.chunks:  # each read batch straight into its place (no concatenated copy first)
                out[at : at + len(chunk), i] = chunk.to_numpy()
                at += len(chunk)
        return out

    def _not_integer(self, table: str, what: str) -> InputError:
        return InputError(
            f"{self.shown}: the table {table} holds a value that is not an integer in a column that must be"
            f" one ({what}); pass an unmodified export ({EXPORT_HINT})"
        )


def _null_texts(tab: pa.Table, name: str) -> pa.Table:
    """``tab`` with its column ``name`` as Arrow strings where the driver read it as another type because it held
    no value at all (all NULL); otherwise as it is."""
    at = tab.schema.get_field_index(name)
    col = tab.column(at)
    if pa.types.is_string(col.type) or col.null_count != len(col):
        return tab
    return tab.set_column(at, name, pa.nulls(len(col), pa.string()))


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


def _connect(source: Path, shown: str, what: str, hint: str) -> sqlite3.Connection:
    """Read-only: ``mode=ro`` never creates a journal; ``immutable=1`` besides for a database in WAL mode (header
    bytes 18-19 = 2), which SQLite would otherwise open with a -shm file beside it. A database another process holds
    locked answers at once (no busy wait) and says so."""
    try:
        con = sqlite3.connect(_uri(source), uri=True, timeout=0.2, check_same_thread=False)
        con.execute("PRAGMA query_only = 1")
        con.execute("PRAGMA temp_store = MEMORY")
    except sqlite3.DatabaseError as exc:
        raise database_error(shown, exc, what, hint) from exc
    return con


def _uri(source: Path) -> str:
    """The read-only URI of a database (both connections open it so)."""
    with open(source, "rb") as fh:
        head = fh.read(20)
    wal = head[18:20] == b"\x02\x02"
    return f"file:{quote(str(source.resolve()))}?mode=ro" + ("&immutable=1" if wal else "")


def database_error(
    shown: str, exc: Exception, what: str = "an Nsight Systems export", hint: str = EXPORT_HINT
) -> InputError:
    """One sentence for what SQLite said: locked, damaged, or not a database (``what``: the kind of file expected,
    ``hint``: how to make it again)."""
    msg = str(exc)
    if "locked" in msg or "busy" in msg:
        return InputError(
            f"{shown} is locked by another process (a profiler or export still writing it?); wait until it has"
            " finished and run again"
        )
    if "malformed" in msg or "not a database" in msg or "disk I/O" in msg or "corrupt" in msg:
        return InputError(f"{shown} is a damaged SQLite database ({msg}); copy or export it again ({hint})")
    return InputError(f"{shown} could not be read as {what} ({msg}); export it again ({hint})")
