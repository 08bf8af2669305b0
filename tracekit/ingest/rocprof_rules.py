"""The rules both rocprofv3 readers (:mod:`.rocprof_json`, its JSON; :mod:`.rocpd_sqlite`, its rocpd database)
follow to turn its records into the events table's raw columns, decided here once: a kernel's name (demangled,
else its symbol, else "unknown kernel (kernel_id N)") and registers (arch + accumulation VGPRs per work-item, from
its kernel symbol), its LDS (the dispatch's group segment), its grid (work-items → workgroups) and stream (else its
queue); a copy's name and kind by direction (a peer copy between two GPUs, on the sender's device); API calls and
ranges with no GPU columns; records whose end precedes their start dropped and counted; the gathered
:class:`Parts` → :class:`~tracekit.ingest.kineto.columns.RawColumns` → events, with the ingest report.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InputError
from ..trace import IngestReport
from .kineto.columns import NOT_EVENT_REASONS, RawColumns
from .normalize import build_events

GPU_AGENT = 2  # rocprofiler_agent_type_t: 1 CPU, 2 GPU
COPY_DIRECTIONS = {  # MEMORY_COPY operation name -> (Kineto-style name, copy kind)
    "MEMORY_COPY_HOST_TO_HOST": ("Memcpy HtoH (Host -> Host)", "HtoH"),
    "MEMORY_COPY_HOST_TO_DEVICE": ("Memcpy HtoD (Host -> Device)", "HtoD"),
    "MEMORY_COPY_DEVICE_TO_HOST": ("Memcpy DtoH (Device -> Host)", "DtoH"),
    "MEMORY_COPY_DEVICE_TO_DEVICE": ("Memcpy DtoD (Device -> Device)", "DtoD"),
}
PEER = ("Memcpy PtoP (Device -> Device)", "PtoP")  # device to device between two GPU agents
BAD_TIMES = "rocprofv3 record whose end_timestamp precedes its start_timestamp"


class Parts:
    """The kept events of every section, as arrays appended section by section; rows numbered across sections."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {}
        self.names: list[str] = []
        self.name_index: dict[str, int] = {}
        self.cats = ["kernel", "gpu_memcpy", "hip_runtime", "hsa_api", "rccl_api", "user_annotation"]
        self.kind_arg: dict[int, str] = {}
        self.rows = 0  # the event records read so far (kept or dropped)

    def codes(self, names: list[str]) -> np.ndarray:
        out = np.empty(len(names), dtype=np.int32)
        for i, n in enumerate(names):  # distinct names only (a few hundred), not events
            out[i] = self.name_index.setdefault(n, len(self.names))
            if out[i] == len(self.names):
                self.names.append(n)
        return out

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.cols.setdefault(k, []).append(v)

    def get(self, key: str, shape=(0,), dtype=np.int64) -> np.ndarray:
        parts = self.cols.get(key)
        return np.concatenate(parts) if parts else np.empty(shape, dtype=dtype)

    def take(
        self, start: np.ndarray, end: np.ndarray, corr: np.ndarray, dropped: dict[str, int]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One section's records: the indices kept (an end before the start is dropped, counted) and their row
        numbers, times (ns) and correlation ids."""
        bad = end < start
        if bad.any():
            dropped[BAD_TIMES] = dropped.get(BAD_TIMES, 0) + int(bad.sum())
        keep = np.flatnonzero(~bad)
        ids = np.arange(self.rows, self.rows + len(start), dtype=np.int64)
        self.rows += len(start)
        return keep, dict(row=ids[keep], ts=start[keep], dur=(end - start)[keep], corr=corr[keep])

    def add_host(self, common: dict[str, np.ndarray], name, cat, pid, tid) -> None:
        """API calls and ranges: no device, stream, bytes or kernel columns (unknown: -1)."""
        n = len(name)
        self.add(**common, name=name, cat=cat, pid=pid, tid=tid, **_no_gpu(n))


def _no_gpu(n: int) -> dict[str, np.ndarray]:
    none = np.full(n, -1, dtype=np.int64)
    return dict(
        device=none,
        stream=none,
        nbytes=none,
        registers=none,
        shared_mem=none,
        grid=np.full((n, 3), -1, dtype=np.int32),
        block=np.full((n, 3), -1, dtype=np.int32),
    )


def kernel_symbols(
    display: list[str], symbol: list[str], kernel_id: np.ndarray, arch_vgprs: np.ndarray, accum_vgprs: np.ndarray
) -> tuple[list[str], np.ndarray]:
    """Distinct kernel symbols (-1 or "" where a dispatch has none) → their names and VGPRs per work-item: the
    demangled name, else the symbol name, else "unknown kernel (kernel_id N)"; arch + accumulation VGPRs (CDNA's
    unified register file) where the arch count is known, else -1."""
    names = [d or s or f"unknown kernel (kernel_id {int(k)})" for d, s, k in zip(display, symbol, kernel_id.tolist())]
    vgprs = np.where(arch_vgprs > 0, arch_vgprs + np.maximum(accum_vgprs, 0), -1).astype(np.int64)
    return names, vgprs


def add_kernels(parts: Parts, common, name, device, stream, queue, registers, lds, workgroup, grid_items) -> None:
    """Kernels: on their stream (else their queue); LDS the dispatch's group segment (static + dynamic); the grid
    rocprofv3 writes in work-items (HSA's convention) as workgroups (CUDA's, the table's), -1 where unknown."""
    grid = np.where((workgroup > 0) & (grid_items >= 0), -(-grid_items // np.maximum(workgroup, 1)), -1)
    stream = np.where(stream >= 0, stream, queue)
    parts.add(
        **common,
        name=name,
        cat=np.zeros(len(name), dtype=np.int32),
        pid=device,
        tid=stream,
        device=device,
        stream=stream,
        nbytes=np.full(len(name), -1, dtype=np.int64),
        registers=registers,
        shared_mem=lds,
        grid=grid.astype(np.int32),
        block=np.where(workgroup > 0, workgroup, -1).astype(np.int32),
    )


def add_copies(parts: Parts, common, op: np.ndarray, op_names: list[str], src_dev, dst_dev, stream, nbytes) -> None:
    """Copies (``op`` indexes ``op_names``): named and kinded by direction, a copy between two GPUs a peer copy; on
    the GPU that sends (a peer copy runs on its stream), else the one that receives."""
    peer = (src_dev >= 0) & (dst_dev >= 0) & (src_dev != dst_dev)
    labels = [COPY_DIRECTIONS.get(o, (f"Memcpy {o}", "other")) for o in op_names] + [PEER]
    pick = np.where(peer, len(labels) - 1, op)
    uniq, inv = np.unique(pick, return_inverse=True)
    codes = parts.codes([labels[int(u)][0] for u in uniq])
    for u, c in zip(uniq, codes):
        parts.kind_arg[int(c)] = labels[int(u)][1]
    device = np.where(src_dev >= 0, src_dev, dst_dev)
    n = len(op)
    parts.add(
        **common,
        name=codes[inv.reshape(-1)],
        cat=np.full(n, 1, dtype=np.int32),
        pid=device,
        tid=stream,
        device=device,
        stream=stream,
        nbytes=nbytes,
        registers=np.full(n, -1, dtype=np.int64),
        shared_mem=np.full(n, -1, dtype=np.int64),
        grid=np.full((n, 3), -1, dtype=np.int32),
        block=np.full((n, 3), -1, dtype=np.int32),
    )


def raw_columns(parts: Parts, read: int, dropped: dict[str, int]) -> RawColumns:
    name = parts.get("name", dtype=np.int32)
    kind_arg = {}
    if parts.kind_arg:
        rows = parts.get("row")
        is_copy = np.isin(name, list(parts.kind_arg))
        kind_arg = dict(zip(rows[is_copy].tolist(), (parts.kind_arg[int(c)] for c in name[is_copy])))
    n = len(name)
    return RawColumns(
        n=read,
        row=parts.get("row"),
        cat=parts.get("cat", dtype=np.int32),
        cat_uniques=parts.cats,
        name=name,
        name_uniques=parts.names,
        pid=parts.get("pid"),
        tid=parts.get("tid"),
        ts_ns=parts.get("ts"),
        dur_ns=parts.get("dur"),
        instant=np.zeros(n, dtype=bool),
        ints={
            "device": parts.get("device"),
            "stream": parts.get("stream"),
            "correlation": parts.get("corr"),
            "external_id": np.full(n, -1, dtype=np.int64),
            "bytes": parts.get("nbytes"),
            "registers": parts.get("registers"),
            "shared_mem": parts.get("shared_mem"),
        },
        grid=parts.get("grid", (0, 3), np.int32),
        block=parts.get("block", (0, 3), np.int32),
        kind_arg=kind_arg,
        shapes=np.full(n, -1, dtype=np.int32),
        shapes_uniques=[],
        meta=[],
        reasons={},
    )


def events_of(
    parts: Parts, not_read: int, dropped: dict[str, int], not_events: dict[str, int], report: IngestReport, empty: str
) -> pd.DataFrame:
    """The events table of the gathered parts, the report filled (``not_read``: records counted as not events;
    what was dropped in a warning); ``empty`` (one sentence) raised when no event is kept."""
    read = parts.rows + not_read
    events, more, _ = build_events(raw_columns(parts, read, dropped))
    for reason, count in more.items():
        into = not_events if reason in NOT_EVENT_REASONS else dropped
        into[reason] = into.get(reason, 0) + count
    report.records_read, report.events_kept = read, len(events)
    report.not_events, report.dropped = not_events, dropped
    if dropped:
        detail = "; ".join(f"{c} {r}" for r, c in sorted(dropped.items()))
        report.warnings.append(f"{report.path}: dropped {sum(dropped.values())} unusable record(s): {detail}")
    report.check()
    if report.events_kept == 0:
        raise InputError(empty)
    return events
