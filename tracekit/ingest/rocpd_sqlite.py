"""rocprofv3's rocpd SQLite database (ROCm 7's default output: ``rocprofv3 --kernel-trace --hip-trace`` writes
``results.db``) → the events table, chosen by content (:func:`is_rocpd`: an SQLite file with ``rocpd_`` tables).

The schema is rocprofiler-sdk's (``source/share/rocprofiler-sdk-rocpd/rocpd_tables.sql``): every table carries a
``{{uuid}}`` suffix and has an unsuffixed view of the same name (``rocpd_views.sql``), read where present, else the
suffixed table(s) themselves (several uuids: their union). Read column-wise into Arrow (ADBC, the three event
tables in parallel, each on its own read-only connection: :class:`~tracekit.ingest.nsys_database.ReadOnlySqlite`),
joined as the documented views ``kernels``, ``memory_copies`` and ``regions`` (``data_views.sql``) join them, but
with LEFT JOINs so that no row is lost:
``rocpd_kernel_dispatch`` (kernels; registers and LDS from ``rocpd_info_kernel_symbol``), ``rocpd_memory_copy``
(copies), ``rocpd_region`` (HIP/HSA/RCCL API calls and roctx ranges, by their ``rocpd_event`` category; a roctx
range is named by its message, ``rocpd_event.extdata.message``), ``rocpd_info_agent`` (GPUs become devices).
Correlation ids are the internal ones (``rocpd_event.stack_id``), which link an API call to its dispatches. The raw
columns follow the rules the rocprofv3 JSON reader follows (:mod:`tracekit.ingest.rocprof_rules`: the same names,
categories and occupancy data), into :func:`~tracekit.ingest.normalize.build_events`.
"""

from __future__ import annotations

import json
import re
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..trace import IngestReport, Trace
from .nsys_database import ONE_BATCH, ReadOnlySqlite, database_error, is_sqlite
from .rocprof_json import Agent, Handle, Metadata, Process, gpu_indices, lookup, meta_of
from .rocprof_rules import GPU_AGENT, Parts, add_copies, add_kernels, events_of, kernel_symbols
from .sqlite_kinds import not_rocpd

WHAT = "a rocprofv3 rocpd database"
HINT = "rocprofv3 --kernel-trace --hip-trace --output-format rocpd"
LABEL = "AMD rocprofv3 (rocpd SQLite)"
_SUFFIX = re.compile(r"_[0-9A-Za-z_-]+")
_AGENT_FIELDS = ("cu_count", "wave_front_size", "max_waves_per_cu", "lds_size_in_kb", "gfx_target_version")


@cache
def rules() -> dict[str, Any]:
    return json.loads(resources.files("tracekit.data").joinpath("rocpd.json").read_text(encoding="utf-8"))


def is_rocpd(source: Path) -> bool:
    """Whether ``source`` is an SQLite file with rocpd tables (by content, whatever its name); a file that cannot be
    opened is left to the other readers, which say what is wrong with it."""
    try:
        with open(source, "rb") as fh:
            if not is_sqlite(fh.read(16)):
                return False
        db = ReadOnlySqlite(source, str(source), WHAT, HINT)
    except (OSError, InputError):
        return False
    db.close()
    return any(n.startswith("rocpd_") for n in db.tables | db.views) and not not_rocpd(frozenset(db.tables | db.views))


def ingest(source: Path, shown: str) -> Trace:
    """The :class:`Trace` of one rocpd database."""
    db = ReadOnlySqlite(source, shown, WHAT, HINT)
    try:
        names = _resolve(db)
        if not ("string" in names and "event" in names) or not any(k in names for k in ("dispatch", "copy", "region")):
            raise InputError(
                f"{shown} is {WHAT} without its kernel dispatch, memory copy or region tables (or its string and event"
                f" tables); record with {HINT}"
            )
        _check_columns(db, names, shown)
        return _build(db, names, shown, source)
    finally:
        db.close()


def _resolve(db: ReadOnlySqlite) -> dict[str, str]:
    """Each table's SQL source: the unsuffixed view, else the ``{{uuid}}``-suffixed table(s) (a union)."""
    out = {}
    for key, base in rules()["tables"].items():
        if base in db.views or base in db.tables:
            out[key] = f'"{base}"'
            continue
        found = sorted(t for t in db.tables if t.startswith(base) and _SUFFIX.fullmatch(t[len(base) :]))
        if len(found) == 1:
            out[key] = f'"{found[0]}"'
        elif found:
            out[key] = "(" + " UNION ALL ".join(f'SELECT * FROM "{t}"' for t in found) + ")"
    return out


def _check_columns(db: ReadOnlySqlite, names: dict[str, str], shown: str) -> None:
    """The columns the reader joins on (rocprofiler-sdk's schema); an older rocpd (rocmProfileData's, without guids)
    or another tool's ``rocpd_`` tables get one sentence."""
    for key, need in rules()["columns"].items():
        if key not in names:
            continue
        try:
            have = {d[0] for d in db.con.execute(f"SELECT * FROM {names[key]} LIMIT 0").description or ()}
        except sqlite3.DatabaseError as exc:
            raise database_error(shown, exc, WHAT, HINT) from exc
        missing = [c for c in need if c not in have]
        if missing:
            raise InputError(
                f"{shown} has rocpd tables of another schema ({rules()['tables'][key]} lacks {', '.join(missing)});"
                f" tracekit reads the rocpd database of rocprofiler-sdk (ROCm 7: {HINT})"
            )


def _count(db: ReadOnlySqlite, names: dict[str, str], key: str) -> int:
    return int(db.query(f"SELECT count(*) FROM {names[key]}")[0][0]) if key in names else 0


def _ints(tab: pa.Table, col: str) -> np.ndarray:
    c = tab.column(col)
    if not c.num_chunks or len(c) == 0:
        return np.zeros(0, dtype=np.int64)
    c = pc.fill_null(pc.cast(c, pa.int64(), safe=False), -1) if c.type != pa.int64() or c.null_count else c
    return c.to_numpy().astype(np.int64, copy=False)


def _texts(tab: pa.Table, col: str) -> tuple[np.ndarray, list[str]]:
    """A text column as (codes, distinct texts): Arrow's dictionary encoding, one Python string per distinct text."""
    c = pc.fill_null(pc.cast(tab.column(col), pa.string()), "").combine_chunks().dictionary_encode()
    return c.indices.to_numpy(zero_copy_only=False).astype(np.int64), c.dictionary.to_pylist()


def _join(names: dict[str, str], key: str, alias: str, on: str, guid: str) -> str:
    return (
        f" LEFT JOIN {names[key]} {alias} ON {alias}.id = {on} AND {alias}.guid = {guid}.guid" if key in names else ""
    )


def _agents(db: ReadOnlySqlite, names: dict[str, str]) -> dict[int, Agent]:
    if "agent" not in names:
        return {}
    fields = ", ".join(f"json_extract(extdata, '$.{f}')" for f in (*_AGENT_FIELDS, "local_mem_size"))
    rows = db.query(
        f"SELECT id, type, coalesce(type_index, -1), coalesce(name, ''), coalesce(product_name, ''), {fields}"
        f" FROM {names['agent']} ORDER BY id"
    )
    out = {}
    for r in rows:  # a few agents
        extra = dict(zip((*_AGENT_FIELDS, "local_mem_size"), (int(v) if v is not None else 0 for v in r[5:])))
        out[int(r[0])] = Agent(
            id=Handle(int(r[0])),
            type=GPU_AGENT if r[1] == "GPU" else 1,
            name=str(r[3]),
            product_name=str(r[4]),
            logical_node_type_id=int(r[2]),
            **extra,
        )
    return out


def _build(db: ReadOnlySqlite, names: dict[str, str], shown: str, source: Path) -> Trace:
    report = IngestReport(path=shown, reader="rocpd-sqlite", file_bytes=source.stat().st_size)
    report.text_bytes = report.file_bytes
    agents = _agents(db, names)
    gpu_index = gpu_indices(agents)
    parts = Parts()
    dropped: dict[str, int] = {}
    not_events: dict[str, int] = {}
    not_read = 0
    symbols = False

    def common(tab: pa.Table) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return parts.take(_ints(tab, "ts"), _ints(tab, "te"), _ints(tab, "corr"), dropped)

    sqls = {k: f(names) for k, f in (("dispatch", _dispatch_sql), ("copy", _copy_sql), ("region", _region_sql))}
    sqls = {k: q for k, q in sqls.items() if k in names}
    with ThreadPoolExecutor(len(sqls)) as pool:  # each on its own read-only connection, in parallel
        # one batch each: the driver types a column from its first batch, and a text column NULL in a whole default
        # batch (dispatches of kernels without a symbol row, first) would be typed an integer and refused later
        tabs = dict(zip(sqls, pool.map(lambda sql: db.arrow(sql, batch_rows=ONE_BATCH), sqls.values())))
    if "dispatch" in tabs:
        symbols = _dispatches(tabs["dispatch"], parts, common, gpu_index)
    if "copy" in tabs:
        _copies(tabs["copy"], parts, common, gpu_index)
    if "region" in tabs:
        _regions(tabs["region"], parts, common, not_events)
    for key, what in (("sample", "sample (an API call of no duration)"), ("allocate", "memory allocation")):
        count = _count(db, names, key)
        if count:
            reason = f"rocpd {what} record (not a timeline event tracekit reads)"
            not_events[reason] = not_events.get(reason, 0) + count
            not_read += count
    empty = f"{shown} is {WHAT} with no kernel, copy or API record in it; record with {HINT}"
    events = events_of(parts, not_read, dropped, not_events, report, empty)
    pids = [int(r[0]) for r in db.query(f"SELECT DISTINCT pid FROM {names['process']}")] if "process" in names else []
    procs = [Process(metadata=Metadata(pid=p)) for p in pids] or [Process()]
    meta = meta_of(procs, agents, gpu_index, events, shown, symbols)
    meta["profiler"]["label"] = LABEL
    return Trace(events=events, meta=meta, report=report)


def _dispatch_sql(names: dict[str, str]) -> str:
    sym = "symbol" in names
    return (
        'SELECT K.start AS ts, K."end" AS te, coalesce(E.stack_id, -1) AS corr, K.agent_id AS agent,'
        " coalesce(K.stream_id, -1) AS stream, coalesce(K.queue_id, -1) AS queue,"
        " coalesce(K.group_segment_size, -1) AS lds, K.kernel_id AS kernel_id,"
        + (
            " S.display_name AS display, S.kernel_name AS symbol, S.arch_vgpr_count AS arch,"
            " S.accum_vgpr_count AS accum, S.id IS NOT NULL AS known,"
            if sym
            else " '' AS display, '' AS symbol, -1 AS arch, 0 AS accum, 0 AS known,"
        )
        + ", ".join(f"K.workgroup_size_{d} AS wg_{d}, K.grid_size_{d} AS gr_{d}" for d in "xyz")
        + f" FROM {names['dispatch']} K"
        + _join(names, "event", "E", "K.event_id", "K")
        + _join(names, "symbol", "S", "K.kernel_id", "K")
        + " ORDER BY K.id"
    )


def _dispatches(tab: pa.Table, parts: Parts, common, gpu_index) -> bool:
    """Kernels, named and their VGPRs counted from their kernel symbol (joined within the run's guid) by the rules
    the JSON reader follows (:func:`~tracekit.ingest.rocprof_rules.kernel_symbols`), once per distinct symbol.
    Whether any dispatch had its symbol."""
    keep, com = common(tab)
    display, displays = _texts(tab, "display")
    symbol, symbol_names = _texts(tab, "symbol")
    kid, arch, accum = _ints(tab, "kernel_id"), _ints(tab, "arch"), _ints(tab, "accum")
    distinct, first, inv = np.unique(
        np.stack([kid, display, symbol, arch, accum], axis=1).reshape(-1, 5),
        axis=0,
        return_index=True,
        return_inverse=True,
    )
    order = np.argsort(first)  # in the order they first come, as the names' codes were given
    distinct = distinct[order]
    names, vgprs = kernel_symbols(
        [displays[i] for i in distinct[:, 1].tolist()],
        [symbol_names[i] for i in distinct[:, 2].tolist()],
        distinct[:, 0],
        distinct[:, 3],
        distinct[:, 4],
    )
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    of_row = rank[inv.reshape(-1)][keep]
    add_kernels(
        parts,
        com,
        name=parts.codes(names)[of_row] if names else np.zeros(0, dtype=np.int32),
        device=lookup(_ints(tab, "agent")[keep], gpu_index),
        stream=_ints(tab, "stream")[keep],
        queue=_ints(tab, "queue")[keep],
        registers=vgprs[of_row] if names else np.zeros(0, dtype=np.int64),
        lds=_ints(tab, "lds")[keep],
        workgroup=np.stack([_ints(tab, f"wg_{d}")[keep] for d in "xyz"], axis=1),
        grid_items=np.stack([_ints(tab, f"gr_{d}")[keep] for d in "xyz"], axis=1),
    )
    return bool(_ints(tab, "known").any())


def _copy_sql(names: dict[str, str]) -> str:
    return (
        'SELECT M.start AS ts, M."end" AS te, coalesce(E.stack_id, -1) AS corr, S.string AS op,'
        " coalesce(M.src_agent_id, -1) AS src, coalesce(M.dst_agent_id, -1) AS dst, coalesce(M.size, -1) AS size,"
        f" coalesce(M.stream_id, -1) AS stream FROM {names['copy']} M"
        + _join(names, "event", "E", "M.event_id", "M")
        + _join(names, "string", "S", "M.name_id", "M")
        + " ORDER BY M.id"
    )


def _copies(tab: pa.Table, parts: Parts, common, gpu_index) -> None:
    keep, com = common(tab)
    op, ops = _texts(tab, "op")
    add_copies(
        parts,
        com,
        op=op[keep],
        op_names=[o or "unknown" for o in ops],
        src_dev=lookup(_ints(tab, "src")[keep], gpu_index),
        dst_dev=lookup(_ints(tab, "dst")[keep], gpu_index),
        stream=_ints(tab, "stream")[keep],
        nbytes=_ints(tab, "size")[keep],
    )


def _region_sql(names: dict[str, str]) -> str:
    return (
        'SELECT R.start AS ts, R."end" AS te, coalesce(E.stack_id, R.id) AS corr, C.string AS category,'
        " CASE WHEN C.string LIKE 'MARKER%' THEN coalesce(json_extract(E.extdata, '$.message'), S.string)"
        " ELSE S.string END AS name,"
        + (" coalesce(P.pid, -1) AS pid," if "process" in names else " -1 AS pid,")
        + (" coalesce(T.tid, R.tid, -1) AS tid" if "thread" in names else " coalesce(R.tid, -1) AS tid")
        + f" FROM {names['region']} R"
        + _join(names, "event", "E", "R.event_id", "R")
        + f" LEFT JOIN {names['string']} C ON C.id = E.category_id AND C.guid = E.guid"
        + _join(names, "string", "S", "R.name_id", "R")
        + _join(names, "process", "P", "R.pid", "R")
        + _join(names, "thread", "T", "R.tid", "R")
        + " ORDER BY R.id"
    )


def _regions(tab: pa.Table, parts: Parts, common, not_events: dict[str, int]) -> None:
    """API calls and roctx ranges: the Kineto category by the event's category (tracekit/data/rocpd.json)."""
    keep, com = common(tab)
    cat_code, cats = _texts(tab, "category")
    rule = rules()["region_categories"]
    cat_of = [next((parts.cats.index(v) for k, v in rule.items() if c.startswith(k)), -1) for c in cats]
    cat = np.array(cat_of + [-1], dtype=np.int32)[cat_code[keep]]
    for i, c in enumerate(cats):
        if cat_of[i] < 0:
            n_other = int((cat_code[keep] == i).sum())
            reason = f"rocpd region of category {c or 'unknown'} (not a timeline event tracekit reads)"
            not_events[reason] = not_events.get(reason, 0) + n_other
    sel = cat >= 0
    name_code, texts = _texts(tab, "name")
    codes = parts.codes(texts)
    parts.add_host(
        {k: v[sel] for k, v in com.items()},
        name=codes[name_code[keep][sel]] if len(codes) else np.zeros(0, dtype=np.int32),
        cat=cat[sel],
        pid=_ints(tab, "pid")[keep][sel],
        tid=_ints(tab, "tid")[keep][sel],
    )
