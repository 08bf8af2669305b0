"""Decoded events → numpy columns: the kept events of a chunk as arrays, and why each other record was dropped.

:class:`ColumnBuilder` turns a chunk of decoded :class:`~.schema.Event` structs into numpy columns at once,
one C-level pass per field and never a Python statement per event (strings are factorised per chunk into
codes of a global dictionary, so no per-event string survives the chunk); builders made in another process
are merged by :meth:`ColumnBuilder.export` / :meth:`ColumnBuilder.absorb`. ``dur`` is a duration of at most
hours, which a float64 holds to far better than a nanosecond, so it is decoded as a float and rounded.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from ..numbers import raw_to_ns
from .schema import EVENTS_DECODER, INT_ARGS, LOOSE_DECODER, Event, loose_event

_NUL = b"\0"

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
_PHASE_REASON = {
    "M": 1,
    "s": 2,
    "f": 3,
    "t": 4,
    "C": 5,
    "X": 0,
    "i": 0,
    "I": 0,
    "B": 7,
    "E": 7,
    "b": 7,
    "e": 7,
    "n": 7,
    "<undecodable>": 13,
}
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
            events = EVENTS_DECODER.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError):
            events = [loose_event(obj) for obj in LOOSE_DECODER.decode(text)]
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
                    return EVENTS_DECODER.decode(b"[" + raw + b"]")[0]
                except msgspec.ValidationError:
                    return loose_event(LOOSE_DECODER.decode(raw))
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
            ("graph_id", [a.graph_id for a in args]),
            ("graph_node_id", [a.graph_node_id for a in args]),
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
            from ...data import load_classes

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
                arr = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=3 * len(lists)).reshape(
                    -1, 3
                )
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
        return {
            "part": part,
            "n": self.n,
            "cat": self.cat.values,
            "name": self.name.values,
            "shapes": self.shapes.values,
            "kind_arg": self.kind_arg,
            "meta": self.meta,
            "reasons": self.reasons,
            "loose": self.loose_chunks,
            "overflows": self.int_overflows,
            "utf8": self.utf8_repairs,
        }

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
            n=self.n,
            row=cat("row"),
            cat=cat("cat", dtype=np.int32),
            cat_uniques=self.cat.values,
            name=cat("name", dtype=np.int32),
            name_uniques=self.name.values,
            shapes=cat("shapes", dtype=np.int32),
            shapes_uniques=self.shapes.values,
            pid=cat("pid"),
            tid=cat("tid"),
            ts_ns=cat("ts_ns"),
            dur_ns=cat("dur_ns"),
            instant=cat("instant", dtype=bool),
            ints={k: cat(k) for k in INT_ARGS},
            grid=cat("grid", (0, 3), np.int32),
            block=cat("block", (0, 3), np.int32),
            kind_arg=self.kind_arg,
            meta=self.meta,
            reasons={r: int(c) for r, c in zip(REASONS, self.reasons.tolist()) if r and c},
            header=header,
            loose_chunks=self.loose_chunks,
            int_overflows=self.int_overflows,
            utf8_repairs=self.utf8_repairs,
        )
        self.parts.clear()
        return cols
