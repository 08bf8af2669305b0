"""Issue 11, trace side: a catalogue of broken inputs, each run through ``tracekit.load`` and ``tracekit info``.

Every input ends in one of the two documented ways (docs/reliability.md has the table):

* **salvage / load**: exit 0; every loss is a warning on stderr and in the JSON ``warnings``; the counts add up
  (records read = kept + not events + dropped by reason) and ``info`` reports them;
* **refusal**: exit 3 (bad input) or 4 (missing data); one line on stderr that names the file; nothing on
  stdout; no traceback.

Truncation is driven hard: the bundled sample and a hand-built trace full of awkward strings are cut at every
tenth, inside strings and numbers, at every byte (hand-built), and as cut gzip / zstd streams. Whatever survives
must be exactly the full trace's events among the records read (a prefix), flagged as salvaged.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pandas as pd
import pytest
import zstandard

import tracekit
from tracekit.cli import bundled_sample
from tracekit.errors import TracekitError
from tests.conftest import kernel, memcpy, write_trace

SAMPLE_TEXT = gzip.decompress(bundled_sample().read_bytes())
BASE_NS = 1764000000000000000  # the sample's baseTimeNanoseconds

NO_TS = "event without a usable 'ts'"
NO_DUR = "complete event without 'dur'"
NONFINITE = "complete event with a non-finite 'dur'"
NEGATIVE = "complete event with a negative 'dur'"
OUT_OF_RANGE = "event whose 'dur' or end lies beyond the int64 nanosecond range"
BAD_PHASE = "record with an unsupported or missing phase 'ph'"
UNPAIRED = "begin/end or async record (ph B/E/b/e/n) not paired by tracekit"


# --------------------------------------------------------------------------- checks shared by every case


def rows(events: pd.DataFrame) -> pd.DataFrame:
    """The events as plain objects (categorical dtypes differ between a full and a salvaged table)."""
    return events.astype(object).reset_index(drop=True)


def load_ok(path: Path) -> tracekit.Trace:
    t = tracekit.load(path, cache=False)
    r = t.report
    assert r.records_read == r.events_kept + sum(r.not_events.values()) + sum(r.dropped.values())
    assert r.events_kept == len(t.events) > 0
    assert (t.events["end_ns"] == t.events["start_ns"] + t.events["dur_ns"]).all()
    assert (t.events["dur_ns"] >= 0).all()
    assert t.events["start_ns"].is_monotonic_increasing
    assert all(str(path) in w for w in r.warnings), r.warnings
    return t


def info_ok(cli, path: Path, trace: tracekit.Trace) -> dict:
    """`tracekit info PATH --format json`: exit 0, the same counts as the API, warnings on stderr and in the JSON."""
    code, out, err = cli("info", path, "--format", "json")
    assert code == 0, err
    assert "Traceback" not in err
    doc = json.loads(out)
    s, r = doc["summary"], trace.report
    assert s["records_read"] == r.records_read
    assert s["events_total"] == r.events_kept == len(trace.events)
    assert s["events_dropped"] == sum(r.dropped.values())
    assert s["salvaged"] is r.salvaged and s["bytes_lost"] == r.bytes_lost
    ingest = {row["what"]: row["count"] for row in doc["tables"]["ingest"]}
    assert ingest["records read"] == r.records_read and ingest["events kept"] == r.events_kept
    assert {k[len("dropped: ") :]: v for k, v in ingest.items() if k.startswith("dropped: ")} == r.dropped
    lines = err.splitlines()
    assert all(line.startswith("warning: ") for line in lines), err
    assert [line[len("warning: ") :] for line in lines] == doc["warnings"]
    assert all(w in doc["warnings"] for w in r.warnings)
    return doc


def refused(cli, path: Path, code: int, needle: str) -> str:
    """Both the API and the CLI refuse ``path`` with one sentence that names it and the expected exit code."""
    with pytest.raises(TracekitError) as exc:
        tracekit.load(path, cache=False)
    msg = str(exc.value)
    assert exc.value.exit_code == code, msg
    assert needle in msg and str(path) in msg, msg
    assert "\n" not in msg
    got, out, err = cli("info", path, "--format", "json")
    assert got == code, err
    assert out == "" and "Traceback" not in err
    assert err.splitlines() == [f"error: {msg}"]
    return msg


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def doc_bytes(events: list, indent: Optional[int] = 1, **top) -> bytes:
    return json.dumps({"schemaVersion": 1, **top, "traceEvents": events}, indent=indent).encode()


def flip(data: bytes, pos: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= 0xFF
    return bytes(b)


def kernels(n: int, prefix: str = "k") -> list:
    return [kernel(f"{prefix}{i}", float(10 * i), 5.0, corr=i) for i in range(n)]


# Many kernels compress to a few KB: big enough for several zstd blocks and a mid-stream bit flip.
BIG_EVENTS = kernels(2000)
BIG_TEXT = doc_bytes(BIG_EVENTS, baseTimeNanoseconds=BASE_NS)


@functools.lru_cache(maxsize=None)
def big_reference() -> pd.DataFrame:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return tracekit.load(write(Path(d) / "big.json", BIG_TEXT), cache=False).events


def expect_prefix(trace: tracekit.Trace, full: pd.DataFrame) -> None:
    """Kept events are exactly the full trace's events among the records read (file order)."""
    expected = full[full["event_id"] < trace.report.records_read]
    pd.testing.assert_frame_equal(rows(trace.events), rows(expected))


# --------------------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class Refuse:
    code: int
    needle: str


@dataclass(frozen=True)
class Load:
    check: Optional[Callable] = None  # (trace, info json) -> None


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path], Path]
    expect: object


def _dropped(expected: dict, kept: int, warns: tuple = ()) -> Callable:
    def check(t, doc):
        assert t.report.dropped == expected
        assert len(t.events) == kept
        assert any(f"dropped {sum(expected.values())} unusable" in w for w in t.report.warnings)
        for needle in warns:
            assert any(needle in w for w in t.report.warnings), (needle, t.report.warnings)

    return check


def _warns(*needles: str, salvaged: bool | None = None, kept: int | None = None, no_warnings: bool = False):
    def check(t, doc):
        for needle in needles:
            assert any(needle in w for w in t.report.warnings), (needle, t.report.warnings)
        if no_warnings:  # no warning of the load; info's own fact of these minimal documents (no deviceProperties:
            # the GPU is described nowhere) is about what the file records, not how it is written, and stays
            assert t.report.warnings == [] and [w for w in doc["warnings"] if "described nowhere" not in w] == []
        if salvaged is not None:
            assert t.report.salvaged is salvaged
        if kept is not None:
            assert len(t.events) == kept

    return check


def _all_big(*needles: str, salvaged: bool = False):
    """The whole 2000-kernel trace came through, identical to a clean load."""

    def check(t, doc):
        pd.testing.assert_frame_equal(rows(t.events), rows(big_reference()))
        _warns(*needles, salvaged=salvaged, no_warnings=not needles)(t, doc)

    return check


def _big_prefix(*needles: str):
    def check(t, doc):
        assert t.report.salvaged and 0 < len(t.events) < 2000
        expect_prefix(t, big_reference())
        _warns(*needles)(t, doc)

    return check


def _names(expected: list) -> Callable:
    def check(t, doc):
        assert sorted(t.events["name"].astype(str)) == sorted(expected)

    return check


def _both(*checks: Callable) -> Callable:
    def check(t, doc):
        for c in checks:
            c(t, doc)

    return check


def _nonfinite_literals(d: Path) -> Path:
    evs = [
        kernel("x: NaN, y: Infinity", 1.0, 1.0),
        kernel("nan", 2.0, float("nan")),
        kernel("inf", 3.0, float("inf")),
        kernel("-inf", 4.0, float("-inf")),
        kernel("ok", 5.0, 2.0),
    ]
    return write(d / "nan.json", doc_bytes(evs))  # json.dumps writes the bare NaN / Infinity JSON forbids


def _ints_beyond_int64(d: Path) -> Path:
    evs = [
        kernel("k", 1.0, 1.0, corr=2**64),
        kernel("k2", 2.0, 1.0) | {"pid": 2**64},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 3.0,
            "dur": 1.0,
            "args": {"External id": -(2**63) - 1, "Comms Id": 10159970886766084423},
        },
        kernel("ts-too-big", 10**20, 1.0),
    ]
    return write(d / "ints.json", doc_bytes(evs))


def _check_ints(t, doc):
    assert t.report.int_overflows == 3 and t.report.dropped == {NO_TS: 1}
    ev = t.events.set_index(t.events["name"].astype(str))
    assert ev.loc["k", "correlation"] == -1 and ev.loc["k2", "pid"] == -1 and ev.loc["aten::mm", "external_id"] == -1
    assert any("beyond the int64 range" in w for w in t.report.warnings)


def _ts_strings(d: Path) -> Path:
    evs = [
        kernel("a", "1.5", 1.0),
        kernel("b", "12.3456", 1.0),
        kernel("c", "1e3", 1.0),
        kernel("bad", "abc", 1.0),
        kernel("empty", "", 1.0),
        kernel("none", None, 1.0),
        kernel("epoch", "1712195495519689.047", 1.0),
    ]
    return write(d / "ts.json", doc_bytes(evs))


def _check_ts(t, doc):
    ev = t.events.set_index(t.events["name"].astype(str))
    assert ev["start_ns"].to_dict() == {"a": 1500, "b": 12346, "c": 1_000_000, "epoch": 1712195495519689047}
    assert t.report.dropped == {NO_TS: 3}


def _utf8_names(d: Path) -> Path:
    data = doc_bytes([kernel("AAAA", 1.0, 1.0), kernel("ok", 2.0, 1.0), kernel("BBBB", 3.0, 1.0)])
    return write(d / "utf8.json", data.replace(b"AAAA", b"A\xff\xfeA").replace(b"BBBB", b"\xc3\x28B"))


def _utf8_header(d: Path) -> Path:
    data = doc_bytes([kernel("ok", 2.0, 1.0)], traceName="NAME")
    return write(d / "utf8h.json", data.replace(b'"NAME"', b'"bad \xff name"'))


def _surrogates(d: Path) -> Path:
    return write(
        d / "sur.json",
        doc_bytes(
            [
                kernel("lone \ud800 high", 1.0, 1.0),
                kernel("pair \U0001f600", 2.0, 1.0),
                kernel("lone \udc00 low", 3.0, 1.0),
            ]
        ),
    )


def _odd_types(d: Path) -> Path:
    evs = [
        kernel("k", 1.0, 1.0) | {"name": 17},
        kernel("k", 2.0, 1.0) | {"args": "not an object"},
        kernel("k", 3.0, 1.0) | {"pid": 1.5, "cat": ["kernel"]},
        kernel("grid", 4.0, 1.0, grid=[1, 2], block=[2**40, 1, 1]),
        kernel("shm", 5.0, 1.0, **{"shared memory": "lots", "registers per thread": 3.5}),
        kernel("dur-int", 6.0, 1.0) | {"dur": 3},
    ]
    return write(d / "odd.json", doc_bytes(evs))


def _check_odd(t, doc):
    assert len(t.events) == 6 and t.report.dropped == {}
    ev = t.events.set_index(t.events["name"].astype(str))
    assert ev.loc["grid", "grid_x"] == -1 and ev.loc["grid", "block_x"] == -1
    assert ev.loc["shm", "shared_mem"] == -1 and ev.loc["dur-int", "dur_ns"] == 3000


def _dir_of(files: dict) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        root = d / "run"
        for name, data in files.items():
            write(root / name, data)
        return root

    return build


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


ONE = doc_bytes([kernel("k", 1.0, 1.0)])
BIG_GZ = _gz(BIG_TEXT)
BIG_ZST = _zst(BIG_TEXT)
_META_END = SAMPLE_TEXT.index(b'{"ph": "X"')  # the sample's four "M" records end here

CATALOGUE = [
    # ---- refused: exit 3, one sentence naming the file
    Case("zero-bytes", lambda d: write(d / "z.json", b""), Refuse(3, "is empty")),
    Case("zero-bytes-named-gz", lambda d: write(d / "z.json.gz", b""), Refuse(3, "is empty")),
    Case("whitespace-only", lambda d: write(d / "w.json", b" \n\t\r\n "), Refuse(3, "is empty")),
    Case("nul-bytes-only", lambda d: write(d / "n.json", b"\x00" * 4096), Refuse(3, "nothing but 4096 NUL bytes")),
    Case("gzip-of-nothing", lambda d: write(d / "e.json.gz", _gz(b"")), Refuse(3, "is empty after decompression")),
    Case("zstd-of-nothing", lambda d: write(d / "e.json.zst", _zst(b"")), Refuse(3, "is empty after decompression")),
    Case(
        "not-json-text",
        lambda d: write(d / "log.json", b"[2025-01-01 10:00:00] step 1 took 87 ms\n"),
        Refuse(3, "not valid JSON"),
    ),
    Case("not-json-words", lambda d: write(d / "t.json", b"profiler output follows\n"), Refuse(3, "is not JSON")),
    Case("binary-junk", lambda d: write(d / "b.json", bytes(range(256)) * 16), Refuse(3, "is not JSON")),
    Case(
        "binary-junk-after-brace",
        lambda d: write(d / "b.json", b"{" + bytes(range(256)) * 16),
        Refuse(3, "is not valid JSON"),
    ),
    Case("utf16-json", lambda d: write(d / "u.json", ONE.decode().encode("utf-16")), Refuse(3, "is not JSON")),
    Case("json-scalar", lambda d: write(d / "s.json", b"42"), Refuse(3, "is not JSON")),
    Case(
        "traceEvents-is-an-object",
        lambda d: write(d / "o.json", b'{"traceEvents": {"ph": "X"}}'),
        Refuse(3, "'traceEvents' is not a list"),
    ),
    Case(
        "traceEvents-is-a-string",
        lambda d: write(d / "o.json", b'{"traceEvents": "[]"}'),
        Refuse(3, "'traceEvents' is not a list"),
    ),
    Case("traceEvents-is-null", lambda d: write(d / "o.json", b'{"traceEvents": null}'), Refuse(3, "no 'traceEvents'")),
    Case(
        "no-traceEvents",
        lambda d: write(d / "o.json", b'{"schemaVersion": 1, "deviceProperties": []}'),
        Refuse(3, "no 'traceEvents'"),
    ),
    Case(
        "array-of-numbers", lambda d: write(d / "a.json", b"[1, 2, 3]"), Refuse(3, "no usable trace events (3 records")
    ),
    Case(
        "only-unusable-events",
        lambda d: write(d / "u.json", doc_bytes([{"ph": "X", "name": "k", "ts": 1.0}, {"ph": "X", "dur": 1.0}])),
        Refuse(3, "no usable trace events (2 records"),
    ),
    Case(
        "deep-nesting",
        lambda d: write(d / "deep.json", b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"),
        Refuse(3, "too deeply"),
    ),
    Case("two-documents-concatenated", lambda d: write(d / "two.json", ONE + ONE), Refuse(3, "trailing characters")),
    Case("gzip-twice", lambda d: write(d / "gg.json.gz", _gz(_gz(ONE))), Refuse(3, "compressed twice")),
    Case("plain-text-named-gz", lambda d: write(d / "p.json.gz", b"plain text"), Refuse(3, "is not gzip")),
    Case("gzip-cut-in-its-header", lambda d: write(d / "h.json.gz", BIG_GZ[:6]), Refuse(3, "damaged gzip stream")),
    Case("gzip-corrupt-header", lambda d: write(d / "h.json.gz", flip(BIG_GZ, 3)), Refuse(3, "damaged gzip stream")),
    Case("zstd-cut-in-its-header", lambda d: write(d / "h.json.zst", BIG_ZST[:4]), Refuse(3, "damaged zstd stream")),
    Case(
        "truncated-before-traceEvents",
        lambda d: write(d / "c.json", SAMPLE_TEXT[:200]),
        Refuse(3, "before its first trace event"),
    ),
    Case(
        "truncated-after-metadata-only",
        lambda d: write(d / "c.json", SAMPLE_TEXT[: _META_END + 40]),
        Refuse(3, "none of the 4 complete records"),
    ),
    Case("missing-path", lambda d: d / "nope.json", Refuse(3, "does not exist")),
    Case(
        "directory-of-non-trace-files",
        _dir_of({"notes.txt": b"x", "results.csv": b"a,b\n1,2\n", "plot.png": b"\x89PNG\r\n"}),
        Refuse(3, "no trace file"),
    ),
    Case(
        "directory-with-a-non-trace-json",
        _dir_of({"config.json": b'{"model": "x"}', "notes.txt": b"x"}),
        Refuse(3, "config.json"),
    ),
    Case(
        "directory-with-two-traces",
        _dir_of({"a.trace.json": ONE, "b.trace.json": ONE}),
        Refuse(3, "holds 2 trace files"),
    ),
    # ---- loaded, possibly with counted losses and warnings
    Case(
        "chrome-array-form",
        lambda d: write_trace(d / "arr.json", kernels(5), wrap=False),
        Load(_warns(no_warnings=True, kept=5)),
    ),
    Case("utf8-byte-order-mark", lambda d: write(d / "bom.json", b"\xef\xbb\xbf" + ONE), Load(_warns(kept=1))),
    Case("crlf-line-endings", lambda d: write(d / "crlf.json", BIG_TEXT.replace(b"\n", b"\r\n")), Load(_all_big())),
    Case("json-named-gz", lambda d: write(d / "plain.json.gz", BIG_TEXT), Load(_all_big())),
    Case("gzip-named-json", lambda d: write(d / "gz.json", BIG_GZ), Load(_all_big())),
    Case(
        "events-missing-ts-dur-ph",
        lambda d: write(
            d / "m.json",
            doc_bytes(
                [
                    kernel("ok", 1.0, 1.0),
                    {"ph": "X", "name": "no-ts", "dur": 1.0},
                    {"ph": "X", "name": "no-dur", "ts": 1.0},
                    {"name": "no-ph", "ts": 1.0, "dur": 1.0},
                ]
            ),
        ),
        Load(_dropped({NO_TS: 1, NO_DUR: 1, BAD_PHASE: 1}, kept=1)),
    ),
    Case(
        "negative-durations",
        lambda d: write(
            d / "neg.json",
            doc_bytes(
                [kernel("ok", 1.0, 1.0), kernel("n1", 2.0, -1.0), kernel("n2", 3.0, -0.001), kernel("zero", 4.0, -0.0)]
            ),
        ),
        Load(_dropped({NEGATIVE: 2}, kept=2)),
    ),
    Case(
        "nan-and-infinity-literals",
        _nonfinite_literals,
        Load(
            _both(
                _dropped({NONFINITE: 3}, kept=2, warns=("NaN/Infinity literal",)), _names(["x: NaN, y: Infinity", "ok"])
            )
        ),
    ),
    Case(
        "nan-and-inf-durations-as-strings",
        lambda d: write(
            d / "s.json",
            doc_bytes(
                [kernel("ok", 1.0, 1.0), kernel("a", 2.0, "NaN"), kernel("b", 3.0, "inf"), kernel("c", 4.0, "soon")]
            ),
        ),
        Load(_dropped({NONFINITE: 3}, kept=1)),
    ),
    Case(
        "duration-beyond-int64-ns",
        lambda d: write(
            d / "big.json",
            doc_bytes(
                [kernel("ok", 1.0, 1.0), kernel("huge", 2.0, 1e17), kernel("end", "9223372036854775.000", 1000.0)]
            ),
        ),
        Load(_dropped({OUT_OF_RANGE: 2}, kept=1)),
    ),
    Case("ts-as-strings", _ts_strings, Load(_check_ts)),
    Case("ints-beyond-2^63", _ints_beyond_int64, Load(_check_ints)),
    Case(
        "duplicate-events",
        lambda d: write(d / "dup.json", doc_bytes([kernel("k", 1.0, 2.0)] * 3 + [kernel("other", 9.0, 1.0)])),
        Load(
            lambda t, doc: (
                (
                    len(t.events) == 4
                    and doc["summary"]["same_stream_overlaps"] == 2
                    and doc["summary"]["gpu_busy_ns"] == 3000
                    and any("same-stream overlap" in w for w in doc["warnings"])
                )
                or pytest.fail(doc)
            )
        ),
    ),
    Case(
        "same-stream-overlapping-kernels",
        lambda d: write(
            d / "ov.json", doc_bytes([kernel("a", 1.0, 10.0), kernel("b", 5.0, 2.0), kernel("c", 20.0, 1.0, stream=8)])
        ),
        Load(
            lambda t, doc: (
                (
                    doc["summary"]["same_stream_overlaps"] == 1
                    and doc["summary"]["gpu_busy_ns"] == 11000
                    and t.report.warnings == []
                    and any("same-stream overlap" in w for w in doc["warnings"])
                )
                or pytest.fail(doc)
            )
        ),
    ),
    Case(
        "invalid-utf8-in-names",
        _utf8_names,
        Load(_both(_warns("2 record(s) held invalid UTF-8", kept=3), _names(["A\ufffd\ufffdA", "ok", "\ufffd(B"]))),
    ),
    Case("invalid-utf8-in-metadata", _utf8_header, Load(_warns("metadata holds invalid UTF-8", kept=1))),
    Case(
        "lone-surrogate-escapes",
        _surrogates,
        Load(
            _both(
                _warns("2 lone UTF-16 surrogate", kept=3),
                _names(["lone \ufffd high", "pair \U0001f600", "lone \ufffd low"]),
            )
        ),
    ),
    Case("odd-field-types", _odd_types, Load(_check_odd)),
    Case(
        "records-that-are-not-objects",
        lambda d: write(d / "no.json", doc_bytes(["text", 5, None, [1, 2], kernel("ok", 1.0, 1.0)])),
        Load(_dropped({BAD_PHASE: 4}, kept=1)),
    ),
    Case(
        "unsupported-phases",
        lambda d: write(
            d / "ph.json",
            doc_bytes(
                [
                    kernel("ok", 1.0, 1.0),
                    {"ph": "B", "name": "b", "ts": 1.0},
                    {"ph": "E", "name": "b", "ts": 2.0},
                    {"ph": "Q", "ts": 1.0},
                    {"ph": "C", "name": "mem", "ts": 1.0, "args": {"v": 1}},
                ]
            ),
        ),
        Load(
            lambda t, doc: (
                (
                    t.report.dropped == {UNPAIRED: 2, BAD_PHASE: 1}
                    and t.report.not_events == {"counter record (ph 'C')": 1}
                )
                or pytest.fail(t.report)
            )
        ),
    ),
    Case(
        "trailing-garbage",
        lambda d: write(d / "tg.json", BIG_TEXT + b"\ngarbage"),
        Load(
            lambda t, doc: (
                expect_prefix(t, big_reference()),
                len(t.events) == 2000
                and t.report.salvaged
                and t.report.bytes_lost >= len(b"\ngarbage")
                or pytest.fail(t.report),
            )
        ),
    ),
    Case(
        "nul-padding-after-complete-json",
        lambda d: write(d / "np.json", BIG_TEXT + b"\x00" * 1000),
        Load(
            _both(
                _all_big("ignored 1000 NUL bytes"),
                lambda t, doc: t.meta["base_time_ns"] == BASE_NS or pytest.fail(t.meta),
            )
        ),
    ),
    Case(
        "nul-padding-after-a-cut",
        lambda d: write(d / "nc.json", BIG_TEXT[: len(BIG_TEXT) // 2] + b"\x00" * 1000),
        Load(_big_prefix("ignored 1000 NUL bytes", "truncated")),
    ),
    Case(
        "gzip-bad-crc",
        lambda d: write(d / "crc.json.gz", flip(BIG_GZ, len(BIG_GZ) - 6)),
        Load(_all_big("checksum does not match", salvaged=True)),
    ),
    Case(
        "gzip-bad-length",
        lambda d: write(d / "len.json.gz", flip(BIG_GZ, len(BIG_GZ) - 2)),
        Load(_all_big("checksum does not match", salvaged=True)),
    ),
    Case(
        "gzip-bit-flip-mid-stream",
        lambda d: write(d / "mid.json.gz", flip(BIG_GZ, len(BIG_GZ) // 2)),
        Load(_warns("checksum does not match", "truncated or damaged", salvaged=True)),
    ),
    Case(
        "gzip-trailing-garbage",
        lambda d: write(d / "tg.json.gz", BIG_GZ + b"garbage!"),
        Load(_all_big("gzip stream is corrupt", salvaged=True)),
    ),
    Case(
        "gzip-concatenated-members",
        lambda d: write(d / "cat.json.gz", _gz(BIG_TEXT[:50_000]) + _gz(BIG_TEXT[50_000:])),
        Load(_all_big()),
    ),
    Case("gzip-zero-padding", lambda d: write(d / "pad.json.gz", BIG_GZ + b"\x00" * 512), Load(_all_big())),
    Case(
        "zstd-multiple-frames",
        lambda d: write(d / "frames.json.zst", _zst(BIG_TEXT[:50_000]) + _zst(BIG_TEXT[50_000:])),
        Load(_all_big()),
    ),
    Case(
        "zstd-corrupt-block",
        lambda d: write(d / "cb.json.zst", flip(BIG_ZST, len(BIG_ZST) // 2)),
        Load(_big_prefix("zstd stream is corrupt")),
    ),
    Case(
        "zstd-trailing-garbage",
        lambda d: write(d / "tg.json.zst", BIG_ZST + b"garbage!"),
        Load(_all_big("zstd stream is corrupt", salvaged=True)),
    ),
    Case(
        "zstd-stream-cut",
        lambda d: write(d / "cut.json.zst", BIG_ZST[: len(BIG_ZST) * 2 // 3]),
        Load(_big_prefix("zstd stream ends early", "truncated")),
    ),
    Case(
        "gzip-stream-cut",
        lambda d: write(d / "cut.json.gz", BIG_GZ[: len(BIG_GZ) * 2 // 3]),
        Load(_big_prefix("gzip stream ends early", "truncated")),
    ),
    Case(
        "minified-json-cut",
        lambda d: write(d / "min.json", doc_bytes(BIG_EVENTS, indent=None)[:60_000]),
        Load(_big_prefix("truncated")),
    ),
    Case(
        "chrome-array-cut",
        lambda d: write(d / "arrcut.json", json.dumps(BIG_EVENTS, indent=1).encode()[:60_000]),
        Load(_big_prefix("truncated")),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CATALOGUE, ids=[c.id for c in CATALOGUE])
def test_catalogue(case: Case, cli, tmp_path):
    path = case.build(tmp_path)
    if isinstance(case.expect, Refuse):
        refused(cli, path, case.expect.code, case.expect.needle)
        return
    trace = load_ok(path)
    doc = info_ok(cli, path, trace)
    if case.expect.check is not None:
        case.expect.check(trace, doc)
    # the cached copy (written by the CLI run) answers identically
    code, out, _ = cli("info", path, "--format", "json")
    again = json.loads(out)
    assert code == 0 and again["inputs"][0]["from_cache"] is True
    assert {k: v for k, v in again.items() if k != "inputs"} == {k: v for k, v in doc.items() if k != "inputs"}


def test_catalogue_ids_are_unique():
    ids = [c.id for c in CATALOGUE]
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------------------- exit 4: valid but lacking


@pytest.mark.slow
def test_truncation_that_removes_every_step_falls_back_and_is_flagged(cli, tmp_path):
    """A cut early in the sample keeps kernels and a CPU step marker but no GPU span: the step analyses fall back
    to what survived (the CPU marker's window: with no GPU span in the trace at all, CPU spans are steps on their
    own — the one rule for every profiler; else one whole-trace window), and flag the steps as untrustworthy (the
    file was salvaged); a named marker that is gone is still an error (exit 4)."""
    path = write(tmp_path / "early.json", SAMPLE_TEXT[: len(SAMPLE_TEXT) // 10])
    trace = load_ok(path)
    assert trace.report.salvaged and info_ok(cli, path, trace)["summary"]["kernels"] > 0
    for command in ("steps", "wall"):
        code, out, err = cli(command, path, "--format", "json")
        assert code == 0, (command, err)
        doc = json.loads(out)
        assert doc["summary"]["steps"] == 1 and doc["summary"]["trustworthy"] is False
        assert "not trustworthy" in err and "salvaged" in err and "Traceback" not in err
        assert all(line.startswith("warning: ") for line in err.splitlines())
    code, out, err = cli("wall", path, "--step-name", "no_such_marker")
    assert code == 4 and out == "" and err.splitlines()[-1].startswith("error: ") and str(path) in err


def test_trace_without_kernels_exits_4_for_kernel_analyses(cli, tmp_path):
    path = write(
        tmp_path / "cpu.json",
        doc_bytes([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}]),
    )
    info_ok(cli, path, load_ok(path))
    code, out, err = cli("kernels", path, "--format", "json")
    assert code == 4 and out == "" and len(err.splitlines()) == 1 and str(path) in err


# --------------------------------------------------------------------------- truncation, driven hard


@functools.lru_cache(maxsize=None)
def sample_reference() -> pd.DataFrame:
    return tracekit.load(bundled_sample(), cache=False).events


def check_salvage(path: Path, cut_text: bytes, full: pd.DataFrame) -> tracekit.Trace:
    t = load_ok(path)
    r = t.report
    assert r.salvaged
    expect_prefix(t, full)
    tail = cut_text.rstrip()
    # bytes_lost counts the text after the last complete record; zero only when the cut fell right after one
    assert r.bytes_lost > 0 or tail.endswith((b"}", b"]")), (r.bytes_lost, tail[-20:])
    assert r.bytes_lost <= len(cut_text)
    assert any("truncated" in w or "stream" in w for w in r.warnings)
    return t


TENTHS = list(range(1, 10))


@pytest.mark.parametrize("tenth", TENTHS)
def test_sample_cut_at_each_tenth(tenth, cli, tmp_path):
    cut = SAMPLE_TEXT[: len(SAMPLE_TEXT) * tenth // 10]
    path = write(tmp_path / f"sample_{tenth}.json", cut)
    t = check_salvage(path, cut, sample_reference())
    assert t.meta["base_time_ns"] is None  # the trailing baseTimeNanoseconds went with the cut, and it says so
    assert any("baseTimeNanoseconds" in w for w in t.report.warnings)
    doc = info_ok(cli, path, t)
    assert doc["summary"]["salvaged"] is True and doc["summary"]["bytes_lost"] == t.report.bytes_lost > 0
    assert any("salvaged" in w and "lost the last" in w for w in doc["warnings"])


def _positions_inside(text: bytes) -> dict[str, int]:
    """Cut points inside strings and numbers of the sample (found, not hard-coded)."""
    name = text.index(b"deep_gemm")
    ts = re.search(rb'"ts": (\d+)\.(\d+)', text[len(text) // 2 :])
    dur = re.search(rb'"dur": (\d+)\.(\d+)', text[len(text) // 3 :])
    corr = re.search(rb'"correlation": (\d{2,})', text[len(text) // 4 :])
    base = text.index(b'"baseTimeNanoseconds": ') + len(b'"baseTimeNanoseconds": ')
    unit = text.index(b'"displayTimeUnit": "') + len(b'"displayTimeUnit": "')
    return {
        "inside-a-kernel-name": name + 4,
        "inside-a-key": text.index(b'"cat"', len(text) // 2) + 3,
        "after-an-escape-free-quote": text.index(b'"name": "', len(text) // 2) + len(b'"name": "'),
        "inside-ts-integer-digits": len(text) // 2 + ts.start(1) + 3,
        "right-after-ts-dot": len(text) // 2 + ts.end(1) + 1,
        "inside-ts-decimals": len(text) // 2 + ts.start(2) + 1,
        "inside-dur-number": len(text) // 3 + dur.start(1) + 1,
        "inside-correlation": len(text) // 4 + corr.start(1) + 1,
        "inside-baseTimeNanoseconds": base + 9,
        "inside-trailing-string": unit + 1,
        "between-events": text.index(b"},\n  {", len(text) // 2) + 2,
        "right-after-an-event": text.index(b"},\n  {", len(text) // 2) + 1,
    }


@pytest.mark.parametrize("where", list(_positions_inside(SAMPLE_TEXT)))
def test_sample_cut_inside_strings_and_numbers(where, cli, tmp_path):
    pos = _positions_inside(SAMPLE_TEXT)[where]
    cut = SAMPLE_TEXT[:pos]
    path = write(tmp_path / f"{where}.json", cut)
    t = check_salvage(path, cut, sample_reference())
    info_ok(cli, path, t)
    if where in ("inside-baseTimeNanoseconds", "inside-trailing-string"):
        assert len(t.events) == len(sample_reference())  # only trailing metadata was lost


@pytest.mark.slow
@pytest.mark.parametrize("tenth", TENTHS)
@pytest.mark.parametrize("codec", ["gz", "zst"])
@pytest.mark.parametrize("source", ["sample", "big"])
def test_compressed_stream_cut_at_each_tenth(source, codec, tenth, cli, tmp_path):
    text, full = (SAMPLE_TEXT, sample_reference()) if source == "sample" else (BIG_TEXT, big_reference())
    data = _gz(text) if codec == "gz" else _zst(text)
    path = write(tmp_path / f"{source}_{tenth}.json.{codec}", data[: len(data) * tenth // 10])
    try:
        t = load_ok(path)
    except TracekitError:
        # zstd decodes whole blocks of up to 128 KiB of text: a cut inside the first block leaves nothing. The
        # sample (83 KB) is one block; the big trace (390 KB) has three.
        refused(cli, path, 3, "damaged zstd stream")
        assert codec == "zst" and (source == "sample" or tenth <= 3)
        return
    assert t.report.salvaged and t.report.compression == ("gzip" if codec == "gz" else "zstd")
    expect_prefix(t, full)
    assert any("ends early" in w for w in t.report.warnings)
    doc = info_ok(cli, path, t)
    assert doc["summary"]["salvaged"] is True


# A hand-built trace whose strings hold everything the bracket scan and the streaming splitter must not be
# fooled by: escaped quotes, brackets and braces, backslashes, the event separator itself, unicode.
TRICKY_NAMES = [
    'void gemm<{1, 2}>("a", [b])',
    'quoted \\"name\\" ]}],{[',
    "ends with a backslash \\",
    "looks like a separator },\n  { inside",
    "ünïcödé ✓ \u2028 😀",
    '\\\\"\\',
]


def _handbuilt_text() -> bytes:
    evs = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": 'rank "0" [gpu] {x}'}}]
    for i, name in enumerate(TRICKY_NAMES):
        evs.append(
            kernel(
                name,
                f"@{1712195495519600 + 37 * i}.{(i * 137) % 1000:03d}@",
                12.5 + i,
                corr=i,
                grid=[132, 1, 1],
                block=[128, 1, 1],
            )
        )
        if i % 2:
            evs.append(
                memcpy("Memcpy PtoP (Device -> Device)", f"@{1712195495519610 + 37 * i}.5@", 3.25, nbytes=2**40 + i)
            )
    evs += [
        {"ph": "f", "id": 9, "bp": "e", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": "@1712195495519700@"},
        {"ph": "X", "cat": "kernel", "name": "no dur", "pid": 0, "tid": 7, "ts": "@1712195495519701@"},
        {"ph": "i", "s": "g", "name": "instant [}", "pid": 0, "tid": 0, "ts": "@1712195495519702.25@"},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": "@1712195495519703@",
            "dur": 4.0,
            "args": {"Input Dims": [[1, 2], [3, [4, {"a": "]"}]]], "External id": 7},
        },
    ]
    lines = [re.sub(r'"@([0-9.]+)@"', r"\1", json.dumps(e, ensure_ascii=False)) for e in evs]
    return (
        '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "numSms": 148, "name": "B200 [x]"}],\n'
        '  "traceEvents": [\n  ' + ",\n  ".join(lines) + '\n  ],\n  "traceName": "hand {built}",\n'
        '  "baseTimeNanoseconds": 1711964646000000000\n}'
    ).encode()


HANDBUILT = _handbuilt_text()


@functools.lru_cache(maxsize=None)
def handbuilt_reference() -> pd.DataFrame:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        t = tracekit.load(write(Path(d) / "hand.json", HANDBUILT), cache=False)
    assert sorted(set(TRICKY_NAMES) - set(t.events["name"].astype(str))) == []
    return t.events


def test_handbuilt_trace_reads_whole_with_both_readers(tmp_path, monkeypatch):
    full = tracekit.load(write(tmp_path / "hand.json", HANDBUILT), cache=False)
    assert full.report.reader == "stream" and not full.report.salvaged
    assert full.report.dropped == {NO_DUR: 1} and full.report.not_events == {
        "metadata record (ph 'M')": 1,
        "flow record (ph 'f')": 1,
    }
    minified = tracekit.load(write(tmp_path / "min.json", json.dumps(json.loads(HANDBUILT)).encode()), cache=False)
    pd.testing.assert_frame_equal(rows(minified.events), rows(full.events))
    assert full.meta["base_time_ns"] == 1711964646000000000


def _hard_positions(text: bytes) -> list[int]:
    """Every byte of the records with escaped quotes, backslashes and nested args; every 4th byte elsewhere."""
    every = set(range(1, len(text), 4))
    for needle in (b'quoted \\\\\\"name', b"ends with a backslash", b'"Input Dims"'):
        at = text.index(needle)
        every.update(range(text.rindex(b"\n", 0, at), text.index(b"\n", at) + 1))
    return sorted(every)


@pytest.mark.parametrize("layout", ["kineto", "minified", "array"])
def test_salvage_cut_at_every_byte_keeps_a_prefix(layout):
    """The salvage cut itself, at every byte of the hand-built trace: it never lands inside a string, and the
    repaired text holds exactly the first records of the full document (or there is no cut point yet)."""
    from tracekit.ingest.repair import salvage_json

    doc = json.loads(HANDBUILT)
    text = {
        "kineto": HANDBUILT,
        "minified": json.dumps(doc, ensure_ascii=False).encode(),
        "array": json.dumps(doc["traceEvents"], indent=1).encode(),
    }[layout].rstrip()
    events = doc["traceEvents"]
    kept_before = 0
    for pos in range(1, len(text)):
        fixed = salvage_json(text[:pos])
        if fixed is None:
            assert kept_before == 0, pos
            continue
        repaired, lost = fixed
        assert 0 <= lost < pos and repaired.startswith(text[: pos - lost]), pos
        got = json.loads(repaired)
        records = got if layout == "array" else got.get("traceEvents", [])
        assert records == events[: len(records)], pos
        assert len(records) >= kept_before, pos
        kept_before = len(records)
    assert kept_before == len(events)


@pytest.mark.slow
def test_handbuilt_trace_cut_through_its_hardest_records(tmp_path):
    """Full loads: every cut either refuses with one sentence (nothing complete yet) or keeps exactly a prefix;
    once a cut keeps something, every longer cut keeps at least as much."""
    full = handbuilt_reference()
    text = HANDBUILT.rstrip()
    kept_before = -1
    for pos in _hard_positions(text):
        path = write(tmp_path / f"cut{pos}.json", text[:pos])
        try:
            t = check_salvage(path, text[:pos], full)
        except TracekitError as exc:
            assert kept_before < 0, f"cut at {pos} refused after a shorter cut loaded: {exc}"
            assert exc.exit_code == 3 and str(path) in str(exc) and "\n" not in str(exc)
            continue
        assert len(t.events) >= kept_before, pos
        kept_before = len(t.events)
        path.unlink()
    assert kept_before == len(full)


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["gz", "zst"])
def test_handbuilt_compressed_stream_cut_at_every_byte(codec, tmp_path):
    full = handbuilt_reference()
    data = _gz(HANDBUILT) if codec == "gz" else _zst(HANDBUILT)
    outcomes = set()
    for pos in range(1, len(data)):
        path = write(tmp_path / f"cut{pos}.json.{codec}", data[:pos])
        try:
            t = load_ok(path)
        except TracekitError as exc:
            assert exc.exit_code == 3 and str(path) in str(exc) and "\n" not in str(exc)
            outcomes.add("refused")
            continue
        assert t.report.salvaged and any("stream" in w for w in t.report.warnings)
        expect_prefix(t, full)
        outcomes.add("salvaged")
    # gzip yields text as it goes; zstd decodes whole blocks, and this trace is a single one
    assert outcomes == ({"refused", "salvaged"} if codec == "gz" else {"refused"})


@pytest.mark.parametrize("pos", [len(HANDBUILT) * k // 10 for k in range(2, 10)])
def test_handbuilt_cuts_through_the_cli(pos, cli, tmp_path):
    path = write(tmp_path / "hand.json", HANDBUILT[:pos])
    t = check_salvage(path, HANDBUILT[:pos], handbuilt_reference())
    info_ok(cli, path, t)


@pytest.mark.parametrize("tenth", [3, 6, 9])
def test_salvage_is_the_same_with_the_decode_helper_process(tenth, tmp_path, monkeypatch):
    """TRACEKIT_WORKERS=2 forks a decode helper on the streaming path; a cut file must come out identically."""
    cut = SAMPLE_TEXT[: len(SAMPLE_TEXT) * tenth // 10]
    path = write(tmp_path / "cut.json", cut)
    monkeypatch.setenv("TRACEKIT_WORKERS", "1")
    one = tracekit.load(path, cache=False)
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    two = tracekit.load(path, cache=False)
    pd.testing.assert_frame_equal(two.events, one.events)
    assert two.report.to_dict() == one.report.to_dict()


def test_info_table_says_how_much_was_salvaged(cli, tmp_path):
    cut = SAMPLE_TEXT[: len(SAMPLE_TEXT) // 2]
    path = write(tmp_path / "half.json", cut)
    t = load_ok(path)
    code, out, err = cli("info", path)
    assert code == 0 and "Traceback" not in err
    assert f"salvaged {t.report.records_read} complete records and lost the last {t.report.bytes_lost} bytes" in err
    assert "records read" in out and "events kept" in out
