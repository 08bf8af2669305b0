"""Kineto / Chrome-trace JSON → raw columns.

The document is first split into its events as raw byte slices (cheap: no Python object per
field), then the events are decoded in chunks into a fixed msgspec schema holding only the
fields tracekit uses, and each chunk is turned into numpy columns at once. Only one chunk of
Python objects exists at a time, which keeps peak memory near the size of the text.

``ts`` is kept as number text and converted to nanoseconds exactly (see ``numbers.py``); ``dur``
is a duration of at most hours, which a float64 holds to far better than a nanosecond, so it is
decoded as a float and rounded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Union

import msgspec
import numpy as np

from ..errors import InputError
from .numbers import raw_to_ns

CHUNK_EVENTS = 65536
_EMPTY = msgspec.Raw(b"")
_NAN = float("nan")


class Args(msgspec.Struct, gc=False, omit_defaults=True, rename={
    "external_id": "External id",
    "registers": "registers per thread",
    "shared_mem": "shared memory",
    "collective_name": "Collective name",
    "group_size": "Group size",
}):
    device: Union[int, str] = -1
    stream: Union[int, str] = -1
    correlation: Union[int, str] = -1
    external_id: Union[int, str] = -1
    bytes: Union[int, str] = -1
    grid: Union[list[int], str, None] = None
    block: Union[list[int], None] = None
    registers: Union[int, str] = -1
    shared_mem: Union[int, str] = -1
    kind: Any = None
    name: Any = None
    collective_name: Union[str, None] = None
    group_size: Union[int, str] = -1


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = -1
    tid: Union[int, str] = -1
    ts: msgspec.Raw = _EMPTY
    dur: float = _NAN
    args: Union[Args, None] = None


class TraceDoc(msgspec.Struct):
    traceEvents: Union[list[msgspec.Raw], None] = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    displayTimeUnit: Any = None
    traceName: Any = None


_DOC_DECODER = msgspec.json.Decoder(TraceDoc)
_ARRAY_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
_LOOSE_DECODER = msgspec.json.Decoder(float_hook=Decimal)

INT_ARGS = ("device", "stream", "correlation", "external_id", "bytes", "registers", "shared_mem", "group_size")


@dataclass
class RawColumns:
    """Columns of every record in ``traceEvents``, in file order (before any filtering)."""

    n: int
    ph: np.ndarray  # object array of str (small set, factorised later)
    cat: list
    name: list
    pid: np.ndarray
    tid: np.ndarray
    ts_ns: np.ndarray
    ts_ok: np.ndarray
    dur_ns: np.ndarray
    dur_state: np.ndarray  # 0 ok, 1 missing, 2 not finite, 3 negative
    ints: dict[str, np.ndarray]
    grid: np.ndarray  # (n, 3) int32, -1 unknown
    block: np.ndarray
    kind_arg: list  # AMD memcpy "kind" arg or None
    meta_name: list  # args.name of "M" records, None otherwise
    collective_name: list
    header: dict[str, Any] = field(default_factory=dict)
    loose_chunks: int = 0
    int_overflows: int = 0


def split_document(path, text: bytes | bytearray) -> tuple[list, dict[str, Any]]:
    """Return (event slices, top-level metadata). Raises msgspec errors for malformed JSON."""
    head = bytes(memoryview(text)[:256]).lstrip()
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:].lstrip()
    if head.startswith(b"["):
        return _ARRAY_DECODER.decode(text), {}
    if not head.startswith(b"{"):
        raise InputError(
            f"{path} is not JSON (it starts with {head[:16]!r}); pass a torch-profiler trace (.json, .json.gz or .json.zst)"
        )
    doc = _DOC_DECODER.decode(text)
    header = {k: getattr(doc, k) for k in TraceDoc.__struct_fields__ if k != "traceEvents"}
    if doc.traceEvents is None:
        raise InputError(
            f"{path} is JSON but not a Chrome/Kineto trace: it has no 'traceEvents' list; pass a torch-profiler trace"
        )
    return doc.traceEvents, header


def decode_events(raws: list) -> RawColumns:
    """Decode event slices chunk by chunk into numpy columns."""
    n = len(raws)
    cols = _alloc(n)
    for lo in range(0, n, CHUNK_EVENTS):
        hi = min(n, lo + CHUNK_EVENTS)
        chunk = b"[" + b",".join(raws[lo:hi]) + b"]"
        try:
            events = _EVENTS_DECODER.decode(chunk)
        except (msgspec.ValidationError, msgspec.DecodeError):
            events = [_loose_event(obj) for obj in _LOOSE_DECODER.decode(chunk)]
            cols.loose_chunks += 1
        _fill(cols, lo, events)
    return cols


def _alloc(n: int) -> RawColumns:
    return RawColumns(
        n=n,
        ph=np.empty(n, dtype=object),
        cat=[None] * n,
        name=[None] * n,
        pid=np.full(n, -1, dtype=np.int64),
        tid=np.full(n, -1, dtype=np.int64),
        ts_ns=np.zeros(n, dtype=np.int64),
        ts_ok=np.zeros(n, dtype=bool),
        dur_ns=np.zeros(n, dtype=np.int64),
        dur_state=np.zeros(n, dtype=np.int8),
        ints={k: np.full(n, -1, dtype=np.int64) for k in INT_ARGS},
        grid=np.full((n, 3), -1, dtype=np.int32),
        block=np.full((n, 3), -1, dtype=np.int32),
        kind_arg=[None] * n,
        meta_name=[None] * n,
        collective_name=[None] * n,
    )


def _int_array(values: list, cols: RawColumns) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        out = np.full(len(values), -1, dtype=np.int64)
        for i, v in enumerate(values):
            if isinstance(v, str):  # AMD writes some ids as text, e.g. "0x0" or "256"
                try:
                    v = int(v.strip(), 0)
                except ValueError:
                    continue
            if isinstance(v, int) and -(2**63) <= v < 2**63:
                out[i] = v
            elif isinstance(v, int):
                cols.int_overflows += 1
        return out


def _fill(cols: RawColumns, lo: int, events: list[Event]) -> None:
    hi = lo + len(events)
    sl = slice(lo, hi)
    cols.ph[sl] = [e.ph for e in events]
    cols.cat[sl] = [e.cat for e in events]
    cols.name[sl] = [e.name for e in events]
    cols.pid[sl] = _int_array([e.pid if isinstance(e.pid, int) else -1 for e in events], cols)
    cols.tid[sl] = _int_array([e.tid if isinstance(e.tid, int) else -1 for e in events], cols)
    ts, ok = raw_to_ns([e.ts for e in events])
    cols.ts_ns[sl] = ts
    cols.ts_ok[sl] = ok
    dur = np.array([e.dur for e in events], dtype=np.float64)
    missing = np.isnan(dur)
    finite = np.isfinite(dur)
    state = np.where(missing, 1, np.where(~finite, 2, np.where(dur < 0, 3, 0))).astype(np.int8)
    cols.dur_state[sl] = state
    cols.dur_ns[sl] = np.where(state == 0, np.rint(np.where(finite, dur, 0.0) * 1000.0), 0).astype(np.int64)
    idx = [i for i, e in enumerate(events) if e.args is not None]
    if not idx:
        return
    args = [events[i].args for i in idx]
    rows = np.asarray(idx, dtype=np.int64) + lo
    for key in INT_ARGS:
        cols.ints[key][rows] = _int_array([getattr(a, key) for a in args], cols)
    for target, key in ((cols.grid, "grid"), (cols.block, "block")):
        sel = [(r, v) for r, v in zip(rows.tolist(), (getattr(a, key) for a in args)) if isinstance(v, list)]
        if sel:
            good = [(r, v) for r, v in sel if len(v) == 3 and all(isinstance(x, int) and 0 <= x < 2**31 for x in v)]
            if good:
                target[[r for r, _ in good]] = np.array([v for _, v in good], dtype=np.int32)
    for r, a in zip(rows.tolist(), args):
        if a.kind is not None:
            cols.kind_arg[r] = a.kind
        if a.name is not None:
            cols.meta_name[r] = a.name
        if a.collective_name is not None:
            cols.collective_name[r] = a.collective_name


def _as_int(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, (float, Decimal)) and v == v and v not in (float("inf"), float("-inf")):
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return -1
    return -1


def _loose_event(obj: Any) -> Event:
    """Coerce one event decoded without a schema (the fallback for odd chunks)."""
    if not isinstance(obj, dict):
        return Event(ph="<not-an-object>")
    ts = obj.get("ts")
    if isinstance(ts, (int, Decimal)) and not isinstance(ts, bool):
        ts_raw = msgspec.Raw(str(ts).encode())
    elif isinstance(ts, str):
        ts_raw = msgspec.Raw(ts.encode("ascii", "replace"))
    else:
        ts_raw = _EMPTY
    dur = obj.get("dur")
    try:
        dur_f = float(dur) if dur is not None and not isinstance(dur, bool) else _NAN
    except (TypeError, ValueError):
        dur_f = float("inf")  # present but unusable: counted as a bad duration
    raw_args = obj.get("args")
    args = None
    if isinstance(raw_args, dict):
        g = raw_args.get("grid")
        b = raw_args.get("block")
        args = Args(
            device=_as_int(raw_args.get("device", -1)),
            stream=_as_int(raw_args.get("stream", -1)),
            correlation=_as_int(raw_args.get("correlation", -1)),
            external_id=_as_int(raw_args.get("External id", -1)),
            bytes=_as_int(raw_args.get("bytes", -1)),
            grid=[_as_int(x) for x in g] if isinstance(g, list) else None,
            block=[_as_int(x) for x in b] if isinstance(b, list) else None,
            registers=_as_int(raw_args.get("registers per thread", -1)),
            shared_mem=_as_int(raw_args.get("shared memory", -1)),
            kind=raw_args.get("kind") if isinstance(raw_args.get("kind"), str) else None,
            name=raw_args.get("name") if isinstance(raw_args.get("name"), str) else None,
            collective_name=raw_args.get("Collective name") if isinstance(raw_args.get("Collective name"), str) else None,
            group_size=_as_int(raw_args.get("Group size", -1)),
        )

    def text(key: str) -> str:
        v = obj.get(key, "")
        return v if isinstance(v, str) else ("" if v is None else str(v))

    def lane(key: str) -> int | str:
        v = obj.get(key, -1)
        return v if isinstance(v, (int, str)) and not isinstance(v, bool) else -1

    return Event(ph=text("ph"), cat=text("cat"), name=text("name"), pid=lane("pid"), tid=lane("tid"),
                 ts=ts_raw, dur=dur_f, args=args)
