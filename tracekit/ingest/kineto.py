"""Kineto / Chrome-trace JSON → raw columns.

Two ways in, one way out:

* **Streaming** (the fast path): the decompressed text arrives in blocks; pieces of whole events
  are cut at the separator between top-level events (``},`` + newline + indentation + ``{`` —
  JSON strings cannot hold a raw newline, so the pattern never occurs inside a value) and each
  piece is decoded in place. Only a few blocks of text are held at a time. On two cores a forked
  helper process decodes pieces too (:class:`_Helper`), through memory shared with it.
* **Whole document** (the fallback, and for salvage): the full text is split into raw event
  slices, which are decoded in chunks.

Either way each chunk is decoded by msgspec into a fixed schema that holds only the fields
tracekit uses, then turned into numpy columns at once, one C-level pass per field and never a
Python statement per event (strings are factorised per chunk into codes of a global dictionary,
so no per-event string survives the chunk).

``ts`` is kept as number text and converted to nanoseconds exactly (see ``numbers.py``); ``dur``
is a duration of at most hours, which a float64 holds to far better than a nanosecond, so it is
decoded as a float and rounded.
"""
from __future__ import annotations

import itertools
import mmap
import os
import pickle
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Union

import msgspec
import numpy as np

from ..errors import InputError
from .compression import BOM, is_compressed, without_bom
from .numbers import raw_to_ns

CHUNK_EVENTS = 65536
_EMPTY = msgspec.Raw(b"")
_NAN = float("nan")
_NUL = b"\0"
IntOrStr = Union[int, str]


class Args(msgspec.Struct, gc=False, rename={
    "external_id": "External id",
    "registers": "registers per thread",
    "shared_mem": "shared memory",
    "dims": "Input Dims",
    "types": "Input type",
    "concrete": "Concrete Inputs",
}):
    device: IntOrStr = -1
    stream: IntOrStr = -1
    correlation: IntOrStr = -1
    external_id: IntOrStr = -1
    bytes: IntOrStr = -1
    grid: Union[list[int], str, None] = None
    block: Union[list[int], None] = None
    registers: IntOrStr = -1
    shared_mem: IntOrStr = -1
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
_DOC_DECODER = msgspec.json.Decoder(TraceDoc)
_ARRAY_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
_LOOSE_DECODER = msgspec.json.Decoder(float_hook=Decimal)
_LOOSE_ENCODER = msgspec.json.Encoder(decimal_format="number")

INT_ARGS = ("device", "stream", "correlation", "external_id", "bytes", "registers", "shared_mem")


# Why a record is not kept, by code (0 = kept). The first five are records that are not timeline
# events at all; the rest are events that cannot be used. Both are counted, never silently lost.
REASONS = [
    "",
    "metadata record (ph 'M')",
    "flow record (ph 's')",
    "flow record (ph 'f')",
    "flow record (ph 't')",
    "counter record (ph 'C')",
    "record with an unsupported or missing phase 'ph'",
    "begin/end or async record (ph B/E/b/e/n) not paired by tracekit",
    "event without a usable 'ts'",
    "complete event without 'dur'",
    "complete event with a non-finite 'dur'",
    "complete event with a negative 'dur'",
    "event whose 'dur' or end lies beyond the int64 nanosecond range",
    "record that cannot be decoded (invalid string escape)",
]
NOT_EVENT_REASONS = frozenset(REASONS[1:6])
_PHASE_REASON = {"M": 1, "s": 2, "f": 3, "t": 4, "C": 5, "X": 0, "i": 0, "I": 0,
                 "B": 7, "E": 7, "b": 7, "e": 7, "n": 7, "<undecodable>": 13}
_BAD_TS, _DUR_STATE_REASON = 8, np.array([0, 9, 10, 11], dtype=np.int8)
_OUT_OF_RANGE = 12  # start + dur does not fit int64 ns (a corrupt or absurd value)
_INT64_MAX = 2**63 - 1


@dataclass
class RawColumns:
    """Columns of the kept events, in file order (``row`` = index in ``traceEvents``). Each column is an
    array or, as :meth:`ColumnBuilder.finish` leaves them, the :class:`Pieces` of one (see :func:`whole`)."""

    n: int  # records read
    row: np.ndarray
    cat: np.ndarray  # codes into cat_uniques
    cat_uniques: list
    name: np.ndarray  # codes into name_uniques
    name_uniques: list
    pid: np.ndarray
    tid: np.ndarray
    ts_ns: np.ndarray
    dur_ns: np.ndarray
    instant: np.ndarray
    ints: dict[str, np.ndarray]
    grid: np.ndarray  # (n, 3) int32, -1 unknown
    block: np.ndarray
    kind_arg: dict[int, Any]  # row -> args.kind, for copies only (AMD names copies by this arg)
    shapes: np.ndarray  # int32 codes into shapes_uniques, -1 where the event is no cpu_op with Input Dims
    shapes_uniques: list  # JSON text [Input Dims, Input type, Concrete Inputs] (bytes)
    meta: list  # (record name, pid, tid, args.name) of each "M" record
    reasons: dict[str, int]  # records not kept, by reason
    header: dict[str, Any] = field(default_factory=dict)
    loose_chunks: int = 0
    int_overflows: int = 0
    utf8_repairs: int = 0  # records whose invalid UTF-8 bytes were replaced by U+FFFD


class Pieces(list):
    """A raw column still in its pieces' arrays. It is joined only when it is used (:meth:`whole`): joining
    each column just before it is gathered lets a few buffers serve every column in turn, where joining all
    of them first touches fresh memory for all of them at once (page faults cost more than the copy)."""

    def __init__(self, arrays: list, empty: np.ndarray) -> None:
        super().__init__(arrays)
        self.empty = empty

    def whole(self) -> np.ndarray:
        if not self:
            return self.empty
        return self[0] if len(self) == 1 else np.concatenate(self)


def whole(column) -> np.ndarray:
    """A raw column as one array (it may still be in :class:`Pieces`)."""
    return column.whole() if isinstance(column, Pieces) else column


class _Dictionary:
    """A growing string dictionary: chunk strings → global int32 codes (first-seen order)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def encode(self, strings: list) -> np.ndarray:
        """Codes of ``strings``: factorised within the list first, in C (``dict.fromkeys`` keeps first-seen
        order, and each string's hash is computed once and cached in the string), then only the distinct
        values are looked up in the global dictionary."""
        n = len(strings)
        if n == 0:
            return np.empty(0, dtype=np.int32)
        if strings.count(strings[0]) == n:  # one value (a piece of cpu_ops, say): nothing to look up
            return np.full(n, self._code(strings[0]), dtype=np.int32)
        local = dict.fromkeys(strings)
        table = np.empty(len(local), dtype=np.int32)
        for j, key in enumerate(local):
            local[key] = j
            table[j] = self._code(key)
        return table[np.fromiter(map(local.__getitem__, strings), dtype=np.int32, count=n)]

    def _code(self, key: str) -> int:
        code = self.index.get(key)
        if code is None:
            code = self.index[key] = len(self.values)
            self.values.append(key)
        return code


class ColumnBuilder:
    """Accumulates decoded chunks as numpy columns."""

    def __init__(self) -> None:
        self.parts: list[dict[str, np.ndarray]] = []
        self.n = 0
        self.ph = _Dictionary()
        self.cat = _Dictionary()
        self.name = _Dictionary()
        self.shapes = _Dictionary()
        self._cpu_cats: np.ndarray = np.zeros(0, dtype=bool)
        self.kind_arg: dict[int, Any] = {}
        self.meta: list = []
        self.reasons = np.zeros(len(REASONS), dtype=np.int64)
        self.loose_chunks = 0
        self.int_overflows = 0
        self.utf8_repairs = 0

    def add_text(self, text: bytes | bytearray | memoryview) -> None:
        """Decode a JSON array of events (falling back to a tolerant decode for odd chunks)."""
        try:
            events = _EVENTS_DECODER.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError):
            events = [_loose_event(obj) for obj in _LOOSE_DECODER.decode(text)]
            self.loose_chunks += 1
        self.add_events(events)

    def add_raws(self, raws: list) -> None:
        """Decode event slices one by one: the fallback for a chunk that does not decode as a whole.

        Invalid UTF-8 is replaced by U+FFFD (and counted); a record that still cannot be decoded (a
        lone surrogate escape, say) is counted as undecodable."""
        self.loose_chunks += 1
        self.add_events([self._decode_one(bytes(r)) for r in raws])

    def _decode_one(self, raw: bytes) -> Event:
        for attempt in range(2):
            try:
                try:
                    return _EVENTS_DECODER.decode(b"[" + raw + b"]")[0]
                except msgspec.ValidationError:
                    return _loose_event(_LOOSE_DECODER.decode(raw))
            except msgspec.DecodeError as exc:
                if attempt == 0 and "UTF-8" in str(exc):
                    raw = raw.decode("utf-8", "replace").encode("utf-8")
                    self.utf8_repairs += 1
                    continue
                break
            except RecursionError:
                break
        return Event(ph="<undecodable>")

    def add_events(self, events: list[Event]) -> None:
        # Every step below is one pass over the events in C (a list comprehension or a numpy call), never
        # a Python statement per event: at ~10^6 events a trace, each pass costs ~10-30 ns an event.
        lo = self.n
        n = len(events)
        self.n += n
        ph_codes = self.ph.encode([e.ph for e in events])
        phases = self.ph.values
        reason = np.array([_PHASE_REASON.get(p, 6) for p in phases] + [6], dtype=np.int8)[ph_codes]
        instant_by_code = np.array([p in ("i", "I") for p in phases] + [False])
        for i in np.flatnonzero(reason == 1).tolist():  # metadata: lane names
            e = events[i]
            if e.args is not None and isinstance(e.args.name, str):
                self.meta.append((e.name, e.pid, e.tid, e.args.name))
        cand = np.flatnonzero(reason == 0)
        if cand.size < n:
            events = [events[i] for i in cand.tolist()]
        ts, ok = raw_to_ns([e.ts for e in events])
        dur = np.fromiter([e.dur for e in events], dtype=np.float64, count=len(events))
        instant = instant_by_code[ph_codes[cand]]
        finite = np.isfinite(dur)
        state = np.where(np.isnan(dur), 1, np.where(~finite, 2, np.where(dur < 0, 3, 0))).astype(np.int8)
        sub = np.where(~ok, _BAD_TS, np.where(instant, 0, _DUR_STATE_REASON[state])).astype(np.int8)
        dur_ns_f = np.where(instant | ~finite | (dur < 0), 0.0, np.rint(dur * 1000.0))
        big = dur_ns_f >= 2.0**63  # would wrap in int64
        dur_ns = np.where(big, 0, dur_ns_f).astype(np.int64)
        big |= ts > _INT64_MAX - dur_ns  # start + dur would wrap
        if big.any():
            sub = np.where((sub == 0) & big, _OUT_OF_RANGE, sub).astype(np.int8)
        reason[cand] = sub
        self.reasons += np.bincount(reason, minlength=len(REASONS))
        keep = np.flatnonzero(sub == 0)
        if keep.size < len(events):
            events = [events[i] for i in keep.tolist()]
            ts, instant, dur_ns = ts[keep], instant[keep], dur_ns[keep]
        m = len(events)
        part: dict[str, np.ndarray] = {"row": (cand[keep] + lo).astype(np.int64)}
        part["cat"] = self.cat.encode([e.cat for e in events])
        part["name"] = self.name.encode([e.name for e in events])
        part["pid"] = self._ints([e.pid for e in events])
        part["tid"] = self._ints([e.tid for e in events])
        part["ts_ns"] = ts
        part["instant"] = instant
        part["dur_ns"] = dur_ns
        args_all = [e.args for e in events]
        args = list(filter(None, args_all))  # Args structs are always true
        if len(args) == m:
            idx = None  # every event has args (the common case)
        else:
            idx = np.flatnonzero(np.array([a is not None for a in args_all], dtype=bool))
        del args_all
        ints = self._ints
        for key, values in (
            ("device", [a.device for a in args]),
            ("stream", [a.stream for a in args]),
            ("correlation", [a.correlation for a in args]),
            ("external_id", [a.external_id for a in args]),
            ("bytes", [a.bytes for a in args]),
            ("registers", [a.registers for a in args]),
            ("shared_mem", [a.shared_mem for a in args]),
        ):
            if idx is None:
                part[key] = ints(values) if values else np.full(m, -1, dtype=np.int64)
            else:
                col = np.full(m, -1, dtype=np.int64)
                if args:
                    col[idx] = ints(values)
                part[key] = col
        part["shapes"] = self._shapes(args, idx, part["cat"], m)
        part["grid"] = self._triples([a.grid for a in args], idx, m)
        part["block"] = self._triples([a.block for a in args], idx, m)
        if args:
            copy_cat = np.array([c in ("gpu_memcpy", "gpu_memset") for c in self.cat.values])
            rows = part["row"]
            cats = part["cat"] if idx is None else part["cat"][idx]
            for j in np.flatnonzero(copy_cat[cats]).tolist():
                if args[j].kind is not None:
                    self.kind_arg[int(rows[j if idx is None else idx[j]])] = args[j].kind
        self.parts.append(part)

    def _shapes(self, args: list, idx: np.ndarray | None, cats: np.ndarray, m: int) -> np.ndarray:
        """Codes of the cpu_ops' ``Input Dims``, ``Input type`` and ``Concrete Inputs`` (their JSON text as written,
        joined by NUL — which JSON text cannot hold raw — into one bytes key per op, dictionary-encoded; made one JSON
        array per distinct key by :func:`tracekit.ingest.normalize.shapes_text`), -1 elsewhere. Only the cpu_ops
        are looked at, in one pass."""
        out = np.full(m, -1, dtype=np.int32)
        if not args:
            return out
        if len(self._cpu_cats) != len(self.cat.values):  # the categories that are cpu_ops (a handful)
            from ..data import load_classes

            classes = load_classes()
            self._cpu_cats = np.array([classes.kind_for_cat(c) == "cpu_op" for c in self.cat.values], dtype=bool)
        ops = np.flatnonzero(self._cpu_cats[cats if idx is None else cats[idx]])
        if not ops.size:
            return out
        join = _NUL.join
        keys = [join((a.dims, a.types, a.concrete)) if a.dims else None for a in map(args.__getitem__, ops.tolist())]
        if keys.count(None) == len(keys):  # no shapes recorded (record_shapes=False)
            return out
        has = np.fromiter(map(bool, keys), dtype=bool, count=len(keys))  # a key is never empty
        rows = ops[has]
        out[rows if idx is None else idx[rows]] = self.shapes.encode(list(filter(None, keys)))
        return out

    def _ints(self, values: list) -> np.ndarray:
        if values.count(-1) == len(values):  # the field is absent from every event (the default): no conversion
            return np.full(len(values), -1, dtype=np.int64)
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
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
                    self.int_overflows += 1
            return out

    @staticmethod
    def _triples(values: list, idx: np.ndarray | None, n: int) -> np.ndarray:
        """(n, 3) int32 of the 3-int lists in ``values`` (at rows ``idx``, or all rows), -1 elsewhere."""
        out = np.full((n, 3), -1, dtype=np.int32)
        if values.count(None) == len(values):  # the field is absent from every event (the default)
            return out
        is_list = np.array([type(v) is list for v in values], dtype=bool)
        sel = np.flatnonzero(is_list)
        if not sel.size:
            return out
        lists = values if sel.size == len(values) else [values[i] for i in sel.tolist()]
        rows = sel if idx is None else idx[sel]
        arr = None
        if set(map(len, lists)) == {3}:
            try:
                arr = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64,
                                  count=3 * len(lists)).reshape(-1, 3)
            except (ValueError, TypeError, OverflowError):
                arr = None
        if arr is not None:
            good = ((arr >= 0) & (arr < 2**31)).all(axis=1)
            out[rows[good]] = arr[good].astype(np.int32)
            return out
        for r, v in zip(rows.tolist(), lists):
            if len(v) == 3 and all(isinstance(x, int) and 0 <= x < 2**31 for x in v):
                out[r] = v
        return out

    def export(self) -> dict[str, Any]:
        """This builder's columns with its own codes, to be merged into another by :meth:`absorb`."""
        keys = list(self.parts[0]) if self.parts else []
        if len(self.parts) == 1:
            part = self.parts[0]
        else:
            part = {k: np.concatenate([p[k] for p in self.parts]) for k in keys}
        return {"part": part, "n": self.n, "cat": self.cat.values, "name": self.name.values,
                "shapes": self.shapes.values,
                "kind_arg": self.kind_arg, "meta": self.meta, "reasons": self.reasons,
                "loose": self.loose_chunks, "overflows": self.int_overflows, "utf8": self.utf8_repairs}

    def absorb(self, exported: dict[str, Any]) -> None:
        """Append an exported builder's rows, re-coding its strings into this builder's dictionaries."""
        part = exported["part"]
        lo = self.n
        if part and len(part["row"]):
            for key, dictionary in (("cat", self.cat), ("name", self.name), ("shapes", self.shapes)):
                table = dictionary.encode(exported[key])
                if key == "shapes":  # -1 (no shapes) stays -1
                    table = np.append(table, np.int32(-1))
                part[key] = table[part[key]]
            part["row"] = part["row"] + lo
            self.parts.append(part)
        self.kind_arg.update({lo + r: v for r, v in exported["kind_arg"].items()})
        self.meta.extend(exported["meta"])
        self.reasons += exported["reasons"]
        self.loose_chunks += exported["loose"]
        self.int_overflows += exported["overflows"]
        self.utf8_repairs += exported["utf8"]
        self.n += exported["n"]

    def finish(self, header: dict[str, Any]) -> RawColumns:
        def cat(key: str, empty_shape: tuple = (0,), dtype=np.int64) -> "Pieces":
            return Pieces([p.pop(key) for p in self.parts], np.empty(empty_shape, dtype=dtype))

        cols = RawColumns(
            n=self.n, row=cat("row"),
            cat=cat("cat", dtype=np.int32), cat_uniques=self.cat.values,
            name=cat("name", dtype=np.int32), name_uniques=self.name.values,
            shapes=cat("shapes", dtype=np.int32), shapes_uniques=self.shapes.values,
            pid=cat("pid"), tid=cat("tid"), ts_ns=cat("ts_ns"), dur_ns=cat("dur_ns"),
            instant=cat("instant", dtype=bool),
            ints={k: cat(k) for k in INT_ARGS},
            grid=cat("grid", (0, 3), np.int32), block=cat("block", (0, 3), np.int32),
            kind_arg=self.kind_arg, meta=self.meta,
            reasons={r: int(c) for r, c in zip(REASONS, self.reasons.tolist()) if r and c},
            header=header, loose_chunks=self.loose_chunks, int_overflows=self.int_overflows,
            utf8_repairs=self.utf8_repairs,
        )
        self.parts.clear()
        return cols


# --------------------------------------------------------------------------- whole document


def split_document(path, text: bytes | bytearray) -> tuple[list, dict[str, Any]]:
    """Return (event slices, top-level metadata). Raises msgspec errors for malformed JSON."""
    head = _head(text)
    if text[:len(BOM)] == BOM:  # a UTF-8 byte-order mark (Windows editors write one); a view, not a copy
        text = memoryview(text)[len(BOM):]
    if head.startswith(b"["):
        return _ARRAY_DECODER.decode(text), {}
    if not head.startswith(b"{"):
        if is_compressed(head):
            raise InputError(f"{path} is compressed twice (its decompressed content is gzip or zstd data again);"
                             " decompress it once and pass the result")
        raise InputError(
            f"{path} is not JSON (it starts with {head[:16]!r}); pass a torch-profiler trace (.json, .json.gz or .json.zst)"
        )
    try:
        doc = _DOC_DECODER.decode(text)
    except msgspec.ValidationError as exc:  # the only typed field is traceEvents
        raise InputError(f"{path} is JSON but its 'traceEvents' is not a list of events ({exc});"
                         " pass a torch-profiler trace") from exc
    if doc.traceEvents is None:
        raise InputError(
            f"{path} is JSON but not a Chrome/Kineto trace: it has no 'traceEvents' list; pass a torch-profiler trace"
        )
    return doc.traceEvents, {k: getattr(doc, k) for k in HEADER_KEYS}


def _head(text) -> bytes:
    head = bytes(memoryview(text)[:256]).lstrip()
    return without_bom(head).lstrip()


def decode_slices(raws: list, header: dict[str, Any]) -> RawColumns:
    """Decode raw event slices chunk by chunk."""
    builder = ColumnBuilder()
    for lo in range(0, len(raws), CHUNK_EVENTS):
        chunk = raws[lo : lo + CHUNK_EVENTS]
        try:
            builder.add_text(b"[" + b",".join(chunk) + b"]")
        except (msgspec.DecodeError, RecursionError):  # invalid UTF-8, a bad escape: record by record
            builder.add_raws(chunk)
    return builder.finish(header)


# --------------------------------------------------------------------------- streaming

# The indentation and the whitespace around the key are bounded, so that a search never backtracks over a long
# run of whitespace (512 MiB of spaces after "}," once made every block's search scan all of it again: quadratic)
# and a search can resume where the last one stopped, _MATCH_SPAN bytes back. A file indented deeper than
# _MAX_INDENT is read by the whole-document reader.
_MAX_INDENT = 64
_SEP_RE = re.compile(rb"\},(\r?\n[ \t]{0,%d})\{" % _MAX_INDENT)
_KEY_RE = re.compile(rb'"traceEvents"\s{0,%d}:\s{0,%d}\[' % (_MAX_INDENT, _MAX_INDENT))
_MATCH_SPAN = 2 * _MAX_INDENT + 16  # longer than any match of either pattern
_MAX_HEAD = 64 << 20


class NotStreamable(Exception):
    """The layout is not one the streaming path handles; use the whole-document path."""


def decode_stream(blocks: Iterable[bytes], *, workers: int = 1, plain_file: str | None = None,
                  piece_bytes: int | None = None, on_position=None, piece_target: int | None = None) -> RawColumns:
    """Decode a trace from text blocks; raise NotStreamable when the layout does not allow it.

    With ``workers`` > 1 a forked helper process shares the decoding of the pieces with this one (see
    :class:`_Helper`); the pieces are reassembled in file order, so the result is the same as with one
    worker. Decompressed text reaches the helper through a ring of shared memory slots of ``piece_bytes``
    (default: 1.25 blocks of the reader) each. Pieces are cut once ``piece_target`` bytes of text have
    gathered (default: the reader's READ_BLOCK), whatever the size of the blocks. ``plain_file`` (an
    uncompressed source, whose bytes are the text) is not read through ``blocks`` beyond the first event separator: from there the file is cut into
    pieces by reading a few KiB around each cut point, each piece is read by the process that decodes it,
    and ``on_position(offset)`` reports the progress.
    """
    helper = None
    if workers > 1:
        try:
            helper = _Helper(plain_file, piece_bytes)
        except (OSError, MemoryError):  # no memory to map the ring or fork (ulimit -v): decode alone
            helper = None
    try:
        return _decode_stream(blocks, helper, on_position, piece_target)
    finally:
        if helper is not None:
            helper.stop()


def _decode_stream(blocks: Iterable[bytes], helper: "_Helper | None", on_position=None,
                   piece_target: int | None = None) -> RawColumns:
    from . import reader

    slots: list = []  # per piece in file order: an exported builder, or None for the helper's next result
    buf = bytearray()
    it = iter(blocks)
    head_end = -1
    array_form = False
    total_in = 0
    searched = 0  # no match of _KEY_RE starts before this
    for block in it:
        total_in += len(block)
        if not buf and not bytes(block[:1]).strip():  # whitespace before the document: dropped as it comes
            block = bytes(block).lstrip()
        buf += block
        start = _head(buf)
        if start and start[:1] not in (b"{", b"["):
            raise NotStreamable("not JSON")
        if start.startswith(b"["):
            array_form = True
            head_end = buf.index(b"[") + 1
            break
        m = _KEY_RE.search(buf, searched)
        if m:
            head_end = m.end()
            break
        searched = max(0, len(buf) - _MATCH_SPAN)
        if len(buf) > _MAX_HEAD:
            raise NotStreamable("no traceEvents near the start")
    if head_end < 0:
        raise NotStreamable("no traceEvents")
    header_text = b"" if array_form else bytes(buf[: _KEY_RE.search(buf, searched).start()]).lstrip()
    header_text = without_bom(header_text)
    del buf[: head_end - 1]  # keep the '[': every piece starts with one byte before its first event
    # From here the text gathers in one buffer of fixed size, reused for every piece (fresh memory for each
    # piece would cost a page fault per 4 KiB): acc[:n] is the text not yet cut, acc[0] the byte before its
    # first event. A piece is cut at the last event separator once about `target` bytes have gathered.
    target = piece_target or reader.READ_BLOCK
    limit = target + target // 4 if helper is None else min(target + target // 4, helper.slot_bytes - 2)
    n = len(buf)
    acc = bytearray(max(target + target // 4 + 2, 2 * n))
    acc[:n] = buf
    del buf
    sep: bytes | None = None
    tail: bytes | None = None
    lo = 0  # no separator starts before acc[lo] (the search for the next one resumes there: linear in the text)
    for block in itertools.chain((b"",), it):  # the empty first round looks at what the head left
        size = len(block)
        if size:
            total_in += size
            if n + size > len(acc):  # one event bigger than the buffer: grow it
                acc.extend(bytes(n + size + len(acc) // 2 - len(acc)))
            acc[n : n + size] = block
            n += size
        if sep is None:
            m = _SEP_RE.search(acc, lo, n)
            if m is None:
                if n > _MAX_HEAD:
                    raise NotStreamable("no newline-separated events")
                lo = max(0, n - _MATCH_SPAN)
                continue
            lo = 0
            sep = m.group(0)
            if helper is not None and helper.plain_file is not None:
                # the rest of a plain file is cut where it lies: no need to read it all through this process
                close = getattr(it, "close", None)
                if close is not None:
                    close()
                tail = _cut_plain_file(helper, sep, total_in - n, slots, on_position)
                break
        while n >= target:  # (several pieces when a block is bigger than a piece)
            rest = _cut_piece(acc, n, sep, helper, slots, limit, lo)
            if rest == n:
                lo = max(0, n - len(sep) + 1)  # none up to here: the next search starts at the new text
                break
            n, lo = rest, 0
    else:
        while sep is not None:  # the text before the last separator of the input
            rest = _cut_piece(acc, n, sep, helper, slots, limit, lo)
            if rest == n:
                break
            n, lo = rest, 0
        tail = bytes(acc[1:n])  # acc[0] is the byte before the next event ("[" or whitespace)
    del acc
    try:
        if array_form:
            last = _ARRAY_DECODER.decode(b"[" + tail)
            trailer: dict[str, Any] = {}
        else:
            doc = _DOC_DECODER.decode(b'{"traceEvents": [' + tail)
            last = doc.traceEvents or []
            trailer = {k: getattr(doc, k) for k in HEADER_KEYS}
        head_doc = _DOC_DECODER.decode(header_text + b'"traceEvents": []}') if header_text else None
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise NotStreamable(str(exc)) from exc
    builder = ColumnBuilder()
    remote = iter(helper.results()) if helper is not None else iter(())
    for slot in slots:
        builder.absorb(slot if slot is not None else next(remote))
    if last:
        try:
            builder.add_text(b"[" + b",".join(last) + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise NotStreamable(str(exc)) from exc
    header = {k: None for k in HEADER_KEYS}
    if head_doc is not None:
        header.update({k: getattr(head_doc, k) for k in HEADER_KEYS if getattr(head_doc, k) is not None})
    header.update({k: v for k, v in trailer.items() if v is not None})
    return builder.finish(header)


def _cut_piece(acc: bytearray, n: int, sep: bytes, helper: "_Helper | None", slots: list, limit: int,
               lo: int = 0) -> int:
    """Cut acc[1 : k + 1] (whole events, up to the last separator in acc[:n]) as the next piece: into the
    helper's ring, or decoded here; move the rest to the front of ``acc`` and return its length. No separator
    starts before ``lo`` (the caller searched there already: text without one, whitespace say, is searched once)."""
    k = acc.rfind(sep, lo, min(n, limit)) if lo < limit else -1  # a piece fits a ring slot
    if k < 0:
        k = acc.rfind(sep, lo, n)
        if k < 0:  # no separator yet (one event longer than a piece): gather on
            return n
    if helper is not None and helper.can_take(k):
        slots.append(None)
        helper.submit(acc, k)
    else:
        slots.append(_decode_piece(acc, k))
    cut = k + len(sep) - 2  # keep the byte before the next '{': it becomes the next '['
    acc[: n - cut] = acc[cut:n]
    return n - cut


def _decode_text(text) -> dict[str, Any]:
    """Decode one piece ("[" + whole events + "]"), a sub-chunk at a time (see :func:`_sub_chunks`)."""
    b = ColumnBuilder()
    out_of_memory = False
    try:
        for chunk in _sub_chunks(text):
            try:
                b.add_text(chunk)
            except MemoryError:
                # raised again below: the decoded events in this traceback's frames hold views of the text (their
                # msgspec.Raw ts), so the text can be released only once the handler has let go of them
                out_of_memory = True
            finally:
                if isinstance(chunk, memoryview):
                    chunk.release()
            if out_of_memory:
                break
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise NotStreamable(str(exc)) from exc
    if out_of_memory:
        raise MemoryError
    return b.export()


SUB_CHUNK = 1 << 20  # bytes of text decoded at a time inside a piece


def _sub_chunks(text):
    """A piece ("[" + events + "]") as consecutive arrays of about SUB_CHUNK bytes of whole events.

    The objects msgspec makes for 1 MiB of events fit in about one of Python's 1 MiB allocator arenas, and
    the allocator keeps one empty arena for reuse, so decoding a piece a MiB at a time reuses the same
    memory where a whole 8 MiB piece maps (and page-faults) ten fresh arenas and returns them each time: a
    fault per 4 KiB page, which on two cores also contend in the kernel. Each cut writes "]" over the comma
    after an event and "[" over the byte before the next "{" (a newline or an indent: the separator
    always has one); a read-only text is copied first."""
    n = len(text)
    if n <= SUB_CHUNK + SUB_CHUNK // 2:
        yield text
        return
    view = memoryview(text)
    if view.readonly:
        view = memoryview(bytearray(view))
    try:
        a = 0  # offset of the current chunk's "["
        while n - a > SUB_CHUNK + SUB_CHUNK // 2:
            m = _SEP_RE.search(view, a + SUB_CHUNK)
            if m is None:
                break
            comma, brace = m.start() + 1, m.end() - 1
            view[comma] = 93  # "]"
            view[brace - 1] = 91  # "["
            yield view[a : comma + 1]
            a = brace - 1
        yield view[a:]
    finally:
        view.release()


_REPLY = struct.Struct("<qqq")  # (piece index, status, payload length)
_OK, _OK_IN_SLOT, _FAILED = 0, 1, 2
_RING = 4  # pieces handed over and not yet decoded, at most (each has a shared memory slot for its text)
# the shared control block: int64 words
_PUBLISHED, _TAKEN, _STOP = 0, 1, 2
_DESC = 8  # descriptors (offset or slot start, length) of the ring's pieces start at this word


class _Helper:
    """A forked process that shares the decoding of pieces with this one.

    Pieces go into a ring of :data:`_RING` entries in memory shared with the helper (anonymous shared
    mappings made before the fork): an uncompressed file's pieces as (offset, length), which the helper
    reads from the file itself; decompressed text copied into the piece's slot. Whoever is free takes the
    oldest piece not yet taken (a counter under a lock, a semaphore counting the pieces waiting), so this
    process decodes whenever the ring is full, and at the end of the input it takes every piece the
    helper has not started: neither side waits on a queue the other filled. The helper pickles each
    piece's columns into the piece's slot (the pipe only says which piece, and carries a result too big
    for the slot), so it never waits for this process to read; a collector thread unpickles them and
    files them by piece index, which frees the ring entry.
    """

    def __init__(self, plain_file: str | None = None, piece_bytes: int | None = None) -> None:
        import multiprocessing as mp
        import threading

        from . import reader

        ctx = mp.get_context("fork")
        self.plain_file = plain_file
        self.slot_bytes = piece_bytes or (reader.READ_BLOCK + reader.READ_BLOCK // 4 + 2)
        self.shm = mmap.mmap(-1, _RING * self.slot_bytes)  # the pieces' text (compressed input) and results
        self.ctl_map = mmap.mmap(-1, 8 * (_DESC + 2 * _RING))
        self.ctl = np.frombuffer(self.ctl_map, dtype=np.int64)
        self.lock = ctx.Lock()
        self.waiting = ctx.Semaphore(0)  # pieces published and not yet taken (plus one to stop)
        self._res_r, res_w = os.pipe()
        _grow_pipe(res_w)
        self._fd = os.open(plain_file, os.O_RDONLY) if plain_file is not None else None
        self._scratch = bytearray()
        self.proc = ctx.Process(target=_helper_main, name="tracekit-decode", daemon=True,
                                args=(self, res_w, os.getpid()))
        try:
            self.proc.start()
        finally:
            os.close(res_w)
        self.published = 0
        self.helper_pieces = 0  # pieces the helper decoded (for tests and benchmarks)
        self.done: dict[int, Any] = {}  # piece index -> its exported columns (decoded here or by the helper)
        self._error: str | None = None
        self._fatal: BaseException | None = None  # a MemoryError of the collector thread, raised by the waiter
        self._gone = False
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._collect, daemon=True, name="tracekit-collect")
        self._thread.start()

    # ---- this process ------------------------------------------------------------------------

    def can_take(self, k: int) -> bool:
        """Whether the piece buf[1:k+1] can go into the ring (a piece too big for a slot is decoded here)."""
        return k + 2 <= self.slot_bytes

    def submit_range(self, offset: int, length: int) -> None:
        """Publish the plain file's bytes [offset, offset + length) as the next piece."""
        self._free_entry()
        self._publish((offset, length))

    def submit(self, buf: bytearray, k: int) -> None:
        """Publish buf[1:k+1] (whole events of decompressed text) as the next piece, copied into its slot."""
        at = self._free_entry() * self.slot_bytes
        buf[0] = 91  # '[' over the byte before the first '{'
        buf[k + 1] = 93  # ']' over the ',' after the last complete event
        self.shm[at : at + k + 2] = memoryview(buf)[: k + 2]
        self._publish((at, k + 2))

    def _free_entry(self) -> int:
        """The ring entry of the next piece, once free: decodes waiting pieces here while the ring is full."""
        i = self.published
        done = self.done
        while i >= _RING and (i - _RING) not in done:  # the entry still holds piece i - _RING
            if not self._take_one():
                self._wait_until(lambda: (i - _RING) in done)
        return i % _RING

    def _publish(self, desc: tuple[int, int]) -> None:
        i = self.published
        entry = i % _RING
        self.ctl[_DESC + 2 * entry : _DESC + 2 * entry + 2] = desc
        self.published = i + 1
        self.ctl[_PUBLISHED] = i + 1
        self.waiting.release()

    def results(self) -> list:
        """Every piece's columns in order: decodes what the helper has not started, waits for the rest."""
        while self._take_one():
            pass
        self._wait_until(lambda: len(self.done) >= self.published)
        self.stop()
        if self._fatal is not None:
            raise MemoryError from None
        if self._error is not None:
            raise NotStreamable(self._error)
        return [self.done.pop(i) for i in range(self.published)]

    def _take_one(self) -> bool:
        if not self.waiting.acquire(False):
            return False
        j = self._claim()
        if j < 0:
            return False
        a, length = (int(x) for x in self.ctl[_DESC + 2 * (j % _RING) : _DESC + 2 * (j % _RING) + 2])
        if self._fd is not None and len(self._scratch) < length + 2:
            self._scratch = bytearray(length + 2 + (length >> 3))  # reused: fresh pages cost a fault each
        self.done[j] = _decode_text_at(a, length, self.shm, self._fd, self._scratch)
        return True

    def _claim(self) -> int:
        if not self.lock.acquire(timeout=30):  # only a helper killed inside its few locked lines holds it
            raise NotStreamable("the decode helper process holds its lock")
        try:
            j = int(self.ctl[_TAKEN])
            if j >= self.ctl[_PUBLISHED]:
                return -1
            self.ctl[_TAKEN] = j + 1
            return j
        finally:
            self.lock.release()

    def _wait_until(self, ready) -> None:
        """Wait for the helper's results until ``ready()``; checked under the collector's lock, so a result
        that lands between the caller's own check and this wait is not missed."""
        with self._cond:
            while not ready():
                if self._fatal is not None:
                    raise MemoryError from None
                if self._error is not None:
                    raise NotStreamable(self._error)
                if self._gone or not self.proc.is_alive():
                    if ready():
                        break
                    raise NotStreamable(f"the decode helper process ended early (exit code {self.proc.exitcode})")
                self._cond.wait(1.0)
        if self._fatal is not None:
            raise MemoryError from None
        if self._error is not None:
            raise NotStreamable(self._error)

    def _collect(self) -> None:
        _quiet_dealloc(True)
        try:
            self._collect_results()
        except BaseException as exc:  # noqa: BLE001 - out of memory, say: the waiting thread raises it, never a traceback here
            with self._cond:
                self._fatal = exc if isinstance(exc, MemoryError) else None
                self._error = self._error or f"the results of the decode helper process were lost ({type(exc).__name__})"
                self._gone = True
                self._cond.notify_all()
        finally:
            _quiet_dealloc(False)

    def _collect_results(self) -> None:
        fd = self._res_r
        while True:
            head = _read_exact(fd, _REPLY.size)
            payload = None
            if head is not None:
                j, status, length = _REPLY.unpack(head)
                payload = _read_exact(fd, length) if length and status != _OK_IN_SLOT else bytearray()
            with self._cond:
                if payload is None:
                    self._gone = True
                    self._cond.notify_all()
                    return
                if status != _FAILED:
                    self.helper_pieces += 1
                if status == _OK_IN_SLOT:
                    at = (j % _RING) * self.slot_bytes
                    with memoryview(self.shm) as view, view[at : at + length] as data:
                        self.done[j] = pickle.loads(data)
                elif status == _OK:
                    self.done[j] = pickle.loads(payload)
                else:
                    self._error = bytes(payload).decode("utf-8", "replace")
                    if self._error.startswith("MemoryError"):  # the whole-document reader would need more
                        self._fatal = MemoryError()
                self._cond.notify_all()
            del payload

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.ctl[_STOP] = 1
        self.waiting.release()  # wakes the helper if it waits for a piece
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self._thread.join(timeout=5)
        for fd in (self._res_r, self._fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        del self.ctl
        for m in (self.shm, self.ctl_map):
            if m is not None:
                try:
                    m.close()
                except BufferError:  # a view is still alive somewhere: the mapping goes with it
                    pass

    # ---- the helper process ------------------------------------------------------------------

    def _next(self, parent: int) -> int:
        """The next piece for the helper to decode, or -1 to stop (asked to, or the parent is gone)."""
        while True:
            if self.waiting.acquire(timeout=1.0):
                if self.ctl[_STOP]:
                    return -1
                j = self._claim()
                if j >= 0:
                    return j
            elif os.getppid() != parent or self.ctl[_STOP]:
                return -1


_DEALLOC_NOISE = "deallocated bytearray object has exported buffers"
_quiet = {"depth": 0, "previous": None}


def _quiet_dealloc(on: bool) -> None:
    """While results are unpickled, drop the one line CPython prints (through ``sys.excepthook``, not as an
    exception) when an unpickle runs out of memory: numpy's error path leaves a buffer export on a bytearray
    it frees, which prints "SystemError: deallocated bytearray object has exported buffers". The MemoryError
    itself reaches the caller; only that line is dropped, every other hook call passes through."""
    import sys

    if on:
        _quiet["depth"] += 1
        if _quiet["depth"] == 1:
            previous = _quiet["previous"] = sys.excepthook

            def hook(kind, value, tb):
                if not (kind is SystemError and str(value) == _DEALLOC_NOISE):
                    previous(kind, value, tb)

            sys.excepthook = hook
    else:
        _quiet["depth"] -= 1
        if _quiet["depth"] == 0 and _quiet["previous"] is not None:
            if getattr(sys.excepthook, "__qualname__", "") == "_quiet_dealloc.<locals>.hook":
                sys.excepthook = _quiet["previous"]
            _quiet["previous"] = None


def _cut_plain_file(helper: _Helper, sep: bytes, pos: int, slots: list, on_position=None) -> bytes:
    """Publish the pieces of a plain file from ``pos`` (the offset of the byte before the next event), each
    about one reader block, cut at the last event separator before the block's end; return the text after
    the last separator of the file (the last event and the document's end), as the streaming loop would."""
    from . import reader

    fd = helper._fd
    size = os.fstat(fd).st_size
    block = reader.READ_BLOCK
    while True:
        k = _rfind_in_file(fd, sep, pos + 1, min(pos + block, size)) if pos + block < size else -1
        if k < 0:  # a block without a separator (one huge event), or the end of the file is near
            k = _find_in_file(fd, sep, pos + block, size) if pos + block < size else -1
            if k < 0:
                k = _rfind_in_file(fd, sep, pos + 1, size)
                if k < 0:
                    break
                slots.append(None)
                helper.submit_range(pos + 1, k - pos)
                pos = k + len(sep) - 2
                break
        slots.append(None)
        helper.submit_range(pos + 1, k - pos)  # the text from after buf[0] through the '}' of the separator
        pos = k + len(sep) - 2  # the byte before the next '{'
        if on_position is not None:
            on_position(pos)
    if on_position is not None:
        on_position(size)
    return os.pread(fd, size - pos - 1, pos + 1)


_PROBE = 1 << 16


def _rfind_in_file(fd: int, sep: bytes, lo: int, hi: int) -> int:
    """Offset of the last ``sep`` that lies wholly in [lo, hi) of the file, or -1 (reads backwards)."""
    end = hi
    while end - lo >= len(sep):
        start = max(lo, end - _PROBE)
        k = os.pread(fd, end - start, start).rfind(sep)
        if k >= 0:
            return start + k
        if start == lo:
            return -1
        end = start + len(sep) - 1  # a separator across the window's start is found in the next window
    return -1


def _find_in_file(fd: int, sep: bytes, lo: int, hi: int) -> int:
    """Offset of the first ``sep`` that starts at or after ``lo`` and ends by ``hi``, or -1."""
    start = lo
    while hi - start >= len(sep):
        end = min(hi, start + _PROBE)
        k = os.pread(fd, end - start, start).find(sep)
        if k >= 0:
            return start + k
        if end == hi:
            return -1
        start = end - len(sep) + 1
    return -1


def _decode_text_at(a: int, length: int, shm, fd: int | None, scratch: bytearray | None = None) -> dict[str, Any]:
    """Decode one ring piece: (offset, length) of the plain file, or (slot start, length) in ``shm``."""
    if fd is not None:
        buf = scratch if scratch is not None and len(scratch) >= length + 2 else bytearray(length + 2)
        view = memoryview(buf)
        try:
            _pread_into(fd, view[1 : 1 + length], a)
            buf[0] = 91
            buf[length + 1] = 93
            with view[: length + 2] as text:
                return _decode_text(text)
        finally:
            view.release()
    with memoryview(shm) as view, view[a : a + length] as text:
        return _decode_text(text)


def _pread_into(fd: int, view: memoryview, offset: int) -> None:
    """Fill ``view`` with the file's bytes from ``offset`` (``preadv`` reads straight into it)."""
    got, n = 0, len(view)
    while got < n:
        if hasattr(os, "preadv"):
            r = os.preadv(fd, [view[got:]], offset + got)
        else:  # pragma: no cover - platforms without preadv
            data = os.pread(fd, n - got, offset + got)
            view[got : got + len(data)] = data
            r = len(data)
        if r == 0:
            raise NotStreamable(f"the file ends before byte {offset + n}")
        got += r


def _helper_main(helper: _Helper, res_w: int, parent: int) -> None:
    """The helper process: decode pieces until told to stop. Whatever goes wrong here (no memory for a piece
    under ``ulimit -v``, an interrupt) ends the process quietly, never with a traceback: the parent sees it gone
    and decodes, or reports, itself."""
    try:
        _helper_loop(helper, res_w, parent)
    except BaseException:  # noqa: BLE001
        os._exit(1)


def _helper_loop(helper: _Helper, res_w: int, parent: int) -> None:
    os.close(helper._res_r)  # so that the pipe reports end-of-file to the parent when this process goes
    fd = os.open(helper.plain_file, os.O_RDONLY) if helper.plain_file is not None else None
    scratch = bytearray(helper.slot_bytes if fd is not None else 0)
    try:
        while True:
            j = helper._next(parent)
            if j < 0:
                break
            e = _DESC + 2 * (j % _RING)
            a, length = int(helper.ctl[e]), int(helper.ctl[e + 1])
            payload = None
            try:
                if fd is not None and len(scratch) < length + 2:
                    scratch = bytearray(length + 2 + (length >> 3))
                columns = _decode_text_at(a, length, helper.shm if fd is None else None, fd, scratch)
                # pickled straight into the piece's slot (its text is no longer needed there); a result too
                # big for the slot goes through the pipe
                slot = _SlotFile(helper.shm, (j % _RING) * helper.slot_bytes, helper.slot_bytes)
                try:
                    pickle.Pickler(slot, protocol=pickle.HIGHEST_PROTOCOL).dump(columns)
                    status, size = _OK_IN_SLOT, slot.pos - slot.start
                except _SlotFull:
                    payload = pickle.dumps(columns, protocol=pickle.HIGHEST_PROTOCOL)
                    status, size = _OK, len(payload)
                del columns
            except Exception as exc:  # reported to the parent, which falls back to the safe path
                payload = f"{type(exc).__name__}: {exc}".encode()
                status, size = _FAILED, len(payload)
            _write_all(res_w, _REPLY.pack(j, status, size))
            if payload is not None:
                _write_all(res_w, payload)
            del payload
    except OSError:
        pass  # the parent closed its end: nothing left to report to
    finally:
        os.close(res_w)
        if fd is not None:
            os.close(fd)


class _SlotFull(Exception):
    pass


class _SlotFile:
    """A write-only file over ``size`` bytes of a shared mapping from ``start`` (for ``pickle.Pickler``)."""

    def __init__(self, mapping, start: int, size: int) -> None:
        self.mapping, self.start, self.end, self.pos = mapping, start, start + size, start

    def write(self, data) -> int:
        with memoryview(data) as view:
            n = view.nbytes
            if self.pos + n > self.end:
                raise _SlotFull
            self.mapping[self.pos : self.pos + n] = view.cast("B") if view.ndim != 1 or view.format != "B" else view
        self.pos += n
        return n


def _grow_pipe(fd: int) -> None:
    """Make the pipe hold 1 MiB (Linux; elsewhere the default), so replies move in few system calls."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


def _read_exact(fd: int, n: int) -> bytearray | None:
    """Read exactly ``n`` bytes from ``fd`` into one buffer; ``None`` at end of file."""
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    try:
        while got < n:
            r = os.readv(fd, [view[got:]])
            if r == 0:
                return None
            got += r
    finally:
        view.release()
    return out


def _write_all(fd: int, data) -> None:
    view = memoryview(data).cast("B")
    try:
        while view:
            view = view[os.write(fd, view):]
    finally:
        view.release()


def _decode_piece(buf: bytearray, k: int) -> dict[str, Any]:
    """Decode buf[1:k+1] (whole events) in place: '[' and ']' are written over the bytes around it."""
    buf[k + 1] = 93  # ']' over the ',' after the last complete event
    buf[0] = 91  # '[' over the byte before the first '{'
    view = memoryview(buf)[: k + 2]
    try:
        return _decode_text(view)
    finally:
        view.release()


# --------------------------------------------------------------------------- tolerant decode


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
            kind=raw_args.get("kind") if isinstance(raw_args.get("kind"), str) else None,
            name=raw_args.get("name") if isinstance(raw_args.get("name"), str) else None,
            **{k: msgspec.Raw(_LOOSE_ENCODER.encode(raw_args[key])) for k, key in
               (("dims", "Input Dims"), ("types", "Input type"), ("concrete", "Concrete Inputs")) if key in raw_args},
        )

    def text(key: str) -> str:
        v = obj.get(key, "")
        return v if isinstance(v, str) else ("" if v is None else str(v))

    def lane(key: str) -> int | str:
        v = obj.get(key, -1)
        return v if isinstance(v, (int, str)) and not isinstance(v, bool) else -1

    return Event(ph=text("ph"), cat=text("cat"), name=text("name"), pid=lane("pid"), tid=lane("tid"),
                 ts=ts_raw, dur=dur_f, args=args)
