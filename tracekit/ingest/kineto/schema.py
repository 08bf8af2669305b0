"""What one ``traceEvents`` record decodes to: the fixed msgspec schema and its tolerant fallback.

msgspec decodes each record into :class:`Event` (with its :class:`Args`), which holds only the fields
tracekit uses; ``ts`` is kept as its number text (converted to nanoseconds exactly by ``numbers.py``) and
``dur`` as a float. A chunk that does not fit the schema (a string where a number belongs, say) is decoded
without one and each record coerced by :func:`loose_event`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Union

import msgspec

_EMPTY = msgspec.Raw(b"")
_NAN = float("nan")
IntOrStr = Union[int, str]


class Args(
    msgspec.Struct,
    gc=False,
    rename={
        "external_id": "External id",
        "registers": "registers per thread",
        "shared_mem": "shared memory",
        "dims": "Input Dims",
        "types": "Input type",
        "concrete": "Concrete Inputs",
        "graph_id": "graph id",
        "graph_node_id": "graph node id",
    },
):
    device: IntOrStr = -1
    stream: IntOrStr = -1
    correlation: IntOrStr = -1
    external_id: IntOrStr = -1
    bytes: IntOrStr = -1
    grid: Union[list[int], str, None] = None
    block: Union[list[int], None] = None
    registers: IntOrStr = -1
    shared_mem: IntOrStr = -1
    # CUPTI's graph and node of a kernel a CUDA/HIP graph replayed (and of a capture's launch records)
    graph_id: IntOrStr = -1
    graph_node_id: IntOrStr = -1
    kind: Any = None
    name: Any = None
    # a cpu_op's recorded inputs (record_shapes=True), kept as their JSON text: never parsed here
    dims: msgspec.Raw = _EMPTY
    types: msgspec.Raw = _EMPTY
    concrete: msgspec.Raw = _EMPTY


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: IntOrStr = -1
    tid: IntOrStr = -1
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


HEADER_KEYS = [k for k in TraceDoc.__struct_fields__ if k != "traceEvents"]
DOC_DECODER = msgspec.json.Decoder(TraceDoc)
ARRAY_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
EVENTS_DECODER = msgspec.json.Decoder(list[Event])
LOOSE_DECODER = msgspec.json.Decoder(float_hook=Decimal)
_LOOSE_ENCODER = msgspec.json.Encoder(decimal_format="number")

INT_ARGS = (
    "device",
    "stream",
    "correlation",
    "external_id",
    "bytes",
    "registers",
    "shared_mem",
    "graph_id",
    "graph_node_id",
)


def _as_int(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, (float, Decimal)) and v == v and v not in (float("inf"), float("-inf")):
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip(), 0)
        except ValueError:
            return -1
    return -1


def loose_event(obj: Any) -> Event:
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
    if dur_f != dur_f and dur is not None and not isinstance(dur, bool):
        dur_f = float("inf")  # a "NaN" that is present is a non-finite duration, not a missing one
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
            graph_id=_as_int(raw_args.get("graph id", -1)),
            graph_node_id=_as_int(raw_args.get("graph node id", -1)),
            kind=raw_args.get("kind") if isinstance(raw_args.get("kind"), str) else None,
            name=raw_args.get("name") if isinstance(raw_args.get("name"), str) else None,
            **{
                k: msgspec.Raw(_LOOSE_ENCODER.encode(raw_args[key]))
                for k, key in (("dims", "Input Dims"), ("types", "Input type"), ("concrete", "Concrete Inputs"))
                if key in raw_args
            },
        )

    def text(key: str) -> str:
        v = obj.get(key, "")
        return v if isinstance(v, str) else ("" if v is None else str(v))

    def lane(key: str) -> int | str:
        v = obj.get(key, -1)
        return v if isinstance(v, (int, str)) and not isinstance(v, bool) else -1

    return Event(
        ph=text("ph"),
        cat=text("cat"),
        name=text("name"),
        pid=lane("pid"),
        tid=lane("tid"),
        ts=ts_raw,
        dur=dur_f,
        args=args,
    )
