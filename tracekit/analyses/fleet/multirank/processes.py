"""The ranks inside one Nsight Systems export (docs/multirank.md, "One export, several processes").

``nsys profile`` around ``torchrun`` records every process of the node in one export: each process that ran GPU
work is a rank. :func:`gpu_processes` finds them from the export's GPU tables (one small ``GROUP BY`` per table,
before any event is read) and orders them by the lowest device each used, then by process id: rank i is the i-th
(torchrun's local rank r drives ``cuda:r``). A rank of such an export is named by a *part*,
``<export>::process=<pid>`` (:func:`part_of`, :func:`split_part`); the mapper loads the export once per worker
and keeps that process's events (:func:`select_process`: CPU rows by their process, GPU rows by the process that
launched them). The processes of one export share its host clock, so they are one node: :func:`export_of` is the
"host" :mod:`.discover` gives them. A ``.nsys-rep`` is treated as its SQLite export: with ``nsys`` on PATH its
processes are listed from an export made in a temporary folder (:func:`report_processes`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from ....errors import InputError
from ....result import shown_path

PART = re.compile(r"^(?P<file>.+)::process=(?P<pid>\d+)$")
EXPORT_SUFFIXES = (".sqlite", ".sqlite3", ".nsys-rep", ".qdrep")  # what a run folder is searched for besides JSON
GPU_TABLES = ("kernel", "memcpy", "memset")  # the tables of tracekit/data/nsys.json whose rows ran on a GPU


class OneClock(int):
    """The node of the processes of one export: they share its host clock exactly, so :mod:`.align` gives each the
    reference's clock (offset 0) with no fit (the attribute ``one`` is what it looks for)."""

    one = True


def part_of(export: Path, pid: int) -> Path:
    """The part of ``export`` that is process ``pid``: ``<export>::process=<pid>``."""
    return Path(f"{export}::process={int(pid)}")


def split_part(path) -> tuple[str, int | None]:
    """``(the export, its process)`` of a part; ``(path, None)`` for a whole file."""
    m = PART.match(str(path))
    return (m.group("file"), int(m.group("pid"))) if m else (str(path), None)


def export_of(path) -> Path:
    """The file a rank's part lies in (a whole file: itself)."""
    return Path(split_part(path)[0])


def is_part(path) -> bool:
    return split_part(path)[1] is not None


def device_of_part(path) -> int | None:
    """The GPU of a part's process (its lowest device), what its rank's report is of; None for a whole file."""
    file, pid = split_part(path)
    return None if pid is None else dict(gpu_processes(Path(file))).get(pid)


def exports_under(root: Path) -> tuple[list[Path], list[tuple[str, str]]]:
    """The Nsight Systems exports below a run folder (``.sqlite`` databases with nsys's tables, ``.nsys-rep``), in
    path order, and the SQLite files passed over (another program's database) with the reason."""
    from ....ingest.nsys_database import Database
    from ....ingest.nsys_sqlite import is_report, reads_nsys  # (pyarrow: imported where an export is looked at)

    found = [p for p in sorted(root.rglob("*")) if p.name.lower().endswith(EXPORT_SUFFIXES) and p.is_file()]
    files, skipped = [], []
    for p in (p for p in found if reads_nsys(p)):
        if not is_report(p):
            try:
                Database(p, shown_path(p)).close()
            except InputError as exc:
                skipped.append((shown_path(p), f"not an Nsight Systems export ({exc})"))
                continue
        files.append(p)
    return files, skipped


def gpu_processes(path: Path) -> list[tuple[int, int]]:
    """``(pid, lowest device)`` of each process of an nsys export that ran GPU work, in rank order (device, then
    pid); ``[]`` for any other file. A ``.nsys-rep`` is read as its SQLite export (:func:`report_processes`)."""
    from ....ingest.nsys_sqlite import is_report

    path = Path(path)
    if is_report(path):
        return report_processes(path)
    return sqlite_processes(path)


# the processes of each .nsys-rep exported in this process, by (path, size, mtime): a run's report is exported once
# to list them, not again when its reference rank's device is asked
_REPORT_PROCESSES: dict[tuple, list[tuple[int, int]]] = {}


def report_processes(path: Path) -> list[tuple[int, int]]:
    """The GPU processes of a ``.nsys-rep``, as of its SQLite export: ``nsys`` on PATH exports it into a temporary
    folder (``ingest.nsys_sqlite.exported``, removed after; never beside the report) and its tables are read as an
    export's; a failed export is its one sentence (exit 3). Without ``nsys`` on PATH ``[]``: the report is one rank,
    and reading it says how to export it."""
    import shutil

    from ....ingest.nsys_sqlite import exported

    if shutil.which("nsys") is None:
        return []
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _REPORT_PROCESSES:
        with exported(path, shown_path(path)) as db:
            _REPORT_PROCESSES[key] = sqlite_processes(db)
    return list(_REPORT_PROCESSES[key])


def sqlite_processes(path: Path) -> list[tuple[int, int]]:
    """:func:`gpu_processes` of an nsys SQLite export; ``[]`` for a file that is none."""
    from ....ingest.nsys_database import Database
    from ....ingest.nsys_sqlite import reads_nsys, rules

    if not reads_nsys(path):
        return []
    try:
        db = Database(path, shown_path(path))
    except InputError:
        return []  # not an nsys export: the reader says why when the file is read
    try:
        low: dict[int, int] = {}
        for key in GPU_TABLES:
            table = rules()["tables"][key]["table"]
            if table not in db.tables or not {"globalPid", "deviceId"} <= set(db.columns(table)):
                continue
            rows = db.query(
                f"SELECT (globalPid >> 24) & 16777215, min(deviceId) FROM {table}"
                " WHERE globalPid IS NOT NULL AND deviceId IS NOT NULL GROUP BY 1"
            )
            for pid, dev in rows:
                low[int(pid)] = min(int(dev), low.get(int(pid), int(dev)))
    finally:
        db.close()
    return sorted(((p, d) for p, d in low.items()), key=lambda x: (x[1], x[0]))


def select_process(trace, pid: int):
    """``trace`` (a whole export) reduced to process ``pid``'s events: its CPU rows (runtime calls, NVTX ranges)
    and the GPU work it launched (nsys's ``globalPid`` of each kernel, copy and set), with its devices in meta."""
    ev = trace.events
    keep = (ev["pid"] == pid).to_numpy()
    if not keep.any():
        raise InputError(f"{trace.path} has no event of process {pid}; list the export's ranks again")
    mine = ev[keep].reset_index(drop=True)
    dev = mine["device"].to_numpy()
    used = sorted(int(d) for d in np.unique(dev[dev >= 0]))
    meta = dict(trace.meta)
    props = [d for d in meta.get("device_properties") or [] if d.get("id") in used]
    sms = {d.get("numSms") for d in props}
    meta.update(
        source=f"{meta.get('source')} (process {pid})",
        devices_used=used,
        device_properties=props,
        device_pids={str(d): [int(pid)] for d in used},
        process=int(pid),
        num_sms=sms.pop() if len(sms) == 1 and None not in sms else meta.get("num_sms"),
    )
    return replace(trace, events=mine, meta=meta, derived={})
