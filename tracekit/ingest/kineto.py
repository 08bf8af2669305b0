"""Kineto / Chrome-trace JSON → raw columns.

Two ways in, one way out:

* **Streaming** (the fast path): the decompressed text arrives in blocks; pieces of whole events
  are cut at the separator between top-level events (``},`` + newline + indentation + ``{`` —
  JSON strings cannot hold a raw newline, so the pattern never occurs inside a value) and each
  piece is decoded in place. Only one block of text is held at a time.
* **Whole document** (the fallback, and for salvage): the full text is split into raw event
  slices, which are decoded in chunks.

Either way each chunk is decoded by msgspec into a fixed schema that holds only the fields
tracekit uses, then turned into numpy columns at once (strings are factorised per chunk into
codes of a global dictionary, so no per-event string survives the chunk).

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
from .numbers import raw_to_ns

CHUNK_EVENTS = 65536
_EMPTY = msgspec.Raw(b"")
_NAN = float("nan")
IntOrStr = Union[int, str]


class Args(msgspec.Struct, gc=False, rename={
    "external_id": "External id",
    "registers": "registers per thread",
    "shared_mem": "shared memory",
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
    """Columns of the kept events, in file order (``row`` = index in ``traceEvents``)."""

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
    meta: list  # (record name, pid, tid, args.name) of each "M" record
    reasons: dict[str, int]  # records not kept, by reason
    header: dict[str, Any] = field(default_factory=dict)
    loose_chunks: int = 0
    int_overflows: int = 0
    utf8_repairs: int = 0  # records whose invalid UTF-8 bytes were replaced by U+FFFD


def _int32s(values: list) -> np.ndarray:
    return np.fromiter(values, dtype=np.int32, count=len(values))


class _Dictionary:
    """A growing string dictionary: chunk strings → global int32 codes (first-seen order)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def encode(self, strings: list) -> np.ndarray:
        get = self.index.get
        return self.complete(_int32s([get(s, -1) for s in strings]), strings.__getitem__)

    def complete(self, codes: np.ndarray, value_at) -> np.ndarray:
        """Fill in the ``-1`` codes (strings not yet in the dictionary); ``value_at(i)`` is string ``i``."""
        if codes.size and codes.min() < 0:
            index, values = self.index, self.values
            for i in np.flatnonzero(codes < 0).tolist():
                s = value_at(i)
                code = index.get(s)
                if code is None:
                    code = index[s] = len(values)
                    values.append(s)
                codes[i] = code
        return codes


class ColumnBuilder:
    """Accumulates decoded chunks as numpy columns."""

    def __init__(self) -> None:
        self.parts: list[dict[str, np.ndarray]] = []
        self.n = 0
        self.ph = _Dictionary()
        self.cat = _Dictionary()
        self.name = _Dictionary()
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
        phs = [e.ph for e in events]
        if n and phs.count(phs[0]) == n:  # one phase only (a piece of cpu_ops, say): no lookup per event
            ph_codes = np.full(n, self.ph.encode(phs[:1])[0], dtype=np.int32)
        else:
            ph_codes = self.ph.encode(phs)
        del phs
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
        cat_get = self.cat.index.get
        part["cat"] = self.cat.complete(_int32s([cat_get(e.cat, -1) for e in events]), lambda i: events[i].cat)
        name_get = self.name.index.get
        part["name"] = self.name.complete(_int32s([name_get(e.name, -1) for e in events]), lambda i: events[i].name)
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
        part = {k: np.concatenate([p[k] for p in self.parts]) for k in keys}
        return {"part": part, "n": self.n, "cat": self.cat.values, "name": self.name.values,
                "kind_arg": self.kind_arg, "meta": self.meta, "reasons": self.reasons,
                "loose": self.loose_chunks, "overflows": self.int_overflows, "utf8": self.utf8_repairs}

    def absorb(self, exported: dict[str, Any]) -> None:
        """Append an exported builder's rows, re-coding its strings into this builder's dictionaries."""
        part = exported["part"]
        lo = self.n
        if part and len(part["row"]):
            for key, dictionary in (("cat", self.cat), ("name", self.name)):
                table = dictionary.encode(exported[key])
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
        def cat(key: str, empty_shape: tuple = (0,), dtype=np.int64) -> np.ndarray:
            arrays = [p.pop(key) for p in self.parts]
            return np.concatenate(arrays) if arrays else np.empty(empty_shape, dtype=dtype)

        cols = RawColumns(
            n=self.n, row=cat("row"),
            cat=cat("cat", dtype=np.int32), cat_uniques=self.cat.values,
            name=cat("name", dtype=np.int32), name_uniques=self.name.values,
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
    if text[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark (Windows editors write one)
        text = memoryview(text)[3:]
    if head.startswith(b"["):
        return _ARRAY_DECODER.decode(text), {}
    if not head.startswith(b"{"):
        if head.startswith((b"\x1f\x8b", b"\x28\xb5\x2f\xfd")):
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
    return head[3:].lstrip() if head.startswith(b"\xef\xbb\xbf") else head


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

_SEP_RE = re.compile(rb"\},(\r?\n[ \t]*)\{")
_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_MAX_HEAD = 64 << 20


class NotStreamable(Exception):
    """The layout is not one the streaming path handles; use the whole-document path."""


def decode_stream(blocks: Iterable[bytes], *, workers: int = 1, plain_file: str | None = None,
                  piece_bytes: int | None = None) -> RawColumns:
    """Decode a trace from text blocks; raise NotStreamable when the layout does not allow it.

    With ``workers`` > 1 a forked helper process decodes pieces whenever it has fewer than
    :attr:`_Helper.depth` waiting, while this process decodes the rest; the pieces are reassembled in
    file order. ``plain_file`` (an uncompressed source, whose bytes are the text) lets the helper read its
    pieces from the file; otherwise (decompressed text) they are handed over through a ring of shared
    memory slots of ``piece_bytes`` (default: 1.25 blocks of the reader) each.
    """
    helper = _Helper(plain_file, piece_bytes) if workers > 1 else None
    try:
        return _decode_stream(blocks, helper)
    finally:
        if helper is not None:
            helper.stop()


def _decode_stream(blocks: Iterable[bytes], helper: "_Helper | None") -> RawColumns:
    slots: list = []  # per piece in file order: an exported builder, or None for the helper's next result
    buf = bytearray()
    it = iter(blocks)
    head_end = -1
    array_form = False
    total_in = 0
    for block in it:
        buf += block
        total_in += len(block)
        start = _head(buf)
        if start and start[:1] not in (b"{", b"["):
            raise NotStreamable("not JSON")
        if start.startswith(b"["):
            array_form = True
            head_end = buf.index(b"[") + 1
            break
        m = _KEY_RE.search(buf)
        if m:
            head_end = m.end()
            break
        if len(buf) > _MAX_HEAD:
            raise NotStreamable("no traceEvents near the start")
    if head_end < 0:
        raise NotStreamable("no traceEvents")
    header_text = b"" if array_form else bytes(buf[: _KEY_RE.search(buf).start()]).lstrip()
    if header_text[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark
        header_text = header_text[3:]
    del buf[: head_end - 1]  # keep the '[': every piece starts with one byte before its first event
    sep: bytes | None = None
    for block in _chain_first(buf, it):
        if block is not buf:
            buf += block
            total_in += len(block)
        if sep is None:
            m = _SEP_RE.search(buf)
            if m is None:
                if len(buf) > _MAX_HEAD:
                    raise NotStreamable("no newline-separated events")
                continue
            sep = m.group(0)
        k = buf.rfind(sep)
        if k < 0:
            continue
        if helper is not None and helper.can_take(k):
            slots.append(None)
            helper.submit(buf, k, total_in - len(buf))
        else:
            slots.append(_decode_piece(buf, k))
        cut = k + len(sep) - 2  # keep the byte before the next '{': it becomes the next '['
        try:
            del buf[:cut]
        except BufferError:  # something (a profiler, a debugger) still holds a view: copy instead
            buf = bytearray(buf[cut:])
    tail = bytes(buf[1:])  # buf[0] is the byte before the next event ("[" or whitespace)
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


def _decode_text(text) -> dict[str, Any]:
    b = ColumnBuilder()
    try:
        b.add_text(text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise NotStreamable(str(exc)) from exc
    return b.export()


_MSG = struct.Struct("<qq")  # a request (offset or slot, length) or a reply header (status, payload length)
_OK, _FAILED, _DONE = 0, 1, 2
_SLOTS = 2  # shared-memory slots: the helper decodes one while this process fills the other


class _Helper:
    """A forked process that decodes pieces and returns their columns, in the order they were handed over.

    Pieces of an uncompressed file are named by (offset, length) and read by the helper itself; pieces of
    decompressed text are copied into a ring of shared memory slots (an anonymous shared mapping made
    before the fork), so no text goes through a pipe. The columns come back pickled over a plain pipe,
    read into one preallocated buffer per piece by a collector thread."""

    def __init__(self, plain_file: str | None = None, piece_bytes: int | None = None) -> None:
        import multiprocessing as mp
        import threading

        from . import reader

        ctx = mp.get_context("fork")
        self.plain_file = plain_file
        self.slot_bytes = piece_bytes or (reader.READ_BLOCK + reader.READ_BLOCK // 4 + 2)
        self.shm = None if plain_file is not None else mmap.mmap(-1, _SLOTS * self.slot_bytes)
        # how many pieces may wait for the helper: offsets cost nothing to queue; text needs a free slot
        self.depth = 4 if plain_file is not None else _SLOTS
        req_r, self._req_w = os.pipe()
        self._res_r, res_w = os.pipe()
        for fd in (self._req_w, res_w):
            _grow_pipe(fd)
        self.proc = ctx.Process(target=_helper_main, name="tracekit-decode", daemon=True,
                                args=(req_r, res_w, (self._req_w, self._res_r), plain_file, self.shm,
                                      self.slot_bytes))
        try:
            self.proc.start()
        finally:
            os.close(req_r)
            os.close(res_w)
        self._results: list = []
        self._received = 0
        self._error: str | None = None
        self._sent = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._collect, daemon=True, name="tracekit-collect")
        self._thread.start()

    def pending(self) -> int:
        return self._sent - self._received

    def can_take(self, k: int) -> bool:
        """Whether the piece buf[1:k+1] can be handed over now."""
        return self.pending() < self.depth and (self.shm is None or k + 2 <= self.slot_bytes)

    def submit(self, buf: bytearray, k: int, offset: int) -> None:
        """Hand over buf[1:k+1]; ``offset`` is the position of buf[0] in the text."""
        if self.shm is None:
            msg = _MSG.pack(offset + 1, k)
        else:
            at = (self._sent % _SLOTS) * self.slot_bytes  # free: at most _SLOTS - 1 others are pending
            buf[0] = 91  # '[' over the byte before the first '{'
            buf[k + 1] = 93  # ']' over the ',' after the last complete event
            self.shm[at : at + k + 2] = memoryview(buf)[: k + 2]
            msg = _MSG.pack(at, k + 2)
        os.write(self._req_w, msg)
        self._sent += 1

    def _collect(self) -> None:
        fd = self._res_r
        while True:
            head = _read_exact(fd, _MSG.size)
            if head is None:
                return  # the helper is gone: results() sees the shortfall
            status, length = _MSG.unpack(head)
            if status == _DONE:
                return
            payload = _read_exact(fd, length) if length else bytearray()
            if payload is None:
                return
            if status == _OK:
                self._results.append(pickle.loads(payload))
            else:
                self._error = bytes(payload).decode("utf-8", "replace")
            del payload
            self._received += 1

    def results(self) -> list:
        self._finish()
        if self._error is not None:
            raise NotStreamable(self._error)
        if len(self._results) != self._sent:
            raise NotStreamable(f"the decode helper process ended early (exit code {self.proc.exitcode})")
        return self._results

    def _finish(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            os.write(self._req_w, _MSG.pack(-1, 0))
        except OSError:
            pass
        self._thread.join()

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            try:
                os.write(self._req_w, _MSG.pack(-1, 0))
            except OSError:
                pass
            self._thread.join(timeout=5)
        for fd in (self._req_w, self._res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        if self.shm is not None:
            try:
                self.shm.close()
            except BufferError:  # a view is still alive somewhere: the mapping goes with it
                pass
        self._results = []


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


def _helper_main(req_r: int, res_w: int, parent_ends: tuple, plain_file: str | None, shm, slot_bytes: int) -> None:
    for fd in parent_ends:  # so that each pipe reports end-of-file when the other side goes
        os.close(fd)
    fd = os.open(plain_file, os.O_RDONLY) if plain_file is not None else None
    scratch = bytearray()
    try:
        while True:
            msg = _read_exact(req_r, _MSG.size)
            if msg is None:
                break  # the parent is gone
            at, length = _MSG.unpack(msg)
            if at < 0:
                break
            view = None
            try:
                if fd is not None:  # (file offset, length) of a piece of the plain file
                    if len(scratch) < length + 2:
                        scratch = bytearray(length + 2 + (length >> 3))
                    view = memoryview(scratch)
                    got = 0
                    while got < length:
                        r = os.preadv(fd, [view[1 + got : 1 + length]], at + got)
                        if r == 0:
                            raise OSError(f"the file ends before byte {at + length}")
                        got += r
                    scratch[0] = 91
                    scratch[length + 1] = 93
                    text = view[: length + 2]
                else:  # (slot offset, length) of a piece in shared memory, brackets included
                    view = memoryview(shm)
                    text = view[at : at + length]
                try:
                    payload = pickle.dumps(_decode_text(text), protocol=pickle.HIGHEST_PROTOCOL)
                finally:
                    text.release()
                status = _OK
            except Exception as exc:  # reported to the parent, which falls back to the safe path
                payload = f"{type(exc).__name__}: {exc}".encode()
                status = _FAILED
            finally:
                if view is not None:
                    view.release()
            _write_all(res_w, _MSG.pack(status, len(payload)))
            _write_all(res_w, payload)
            del payload
        _write_all(res_w, _MSG.pack(_DONE, 0))
    except OSError:
        pass  # the parent closed its end: nothing left to report to
    finally:
        os.close(req_r)
        os.close(res_w)
        if fd is not None:
            os.close(fd)


def _chain_first(first: bytearray, rest: Iterable[bytes]):
    yield first
    yield from rest


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
        )

    def text(key: str) -> str:
        v = obj.get(key, "")
        return v if isinstance(v, str) else ("" if v is None else str(v))

    def lane(key: str) -> int | str:
        v = obj.get(key, -1)
        return v if isinstance(v, (int, str)) and not isinstance(v, bool) else -1

    return Event(ph=text("ph"), cat=text("cat"), name=text("name"), pid=lane("pid"), tid=lane("tid"),
                 ts=ts_raw, dur=dur_f, args=args)
