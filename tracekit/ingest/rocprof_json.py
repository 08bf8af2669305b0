"""rocprofv3's JSON output (``rocprofv3 --output-format json``: one ``{"rocprofiler-sdk-tool": [process, …]}``
document) → the events table, chosen by content (:func:`is_rocprof_json`).

Read: ``buffer_records.kernel_dispatch`` (kernels: grid, workgroup, LDS per dispatch; registers from
``kernel_symbols``: arch + accumulation VGPRs per work-item), ``memory_copy`` (copies, by direction and agents),
``hip_api`` / ``hsa_api`` / ``rccl_api`` (runtime calls, linked to dispatches by ``correlation_id.internal``),
``marker_api`` (roctx ranges, named from ``strings.marker_api``), ``agents`` (GPUs become devices with
Kineto-style deviceProperties). Times are the file's integer nanoseconds as written. Records of the other
buffers (allocations, scratch memory, …) are counted as not events. msgspec decodes only the fields used; the
columns are gathered with C-level ``map``/``attrgetter`` passes, never a Python statement per record.
"""

from __future__ import annotations

import zlib
from operator import attrgetter
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np

from ..errors import InputError
from ..trace import IngestReport, Trace
from .compression import without_bom
from .normalize import recorded
from .repair import salvage_json
from .rocprof_rules import GPU_AGENT, Parts, add_copies, add_kernels, events_of, kernel_symbols
from .whole_text import read_text

TOOL_KEY = "rocprofiler-sdk-tool"
PROFILER = "rocprofv3"
# depth of a buffer record in the document: {tool: [process {buffer_records: {kernel_dispatch: [record
RECORD_DEPTH = 5
_API_BUFFERS = {"hip_api": "hip_runtime", "hsa_api": "hsa_api", "rccl_api": "rccl_api"}  # buffer -> cat
_NOT_READ = (
    "memory_allocation",
    "scratch_memory",
    "rocdecode_api",
    "rocjpeg_api",
    "pc_sample_host_trap",
    "pc_sample_stochastic",
)


class Handle(msgspec.Struct, gc=False, frozen=True):
    handle: int = -1


class Corr(msgspec.Struct, gc=False, frozen=True):
    internal: int = -1
    external: int = 0


class Dim3(msgspec.Struct, gc=False, frozen=True):
    x: int = -1
    y: int = -1
    z: int = -1


_NO_HANDLE, _NO_DIM, _NO_CORR = Handle(), Dim3(), Corr()


class DispatchInfo(msgspec.Struct, gc=False):
    agent_id: Handle = _NO_HANDLE
    queue_id: Handle = _NO_HANDLE
    kernel_id: int = -1
    group_segment_size: int = -1
    workgroup_size: Dim3 = _NO_DIM
    grid_size: Dim3 = _NO_DIM


class Dispatch(msgspec.Struct, gc=False):
    start_timestamp: int
    end_timestamp: int
    dispatch_info: DispatchInfo
    thread_id: int = -1
    correlation_id: Corr = _NO_CORR
    stream_id: Handle = _NO_HANDLE


class Copy(msgspec.Struct, gc=False):
    start_timestamp: int
    end_timestamp: int
    operation: int = 0
    thread_id: int = -1
    correlation_id: Corr = _NO_CORR
    dst_agent_id: Handle = _NO_HANDLE
    src_agent_id: Handle = _NO_HANDLE
    bytes: int = -1
    stream_id: Handle = _NO_HANDLE


class Api(msgspec.Struct, gc=False):
    start_timestamp: int
    end_timestamp: int
    kind: int = 0
    operation: int = 0
    thread_id: int = -1
    correlation_id: Corr = _NO_CORR


class Agent(msgspec.Struct, gc=False):
    id: Handle = _NO_HANDLE
    type: int = 0
    name: str = ""
    product_name: str = ""
    cu_count: int = 0
    simd_per_cu: int = 0
    max_waves_per_simd: int = 0
    max_waves_per_cu: int = 0
    lds_size_in_kb: int = 0
    wave_front_size: int = 0
    gfx_target_version: int = 0
    logical_node_type_id: int = -1
    local_mem_size: int = 0


class KernelSymbol(msgspec.Struct, gc=False):
    kernel_id: int = -1
    kernel_name: str = ""
    formatted_kernel_name: str = ""
    group_segment_size: int = -1
    private_segment_size: int = -1
    sgpr_count: int = -1
    arch_vgpr_count: int = -1
    accum_vgpr_count: int = 0


class OpNames(msgspec.Struct, gc=False):
    kind: str = ""
    operations: list[str] = []


class Strings(msgspec.Struct, gc=False):
    buffer_records: list[OpNames] = []
    marker_api: Any = None


class Buffers(msgspec.Struct, gc=False):
    kernel_dispatch: list[Dispatch] = []
    memory_copy: list[Copy] = []
    hip_api: list[Api] = []
    hsa_api: list[Api] = []
    rccl_api: list[Api] = []
    marker_api: list[Api] = []
    memory_allocation: list[msgspec.Raw] = []
    scratch_memory: list[msgspec.Raw] = []
    rocdecode_api: list[msgspec.Raw] = []
    rocjpeg_api: list[msgspec.Raw] = []
    pc_sample_host_trap: list[msgspec.Raw] = []
    pc_sample_stochastic: list[msgspec.Raw] = []


class Metadata(msgspec.Struct, gc=False):
    pid: int = -1


class Process(msgspec.Struct, gc=False):
    metadata: Metadata = msgspec.field(default_factory=Metadata)
    agents: list[Agent] = []
    strings: Strings = msgspec.field(default_factory=Strings)
    kernel_symbols: list[KernelSymbol] = []
    buffer_records: Buffers = msgspec.field(default_factory=Buffers)


class Document(msgspec.Struct, rename={"tool": TOOL_KEY}):
    tool: Union[list[Process], None] = None


_DECODER = msgspec.json.Decoder(Document)


def is_rocprof_json(head: bytes) -> bool:
    """Whether a text's start (decompressed) is a rocprofv3 JSON document: an object whose first key is
    ``rocprofiler-sdk-tool``."""
    text = without_bom(head).lstrip()
    return text[:1] == b"{" and text[1:].lstrip().startswith(b'"' + TOOL_KEY.encode() + b'"')


def text_head(path: Path, n: int = 256) -> bytes:
    """The first ``n`` bytes of a file's text (gzip or zstd decompressed); b"" when they cannot be read."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(1 << 16)
        if raw[:2] == b"\x1f\x8b":
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, n)
        if raw[:4] == b"\x28\xb5\x2f\xfd":
            import zstandard

            return zstandard.ZstdDecompressor().decompressobj().decompress(raw)[:n]
        return raw[:n]
    except (OSError, zlib.error, ImportError, ValueError, MemoryError, Exception):  # noqa: BLE001 - a sniff only
        return b""


def ingest(source: Path, shown: str) -> Trace:
    """The :class:`Trace` of a rocprofv3 JSON file (salvaged when truncated: complete records kept, counted)."""
    report = IngestReport(path=shown, reader="rocprofv3 json")
    raw = read_text(source)
    report.compression, report.file_bytes, report.text_bytes = raw.compression, raw.file_bytes, len(raw.data)
    report.warnings.extend(raw.warnings)
    report.salvaged = raw.stream_truncated
    doc = _decode(raw.data, shown, report)
    del raw
    procs = [p for p in doc.tool or [] if isinstance(p, Process)]
    if not procs:
        raise InputError(f"{shown} is a rocprofv3 JSON document with no process in it; pass a complete rocprofv3 run")
    return _build(procs, shown, report)


def _decode(data, shown: str, report: IngestReport) -> Document:
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise InputError(
            f"{shown} looks like rocprofv3 JSON but does not fit its schema ({exc}); pass the results.json that"
            " rocprofv3 --output-format json wrote"
        ) from exc
    except msgspec.DecodeError as exc:
        first = str(exc)
    fixed = salvage_json(data, max_depth=RECORD_DEPTH)
    if fixed is None:
        raise InputError(f"{shown} is not valid JSON ({first}); pass the results.json that rocprofv3 wrote")
    text, lost = fixed
    try:
        doc = _DECODER.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InputError(
            f"{shown} is truncated or damaged ({first}) and could not be salvaged ({exc}); pass a complete"
            " rocprofv3 results.json"
        ) from exc
    report.salvaged, report.bytes_lost = True, lost
    report.warnings.append(
        f"{shown}: the JSON is truncated or damaged ({first}); the complete records before the damage were kept"
        f" and the last {lost} bytes of text lost"
    )
    return doc


def _col(records: list, path: str, dtype=np.int64) -> np.ndarray:
    """One field of every record as an array: a C-level pass (``map`` over an ``attrgetter``)."""
    return np.fromiter(map(attrgetter(path), records), dtype=dtype, count=len(records))


def _build(procs: list[Process], shown: str, report: IngestReport) -> Trace:
    parts = Parts()
    not_events: dict[str, int] = {}
    dropped: dict[str, int] = {}
    agents: dict[int, Agent] = {}
    symbols: dict[int, KernelSymbol] = {}
    not_read = 0
    for p in procs:
        for a in p.agents:
            agents.setdefault(a.id.handle, a)
        symbols.update((s.kernel_id, s) for s in p.kernel_symbols)
    gpu_index = gpu_indices(agents)
    for p in procs:
        buf = p.buffer_records
        ops = [o.operations for o in p.strings.buffer_records]
        for section, recs in (
            ("kernel_dispatch", buf.kernel_dispatch),
            ("memory_copy", buf.memory_copy),
            *((k, getattr(buf, k)) for k in _API_BUFFERS),
            ("marker_api", buf.marker_api),
        ):
            if not recs:
                continue
            keep, common = parts.take(
                _col(recs, "start_timestamp"),
                _col(recs, "end_timestamp"),
                _col(recs, "correlation_id.internal"),
                dropped,
            )
            if section == "kernel_dispatch":
                _dispatches(parts, recs, keep, common, symbols, gpu_index)
            elif section == "memory_copy":
                _copies(parts, recs, keep, common, gpu_index, ops)
            else:
                _api(parts, recs, keep, common, section, p, ops)
        for key in _NOT_READ:
            count = len(getattr(buf, key))
            if count:
                reason = f"rocprofv3 {key} record (not a timeline event tracekit reads)"
                not_events[reason] = not_events.get(reason, 0) + count
                not_read += count
    empty = (
        f"{shown} is rocprofv3 JSON with no kernel, copy or API record in it; record with"
        " rocprofv3 --kernel-trace --memory-copy-trace --hip-trace --output-format json"
    )
    events = events_of(parts, not_read, dropped, not_events, report, empty)
    return Trace(events=events, meta=meta_of(procs, agents, gpu_index, events, shown, symbols), report=report)


def gpu_indices(agents: dict[int, Agent]) -> dict[int, int]:
    """GPU agent handle -> device index: the agent's logical_node_type_id (its index among GPUs, as HIP numbers
    devices), else its order among the GPU agents."""
    gpus = [a for a in agents.values() if a.type == GPU_AGENT]
    return {a.id.handle: (a.logical_node_type_id if a.logical_node_type_id >= 0 else i) for i, a in enumerate(gpus)}


def lookup(keys: np.ndarray, table: dict[int, int], default: int = -1) -> np.ndarray:
    """``table[k]`` for each key, through the distinct keys (vectorised)."""
    uniq, inv = np.unique(keys, return_inverse=True)
    return np.array([table.get(int(k), default) for k in uniq] + [default], dtype=np.int64)[inv.reshape(-1)]


def _dispatches(parts: Parts, recs, keep, common, symbols, gpu_index) -> None:
    kid = _col(recs, "dispatch_info.kernel_id")[keep]
    uniq, inv = np.unique(kid, return_inverse=True)
    syms = [symbols.get(int(k)) for k in uniq]
    names, vgprs = kernel_symbols(
        [s.formatted_kernel_name if s is not None else "" for s in syms],
        [s.kernel_name if s is not None else "" for s in syms],
        uniq,
        np.array([s.arch_vgpr_count if s is not None else -1 for s in syms], dtype=np.int64),
        np.array([s.accum_vgpr_count if s is not None else 0 for s in syms], dtype=np.int64),
    )
    inv = inv.reshape(-1)
    add_kernels(
        parts,
        common,
        name=parts.codes(names)[inv],
        device=lookup(_col(recs, "dispatch_info.agent_id.handle")[keep], gpu_index),
        stream=_col(recs, "stream_id.handle")[keep],
        queue=_col(recs, "dispatch_info.queue_id.handle")[keep],
        registers=vgprs[inv],
        lds=_col(recs, "dispatch_info.group_segment_size")[keep],
        workgroup=np.stack([_col(recs, f"dispatch_info.workgroup_size.{d}")[keep] for d in "xyz"], axis=1),
        grid_items=np.stack([_col(recs, f"dispatch_info.grid_size.{d}")[keep] for d in "xyz"], axis=1),
    )


def _copies(parts: Parts, recs, keep, common, gpu_index, ops) -> None:
    op_names = ops[10] if len(ops) > 10 and ops[10] and ops[10][0].startswith("MEMORY_COPY") else []
    op = _col(recs, "operation")[keep]
    n_ops = max(len(op_names), int(op.max(initial=0)) + 1)
    add_copies(
        parts,
        common,
        op=np.clip(op, 0, n_ops - 1),
        op_names=[(op_names[o] if o < len(op_names) else "") or str(o) for o in range(n_ops)],
        src_dev=lookup(_col(recs, "src_agent_id.handle")[keep], gpu_index),
        dst_dev=lookup(_col(recs, "dst_agent_id.handle")[keep], gpu_index),
        stream=_col(recs, "stream_id.handle")[keep],
        nbytes=_col(recs, "bytes")[keep],
    )


def _api(parts: Parts, recs, keep, common, section, proc: Process, ops) -> None:
    kind, op = _col(recs, "kind")[keep], _col(recs, "operation")[keep]
    messages = _marker_messages(proc.strings.marker_api) if section == "marker_api" else {}
    key = kind * (1 << 20) + op
    if messages:  # roctx ranges are named by their message (keyed by correlation id)
        key = np.where(np.isin(common["corr"], list(messages)), -1 - common["corr"], key)
    uniq, inv = np.unique(key, return_inverse=True)
    names = []
    for u in uniq.tolist():
        if u < 0:
            names.append(messages[-1 - u])
            continue
        k, o = divmod(u, 1 << 20)
        names.append(ops[k][o] if 0 <= k < len(ops) and 0 <= o < len(ops[k]) else f"{section} operation {o}")
    cat = parts.cats.index("user_annotation" if section == "marker_api" else _API_BUFFERS[section])
    n = len(keep)
    parts.add_host(
        common,
        name=parts.codes(names)[inv.reshape(-1)],
        cat=np.full(n, cat, dtype=np.int32),
        pid=np.full(n, proc.metadata.pid, dtype=np.int64),
        tid=_col(recs, "thread_id")[keep],
    )


def _marker_messages(value: Any) -> dict[int, str]:
    """roctx messages by correlation id: a list of {key, value} (cereal's map) or an object."""
    if isinstance(value, dict):
        pairs = value.items()
    elif isinstance(value, list):
        pairs = ((e.get("key"), e.get("value")) for e in value if isinstance(e, dict))
    else:
        return {}
    out = {}
    for k, v in pairs:
        try:
            out[int(k)] = str(v)
        except (TypeError, ValueError):
            continue
    return out


def device_properties(agent: Agent, index: int) -> dict[str, Any]:
    """A GPU agent as a Kineto-style deviceProperties entry (the keys tracekit's hardware code reads)."""
    gfx = agent.gfx_target_version
    props: dict[str, Any] = {
        "id": index,
        "name": agent.product_name or agent.name,
        "gfx": agent.name,
        "numSms": agent.cu_count,
        "warpSize": agent.wave_front_size,
    }
    if gfx > 0:
        props["computeMajor"], props["computeMinor"] = gfx // 10000, (gfx // 100) % 100
    if agent.max_waves_per_cu > 0 and agent.wave_front_size > 0:
        props["maxThreadsPerMultiProcessor"] = agent.max_waves_per_cu * agent.wave_front_size
    if agent.lds_size_in_kb > 0:
        props["sharedMemPerMultiprocessor"] = agent.lds_size_in_kb * 1024
    if agent.local_mem_size > 0:
        props["totalGlobalMem"] = agent.local_mem_size
    return props


def meta_of(procs, agents, gpu_index, events, shown: str, symbols) -> dict[str, Any]:
    devices = sorted(
        (device_properties(a, gpu_index[h]) for h, a in agents.items() if h in gpu_index), key=lambda d: d["id"]
    )
    gpu = events["kind"].isin(("kernel", "memcpy", "memset")).to_numpy()
    used = sorted(int(d) for d in np.unique(events["device"].to_numpy()[gpu]) if d >= 0)
    match = [d for d in devices if used and d["id"] == used[0]] or devices[:1]
    pids = sorted({p.metadata.pid for p in procs})
    return {
        "source": shown,
        "profiler": {
            "name": PROFILER,
            "label": "AMD rocprofv3",
            "version": None,
            # what it recorded, and the kernels' registers and LDS (kernel_symbols)
            "recorded": recorded(events) + (["kernel_resources"] if symbols else []),
        },
        "rank": None,
        "world_size": None,
        "backend": None,
        "distributed_info": {},
        "device_properties": devices,
        "devices_used": used,
        "num_sms": match[0]["numSms"] if match and match[0]["numSms"] > 0 else None,
        "base_time_ns": None,
        "schema_version": None,
        "display_time_unit": None,
        "trace_name": None,
        "process_names": {},
        "thread_names": {},
        "pids": pids,
        # the kernels' grids are in workgroups and their registers and LDS are known (kernel_symbols)
        "grid_unit": "workgroups",
        "kernel_resources": bool(symbols),
    }
