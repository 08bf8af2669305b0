"""Nsight Systems SQLite export (``nsys export --type sqlite``) → the events table (docs/events-schema.md, section
"Nsight Systems SQLite").

The CUPTI kernel, memcpy, memset, synchronization and runtime tables and NVTX_EVENTS are read column-wise into Arrow
(:meth:`Database.arrow`, two tables at a time; names as StringIds ids, resolved once per distinct id) into the same
raw columns the Kineto reader makes, and :func:`tracekit.ingest.normalize.build_events` turns them into the events
table: the same kinds (by the Kineto category each table is given, ``tracekit/data/nsys.json``), the same
copy and communication classes, the same sort and clock-jump rule. Times are nsys's integer ns as stored. Every row
read is kept or counted by reason in the ingest report. A ``.nsys-rep`` is exported first (:func:`export_report`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..trace import IngestReport, Trace
from .kineto.columns import Pieces, RawColumns
from .kineto.schema import INT_ARGS
from .normalize import build_events, recorded
from .nsys_database import EXPORT_HINT, Database, column_or, is_sqlite
from .nvtx_ops import parse_op_texts, shapes_key

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
NO_START = "record without a start or end time"
BACKWARDS = "record that ends before it starts"
OPEN_RANGE = "NVTX range that was never closed (no end time)"
NVTX_DOMAIN = "NVTX domain record (its names are in meta nvtx_domains)"
NVTX_OTHER = "NVTX record that is not a range or mark (category, thread or CUDA object naming)"
NOT_EVENT_REASONS = frozenset({NVTX_DOMAIN, NVTX_OTHER})


@cache
def rules() -> dict[str, Any]:
    return json.loads(resources.files("tracekit.data").joinpath("nsys.json").read_text(encoding="utf-8"))


def is_report(source: Path) -> bool:
    return source.name.lower().endswith(REPORT_SUFFIXES)


def export_report(source: Path, shown: str, into: Path) -> Path:
    """Export a ``.nsys-rep`` to SQLite in the folder ``into`` with ``nsys`` when it is on PATH."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise InputError(
            f"{shown} is an Nsight Systems report, which tracekit reads once exported to SQLite; nsys is not on PATH"
            f" here, so export it where it is ({EXPORT_HINT}) and pass the .sqlite file"
        )
    out = into / (source.stem + ".sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not out.is_file():
        said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InputError(f"{shown}: nsys export failed ({said[0]}); run {EXPORT_HINT} yourself and pass the .sqlite")
    return out


@contextmanager
def exported(source: Path, shown: str) -> Iterator[Path]:
    """The SQLite export of a ``.nsys-rep`` for the time of a ``with``: written by ``nsys`` (:func:`export_report`)
    into a temporary folder of its own, never beside the report, and removed with it — the one place a report is
    exported (reading it, and listing the processes of a run's report)."""
    with tempfile.TemporaryDirectory(prefix="tracekit-nsys-") as tmp:
        yield export_report(source, shown, Path(tmp))


def read_nsys(source: Path, shown: str) -> Trace:
    """One nsys export (SQLite, or a .nsys-rep exported on the way) as a :class:`Trace`."""
    if is_report(source):
        with exported(source, shown) as db:
            return read_nsys_sqlite(db, shown, file_bytes=source.stat().st_size)
    return read_nsys_sqlite(source, shown)


def read_nsys_sqlite(source: Path, shown: str, file_bytes: int | None = None) -> Trace:
    db = Database(source, shown)
    try:
        parts, names = read_tables(db, list(rules()["tables"]))
        meta = _meta_of(db, shown)
    finally:
        db.close()
    report = IngestReport(path=shown, reader="nsys-sqlite", file_bytes=file_bytes or source.stat().st_size)
    report.text_bytes = source.stat().st_size
    raw, reasons = _raw_columns(parts, names)
    report.records_read = raw.n
    events, dropped, _ = build_events(raw)
    for reason, count in {**reasons, **dropped}.items():
        (report.not_events if reason in NOT_EVENT_REASONS else report.dropped)[reason] = count
    report.events_kept = len(events)
    if report.dropped:
        detail = "; ".join(f"{c} {r}" for r, c in sorted(report.dropped.items()))
        report.warnings.append(f"{shown}: dropped {sum(report.dropped.values())} unusable record(s): {detail}")
    report.check()
    if report.events_kept == 0:
        raise InputError(
            f"{shown} is an Nsight Systems export with no usable events ({report.records_read} records read);"
            " profile with nsys profile --trace=cuda,nvtx and export again"
        )
    gpu = events["kind"].isin(("kernel", "memcpy", "memset")).to_numpy()
    used = sorted(int(d) for d in np.unique(events["device"].to_numpy()[gpu]) if d >= 0)
    props = meta["device_properties"]
    sms = {d.get("numSms") for d in props if d.get("id") in used or not used}
    meta.update(devices_used=used, num_sms=sms.pop() if len(sms) == 1 and None not in sms else None)
    meta["device_pids"] = _device_pids(events, gpu)
    meta["profiler"]["recorded"] = recorded(events) + [k for k, n in meta.pop("_extra").items() if n]
    meta.update(meta.pop("_lanes"))
    return Trace(events=events, meta=meta, report=report)


class _Names:
    """Event names → codes (first-seen order, each text once: a category of the events table is one name)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def code(self, text: str) -> int:
        c = self.index.get(text)
        if c is None:
            c = self.index[text] = len(self.values)
            self.values.append(text)
        return c

    def table(self, texts: list[str]) -> np.ndarray:
        return np.array([self.code(t) for t in texts], dtype=np.int64)


def _string_ids(db: Database, ids: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The StringIds (ids sorted, texts) of the ids a column holds: only those, however many strings the export
    holds (the table is read once, column-wise, and shared by every reader)."""
    all_ids, all_texts = db.string_ids()
    want = np.unique(ids)
    at = np.clip(np.searchsorted(all_ids, want), 0, max(all_ids.size - 1, 0))
    found = want[all_ids[at] == want] if all_ids.size else want[:0]
    pos = np.searchsorted(all_ids, found)
    return found, [str(t) for t in all_texts.take(pa.array(pos)).to_pylist()]


def _lookup(ids: np.ndarray, known: np.ndarray, codes: np.ndarray, missing: int) -> np.ndarray:
    """Per id, the code of its text (``codes`` parallel to the sorted ``known`` ids); ``missing`` where unknown."""
    if known.size == 0:
        return np.full(ids.shape, missing, dtype=np.int64)
    at = np.clip(np.searchsorted(known, ids), 0, known.size - 1)
    return np.where(known[at] == ids, codes[at], missing)


def _enum(db: Database, table: str) -> dict[int, tuple[str, str]]:
    if table not in db.tables:
        return {}
    return {int(r[0]): (str(r[1]), str(r[2])) for r in db.query(f'SELECT id, name, label FROM "{table}"')}


# ----------------------------------------------------------------------------------------------- one table each


def read_tables(db: Database, tables: list[str]) -> tuple[list[dict[str, Any]], _Names]:
    """Every table's part, read two at a time (SQLite and Arrow work without the GIL), each naming its events in a
    table of its own; the names are then merged in the tables' order, so that the codes are what one reader
    reading the tables one after another would give. The largest tables start first (their last rowid, an index
    lookup, says how many rows), so that the longest read does not start last."""

    def rows(what: str) -> int:
        table = rules()["tables"][what]["table"]
        return db.rowids(table)[1] if table in db.tables else 0

    order = sorted(tables, key=lambda what: -rows(what))
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="tracekit-nsys") as pool:
        done = dict(zip(order, pool.map(lambda what: (_read_table(db, local := _Names(), what), local), order)))
    read = [done[what] for what in tables]
    names, parts = _Names(), []
    for part, local in read:
        if part is None:
            continue
        if local.values:
            remap = names.table(local.values)
            part["name"] = np.where(part["name"] >= 0, remap[np.clip(part["name"], 0, None)], part["name"])
        parts.append(part)
    return parts, names


def _read_table(db: Database, names: _Names, what: str) -> dict[str, Any] | None:
    spec = rules()["tables"][what]
    table = spec["table"]
    if table not in db.tables:
        return None
    return _READERS[what](db, names, table, spec["cat"])


def _gpu_common(db: Database, table: str, extra: list[str]) -> np.ndarray:
    return db.ints(
        table,
        [
            "coalesce(start, -1)",
            'coalesce("end", -1)',
            column_or(db, table, "deviceId"),
            column_or(db, table, "streamId"),
            column_or(db, table, "correlationId"),
            column_or(db, table, "globalPid"),
            *extra,
        ],
    )


def _gpu_part(a: np.ndarray, cat: str, name: np.ndarray) -> dict[str, Any]:
    gpid = a[:, 5]
    return {
        "cat": cat,
        "start": a[:, 0],
        "end": a[:, 1],
        "device": a[:, 2],
        "stream": a[:, 3],
        "correlation": a[:, 4],
        "pid": np.where(gpid >= 0, (gpid >> 24) & 0xFFFFFF, -1),
        "tid": a[:, 3],
        "name": name,
    }


def _kernels(db: Database, names: _Names, table: str, cat: str) -> dict[str, Any]:
    col = "demangledName" if "demangledName" in db.columns(table) else "shortName"
    dims = ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]
    a = _gpu_common(
        db,
        table,
        [
            column_or(db, table, col),
            column_or(db, table, "registersPerThread"),
            *(column_or(db, table, d) for d in dims),
            f"{column_or(db, table, 'staticSharedMemory', 0)} + {column_or(db, table, 'dynamicSharedMemory', 0)}",
        ],
    )
    known, texts = _string_ids(db, a[:, 6])
    part = _gpu_part(a, cat, _lookup(a[:, 6], known, names.table(texts), names.code("<unnamed kernel>")))
    part.update(registers=a[:, 7], grid=a[:, 8:11], block=a[:, 11:14], shared_mem=a[:, 14])
    return part


def _count_not_null(db: Database, table: str, columns: tuple[str, ...]) -> dict[str, int]:
    """Per column, how many rows of ``table`` hold a value in it (0 where the table or column is not there), all
    counted in one pass over the table."""
    have = [c for c in columns if c in db.columns(table)] if table in db.tables else []
    counts = ", ".join('count("' + c + '")' for c in have)
    got = db.query(f'SELECT {counts} FROM "{table}"')[0] if have else ()
    return {c: int(got[have.index(c)]) if c in have else 0 for c in columns}


def _copy_direction(enum_name: str) -> str:
    """CUDA_MEMCPY_KIND_HTOD → HtoD (Kineto's spelling of a copy's direction)."""
    token = enum_name.rsplit("_", 1)[-1]
    if "TO" not in token:
        return token.capitalize()
    a, b = token.split("TO", 1)
    return f"{a}to{b}"


def _memcpys(db: Database, names: _Names, table: str, cat: str) -> dict[str, Any]:
    a = _gpu_common(
        db,
        table,
        [
            column_or(db, table, "bytes"),
            column_or(db, table, "copyKind", 0),
            column_or(db, table, "srcKind", 7),
            column_or(db, table, "dstKind", 7),
        ],
    )
    kinds, mems = _enum(db, "ENUM_CUDA_MEMCPY_OPER"), _enum(db, "ENUM_CUDA_MEM_KIND")
    trip, inv = np.unique(a[:, 7:10], axis=0, return_inverse=True)

    def label(table: dict, k: int) -> str:
        return table.get(k, ("", "Unknown"))[1]

    texts = [  # per distinct (direction, source, destination): Kineto's "Memcpy HtoD (Pageable -> Device)"
        f"Memcpy {_copy_direction(kinds.get(k, ('UNKNOWN', ''))[0])} ({label(mems, s)} -> {label(mems, d)})"
        for k, s, d in trip.tolist()
    ]
    part = _gpu_part(a, cat, names.table(texts)[inv.reshape(-1)] if texts else np.zeros(0, dtype=np.int64))
    part["bytes"] = a[:, 6]
    return part


def _memsets(db: Database, names: _Names, table: str, cat: str) -> dict[str, Any]:
    a = _gpu_common(db, table, [column_or(db, table, "bytes"), column_or(db, table, "memKind", 7)])
    mems = _enum(db, "ENUM_CUDA_MEM_KIND")
    kinds, inv = np.unique(a[:, 7], return_inverse=True)
    texts = [f"Memset ({mems.get(k, ('', 'Unknown'))[1]})" for k in kinds.tolist()]
    part = _gpu_part(a, cat, names.table(texts)[inv.reshape(-1)] if texts else np.zeros(0, dtype=np.int64))
    part["bytes"] = a[:, 6]
    return part


def _syncs(db: Database, names: _Names, table: str, cat: str) -> dict[str, Any]:
    a = _gpu_common(db, table, [column_or(db, table, "syncType", 0)])
    types, by_type = _enum(db, "ENUM_CUPTI_SYNC_TYPE"), rules()["sync_names"]
    kinds, inv = np.unique(a[:, 6], return_inverse=True)
    prefix = "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_"
    texts = [by_type.get(types.get(k, ("UNKNOWN", ""))[0].replace(prefix, ""), "Sync") for k in kinds.tolist()]
    return _gpu_part(a, cat, names.table(texts)[inv.reshape(-1)] if texts else np.zeros(0, dtype=np.int64))


def _cpu_ids(gtid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """nsys's serialized global thread id → (pid, tid): bits 24-47 and 0-23."""
    ok = gtid >= 0
    return np.where(ok, (gtid >> 24) & 0xFFFFFF, -1), np.where(ok, gtid & 0xFFFFFF, -1)


def _runtime(db: Database, names: _Names, table: str, cat: str) -> dict[str, Any]:
    a = db.ints(
        table,
        [
            "coalesce(start, -1)",
            'coalesce("end", -1)',
            column_or(db, table, "globalTid"),
            column_or(db, table, "correlationId"),
            column_or(db, table, "nameId"),
        ],
    )
    known, texts = _string_ids(db, a[:, 4])
    suffix, driver = re.compile(rules()["runtime_version_suffix"]), re.compile(rules()["driver_api"])
    plain = [suffix.sub("", t) for t in texts]  # cudaLaunchKernel_v7000 → cudaLaunchKernel, as Kineto names it
    codes = names.table(plain)
    pid, tid = _cpu_ids(a[:, 2])
    # the driver API's calls are Kineto's cuda_driver category: per name, as a code into the two categories
    is_driver = np.array([bool(driver.match(t)) for t in plain], dtype=np.int64)
    cat_code = _lookup(a[:, 4], known, is_driver, 0)
    return {
        "cat": [cat, rules()["driver_cat"]],
        "cat_code": cat_code,
        "start": a[:, 0],
        "end": a[:, 1],
        "pid": pid,
        "tid": tid,
        "correlation": a[:, 3],
        "name": _lookup(a[:, 4], known, codes, names.code("<unnamed call>")),
    }


def _nvtx(db: Database, names: _Names, table: str, cat: str) -> dict[str, Any]:
    """NVTX ranges (cpu_annotation, nesting kept as written: every range is its own event on its thread; PyTorch's
    emit_nvtx op ranges are cpu_ops named by their op, with their sizes: :func:`_op_ranges`) and marks (instant);
    domain records give meta's ``nvtx_domains``; the rest are counted, not events."""
    exprs = [
        "coalesce(start, -1)",
        'coalesce("end", -1)',
        column_or(db, table, "eventType"),
        column_or(db, table, "globalTid"),
        column_or(db, table, "textId"),
    ]
    has_text = "text" in db.columns(table)
    a, written = db.ints_and_text(table, exprs, "text") if has_text else (db.ints(table, exprs), None)
    types = {name: k for k, (name, _) in _enum(db, "ENUM_NSYS_EVENT_TYPE").items()}
    want = rules()["nvtx_types"]
    ranges = np.isin(a[:, 2], [types[t] for t in want["ranges"] if t in types] or [59, 60, 70, 71])
    marks = np.isin(a[:, 2], [types[t] for t in want["marks"] if t in types] or [34, 65])
    domains = np.isin(a[:, 2], [types[t] for t in want["domains"] if t in types] or [75])
    # each range's or mark's text (the registered string, textId's, where there is one, else the text as written) as
    # a code into its distinct texts: emit_nvtx writes a distinct text per op call (its op_id), so no Python string
    # is made per text, and no string is copied per row
    named = ranges | marks
    distinct, idx = _distinct_texts(db, a[:, 4], written, named)
    by_id, is_op, shapes, shapes_uniques = _range_names(names, distinct, idx, named, ranges)
    pid, tid = _cpu_ids(a[:, 3])
    end = np.where(marks, a[:, 0], a[:, 1])
    reason = np.full(len(a), "", dtype=object)
    reason[~(ranges | marks)] = NVTX_OTHER
    reason[domains] = NVTX_DOMAIN
    reason[ranges & (a[:, 1] < 0)] = OPEN_RANGE
    return {
        "cat": [cat, "cpu_op"],
        "cat_code": is_op.astype(np.int64),
        "start": a[:, 0],
        "end": end,
        "pid": pid,
        "tid": tid,
        "name": by_id,
        "instant": marks,
        "reason": reason,
        "shapes": shapes,
        "shapes_uniques": shapes_uniques,
    }


def _distinct_texts(
    db: Database, ids: np.ndarray, written: pa.ChunkedArray | pa.Array | None, named: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    """Per NVTX row, its text (``ids``' StringIds text where the id is there, else the text ``written`` in the row;
    none where not ``named``) as the distinct texts in the order the rows first give them and, per row, its text's
    position among them (-1: none): what Arrow's dictionary encoding of the rows' texts gives, made of int codes
    only (the StringIds and written texts each encoded once, the texts common to both made one)."""
    n = len(ids)
    all_ids, all_texts = db.string_ids()
    at = np.clip(np.searchsorted(all_ids, ids), 0, max(all_ids.size - 1, 0))
    found = (all_ids[at] == ids) & all_texts.is_valid().to_numpy(zero_copy_only=False)[at] if all_ids.size else None
    key = np.full(n, -1, dtype=np.int64)  # a StringIds position, or all_ids.size + a written text's code
    if written is not None:
        enc = _one_dictionary(pc.dictionary_encode(written))
        given = enc.chunk(0).dictionary if enc.num_chunks else pa.array([], type=pa.string())
        codes = np.concatenate(
            [c.indices.fill_null(-1).to_numpy(zero_copy_only=False) for c in enc.chunks] or [np.zeros(0)]
        ).astype(np.int64)
        key = np.where(codes >= 0, codes + all_ids.size, -1)
    else:
        given = pa.array([], type=pa.string())
    if found is not None:
        key = np.where(found, at, key)
    key[~named] = -1
    used = np.flatnonzero(np.bincount(key[key >= 0], minlength=all_ids.size + len(given)))
    candidates = pa.concat_arrays([all_texts.cast(pa.string()), given.cast(pa.string())]).take(pa.array(used))
    same = pc.dictionary_encode(candidates)  # a text both registered and written is one text
    text_of_key = np.full(all_ids.size + len(given) + 1, -1, dtype=np.int64)  # the last: no key
    text_of_key[used] = same.indices.to_numpy(zero_copy_only=False)
    per_row = pc.dictionary_encode(pa.array(text_of_key[key], mask=key < 0))  # the texts in the rows' first order
    idx = per_row.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return same.dictionary.take(per_row.dictionary), idx


def _one_dictionary(enc: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray:
    """Dictionary-encoded chunks with one dictionary: Arrow gives every chunk of a chunked array the one dictionary of
    the whole (the same buffers, checked here); only where it did not are the dictionaries unified (slow: each
    chunk's dictionary is compared)."""
    if isinstance(enc, pa.Array):
        return pa.chunked_array([enc])
    shared = {(c.dictionary.buffers()[1].address, len(c.dictionary)) for c in enc.chunks if c.dictionary.buffers()[1]}
    return enc if len(shared) <= 1 else enc.unify_dictionaries()


def _range_names(
    names: _Names, distinct: pa.Array, idx: np.ndarray, named: np.ndarray, ranges: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bytes]]:
    """Per NVTX row (``distinct``: the rows' distinct texts, ``idx``: each row's among them, -1 where none or not
    ``named``): its name code, whether it is a PyTorch emit_nvtx op range (:mod:`.nvtx_ops`: a cpu_op, as Kineto's
    ops, named by its op), a code into the returned ``shapes`` keys where its text gives sizes (-1 elsewhere). A
    record_function scope is named without its ``op_id`` part; a range or mark without a text is ``<unnamed range>``.
    Each distinct text is parsed once, by Arrow; names are made only of the distinct results (an op's name, not each
    call's text)."""
    n = len(idx)
    parsed = parse_op_texts(distinct, rules()["emit_nvtx_op"], rules()["emit_nvtx_op_names"])
    final = pc.dictionary_encode(parsed.op)  # per distinct text, its name: the op's or scope's, else the text
    name_code = names.table(final.dictionary.to_pylist())[final.indices.to_numpy()] if len(final.dictionary) else None
    by_id = np.full(n, -1, dtype=np.int64)
    has = idx >= 0
    if name_code is not None:
        by_id[has] = name_code[idx[has]]
    by_id[named & ~has] = names.code("<unnamed range>")
    is_op = np.zeros(n, dtype=bool)
    is_op[has] = parsed.is_op[idx[has]]
    is_op &= ranges
    shapes = np.full(n, -1, dtype=np.int32)
    if not is_op.any():
        return by_id, is_op, shapes, []
    sizes = pc.dictionary_encode(parsed.sizes)  # each sizes text made a key once
    keys = [shapes_key(z) for z in sizes.dictionary.to_pylist()]
    uniques = sorted({k for k in keys if k is not None})
    at = {k: i for i, k in enumerate(uniques)}
    key_code = np.array([at[k] if k is not None else -1 for k in keys] + [-1], dtype=np.int32)
    per_text = key_code[sizes.indices.fill_null(-1).to_numpy(zero_copy_only=False)]  # -1 (null) takes the last
    shapes[is_op] = per_text[idx[is_op]]
    return by_id, is_op, shapes, uniques


_READERS = {
    "kernel": _kernels,
    "memcpy": _memcpys,
    "memset": _memsets,
    "sync": _syncs,
    "runtime": _runtime,
    "nvtx": _nvtx,
}


# ------------------------------------------------------------------------------------- parts → raw columns


def _raw_columns(parts: list[dict[str, Any]], names: _Names) -> tuple[RawColumns, dict[str, int]]:
    """The tables' parts as the raw columns of :func:`build_events` (event_id: the row's position in the tables
    read in the order of nsys.json), and the counts of rows not kept, by reason. Each column is left in its parts'
    :class:`Pieces`, joined only when build_events gathers it (fresh pages cost more than the copy), and a part whose
    rows are all kept gives its own arrays, not a copy."""
    cats: list[str] = []
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("row", "cat", "name", "pid", "tid", "ts", "dur", "inst")}
    ints: dict[str, list[np.ndarray]] = {k: [] for k in INT_ARGS}
    grids: list[np.ndarray] = []
    blocks: list[np.ndarray] = []
    shapes: list[np.ndarray] = []
    shapes_uniques: list[bytes] = []
    reasons: dict[str, int] = {}
    offset = 0
    _unique_correlations(parts)
    labels = ["", NO_START, BACKWARDS]  # why a row is not kept, as int codes (0: kept): no object compare per row
    for p in parts:
        n = len(p["start"])
        why = np.zeros(n, dtype=np.int16)
        if "reason" in p:
            codes, given = pd.factorize(p["reason"])
            at = [
                labels.index(str(r)) if str(r) in labels else (labels.append(str(r)) or len(labels) - 1) for r in given
            ]
            why = np.asarray(at, dtype=np.int16)[codes] if len(given) else why
        why[(why == 0) & ((p["start"] < 0) | (p["end"] < 0))] = 1
        why[(why == 0) & (p["end"] < p["start"])] = 2
        counted = [(labels[code], c) for code, c in enumerate(np.bincount(why, minlength=len(labels)).tolist())]
        for r, c in sorted((r, c) for r, c in counted if r and c):  # by reason, as np.unique gave them
            reasons[r] = reasons.get(r, 0) + c
        keep = np.flatnonzero(why == 0)
        every = keep.size == n

        def kept(x: np.ndarray, every: bool = every, keep: np.ndarray = keep) -> np.ndarray:
            return x if every else x[keep]

        cat_list = p["cat"] if isinstance(p["cat"], list) else [p["cat"]]
        cat_codes = [cats.index(c) if c in cats else (cats.append(c) or len(cats) - 1) for c in cat_list]
        local = p.get("cat_code")
        cols["row"].append(offset + keep)
        cat_of = np.array(cat_codes, dtype=np.int32)
        cols["cat"].append(np.full(keep.size, cat_of[0], dtype=np.int32) if local is None else cat_of[kept(local)])
        cols["name"].append(kept(p["name"]).astype(np.int32))
        cols["pid"].append(np.ascontiguousarray(kept(p["pid"]), dtype=np.int64))
        cols["tid"].append(np.ascontiguousarray(kept(p["tid"]), dtype=np.int64))
        start = np.ascontiguousarray(kept(p["start"]), dtype=np.int64)
        cols["ts"].append(start)
        cols["dur"].append(kept(p["end"]) - start)
        cols["inst"].append(kept(p["instant"]).astype(bool) if "instant" in p else np.zeros(keep.size, dtype=bool))
        for k in INT_ARGS:
            ints[k].append(
                np.ascontiguousarray(kept(p[k]), dtype=np.int64) if k in p else np.full(keep.size, -1, dtype=np.int64)
            )
        none = np.full((keep.size, 3), -1, dtype=np.int32)
        grids.append(kept(p["grid"]).astype(np.int32) if "grid" in p else none)
        blocks.append(kept(p["block"]).astype(np.int32) if "block" in p else none)
        sh = kept(p["shapes"]) if "shapes" in p else np.full(keep.size, -1, dtype=np.int32)
        shapes.append(np.where(sh >= 0, sh + len(shapes_uniques), -1).astype(np.int32))
        shapes_uniques += p.get("shapes_uniques", [])
        offset += n

    def pieces(xs: list[np.ndarray], dtype: type = np.int64, width: int = 0) -> Pieces:
        return Pieces(xs, np.zeros((0, width) if width else 0, dtype=dtype))

    raw = RawColumns(
        n=offset,
        row=pieces(cols["row"]),
        cat=pieces(cols["cat"], np.int32),
        cat_uniques=cats,
        name=pieces(cols["name"], np.int32),
        name_uniques=names.values,
        pid=pieces(cols["pid"]),
        tid=pieces(cols["tid"]),
        ts_ns=pieces(cols["ts"]),
        dur_ns=pieces(cols["dur"]),
        instant=pieces(cols["inst"], bool),
        ints={k: pieces(v) for k, v in ints.items()},
        grid=pieces(grids, np.int32, 3),
        block=pieces(blocks, np.int32, 3),
        kind_arg={},
        shapes=pieces(shapes, np.int32),
        shapes_uniques=shapes_uniques,
        meta=[],
        reasons={},
    )
    return raw, reasons


def _unique_correlations(parts: list[dict[str, Any]]) -> None:
    """CUPTI numbers correlations per process: with several processes in one export, each process's ids are moved
    to their own range (+ its index among the processes × 2^32) so that a launch finds only its own GPU work."""
    pids = np.unique(np.concatenate([p["pid"][p["correlation"] >= 0] for p in parts if "correlation" in p] or [[]]))
    if pids.size < 2:
        return
    for p in parts:
        if "correlation" in p:
            c, at = p["correlation"], np.searchsorted(pids, p["pid"])
            p["correlation"] = np.where(c >= 0, c + (at.astype(np.int64) << 32), -1)


# ----------------------------------------------------------------------------------------------------- meta


def _meta_of(db: Database, shown: str) -> dict[str, Any]:
    export = dict(db.query("SELECT name, value FROM META_DATA_EXPORT")) if "META_DATA_EXPORT" in db.tables else {}
    version = export.get("EXPORT_PRODUCT_VERSION")
    domains = {}
    if "NVTX_EVENTS" in db.tables and "domainId" in db.columns("NVTX_EVENTS"):
        rows = db.query(
            'SELECT domainId, coalesce("text", (SELECT value FROM StringIds WHERE id = textId)) FROM NVTX_EVENTS'
            " WHERE eventType = 75"
        )
        domains = {str(int(d)): str(t) for d, t in rows if d is not None and t is not None}
    graph = _count_not_null(db, rules()["tables"]["kernel"]["table"], ("graphNodeId", "graphId"))
    extra = {"graph_node_ids": graph["graphNodeId"], "graph_ids": graph["graphId"]}
    return {
        "source": shown,
        "rank": None,
        "world_size": None,
        "backend": None,
        "distributed_info": {},
        "device_properties": _devices(db),
        "base_time_ns": None,
        "schema_version": export.get("EXPORT_SCHEMA_VERSION"),
        "display_time_unit": "ns",
        "trace_name": export.get("EXPORT_PARAM_INPUT_FILE"),
        "session_start_utc_ns": _session_start(db),
        "nvtx_domains": domains,
        "profiler": {
            "name": "nsys",
            "label": f"NVIDIA Nsight Systems {version}" if version else "NVIDIA Nsight Systems",
            "version": version,
            "recorded": [],
        },
        "_extra": extra,
        "_lanes": _lanes(db),
    }


def _session_start(db: Database) -> int | None:
    """The UTC time (ns since 1970) at which the export's clock reads 0, from TARGET_INFO_SESSION_START_TIME."""
    t = "TARGET_INFO_SESSION_START_TIME"
    if t not in db.tables or not {"utcEpochNs", "systemClockNs"} <= set(db.columns(t)):
        return None
    row = db.query(f"SELECT utcEpochNs, systemClockNs FROM {t} LIMIT 1")
    return int(row[0][0]) - int(row[0][1]) if row and row[0][0] is not None and row[0][1] is not None else None


def _devices(db: Database) -> list[dict[str, Any]]:
    """TARGET_INFO_GPU (where the export has it) as Kineto's deviceProperties (names in nsys.json)."""
    t = "TARGET_INFO_GPU"
    if t not in db.tables:
        return []
    fields = rules()["device_fields"]
    cols = [c for c in db.columns(t) if c in fields]
    if not cols:
        return []
    out = []
    for row in db.query(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM {t}"):  # one row per GPU
        d = {fields[c]: v for c, v in zip(cols, row) if v is not None}
        if isinstance(d.get("maxWarpsPerSm"), int) and isinstance(d.get("warpSize"), int):
            d["maxThreadsPerMultiprocessor"] = d["maxWarpsPerSm"] * d["warpSize"]
        out.append(d)
    return out


def _lanes(db: Database) -> dict[str, dict[str, str]]:
    processes: dict[str, str] = {}
    threads: dict[str, str] = {}
    if "PROCESSES" in db.tables:
        for pid, name in db.query("SELECT pid, name FROM PROCESSES"):
            if pid is not None and name is not None:
                processes[str(int(pid))] = str(name)
    if "ThreadNames" in db.tables:
        rows = db.query(
            "SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId"
            " WHERE t.globalTid IS NOT NULL"
        )
        for gtid, name in rows:
            g = int(gtid)
            threads[f"{(g >> 24) & 0xFFFFFF}:{g & 0xFFFFFF}"] = str(name)
    return {"process_names": processes, "thread_names": threads}


def _device_pids(events: pd.DataFrame, gpu: np.ndarray) -> dict[str, list[int]]:
    """Per device with GPU activity, the process(es) whose work ran on it (one per device: one rank each)."""
    dev, pid = events["device"].to_numpy()[gpu].astype(np.int64), events["pid"].to_numpy()[gpu]
    if dev.size and pid.min() >= -1 and pid.max() < 2**31:  # a pair as one int (hashed, not sorted per event)
        keys = np.sort(pd.unique((dev << 32) | (pid + 1)))
        pairs = np.stack([keys >> 32, (keys & 0xFFFFFFFF) - 1])
    else:
        pairs = np.unique(np.stack([dev, pid]), axis=1) if dev.size else np.zeros((2, 0), np.int64)
    out: dict[str, list[int]] = {}
    for d, p in pairs.T.tolist():
        if d >= 0:
            out.setdefault(str(d), []).append(int(p))
    return out


def reads_nsys(source: Path) -> bool:
    """Whether ``source`` is for this reader: an SQLite database (by its magic header, whatever its name) or an
    Nsight Systems report (``.nsys-rep``, whose content only nsys reads)."""
    try:
        with open(source, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return False  # the Kineto reader says what is wrong with the path
    return is_sqlite(head) or is_report(source)
