"""The events table does not depend on how the trace was stored or read (issue 18).

One generated trace, written as ``.json``, ``.json.gz`` (one member and several), ``.json.zst`` (one frame
and several), in Kineto's pretty layout and one record a line, loaded with one worker and with the decode
helper process: every load gives the same events table, record for record, and the same accounting. The
reader's block size is lowered so that a small trace is cut into many pieces (and the helper really takes
some of them), which keeps the test at a few seconds with no timing in it.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pandas as pd
import pytest
import zstandard

import tracekit
from tracekit.ingest import reader
from tracekit.ingest.kineto import helper, pieces

BLOCK = 64 << 10  # the reader's text block for these tests: a ~1.5 MB trace becomes ~25 pieces


def _records(n: int = 6000) -> list[dict]:
    """Kineto-like records: kernels with launch args, copies with bytes, cpu ops with shapes, runtime calls,
    flows, instants, metadata, a string pid, a few unusable events (counted, never kept), epoch-µs times."""
    rnd = random.Random(18)
    base = 1712195495519600
    recs: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
    ]
    for i in range(n):
        ts = f"@{base + rnd.randrange(10**7)}.{rnd.randrange(1000):03d}@"
        r = rnd.random()
        if r < 0.35:
            recs.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"void kernel_{rnd.randrange(60)}<{rnd.randrange(4)}>(float*)",
                    "pid": 0,
                    "tid": rnd.choice([7, 20]),
                    "ts": ts,
                    "dur": round(rnd.uniform(1, 90), 3),
                    "args": {
                        "External id": i,
                        "device": 0,
                        "stream": rnd.choice([7, 20]),
                        "correlation": 10**6 + i,
                        "registers per thread": rnd.choice([32, 168]),
                        "shared memory": rnd.choice([0, 232448]),
                        "grid": [rnd.randrange(1, 300), 1, 1],
                        "block": [128, rnd.choice([1, 4]), 1],
                    },
                }
            )
        elif r < 0.45:
            recs.append(
                {
                    "ph": "X",
                    "cat": "gpu_memcpy",
                    "name": "Memcpy PtoP (Device -> Device)",
                    "pid": 0,
                    "tid": 7,
                    "ts": ts,
                    "dur": 12.5,
                    "args": {"device": 0, "stream": 7, "correlation": i, "bytes": rnd.randrange(1, 1 << 30)},
                }
            )
        elif r < 0.65:
            recs.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": rnd.choice(["aten::mm", "aten::copy_", "aten::add"]),
                    "pid": 4242,
                    "tid": 4242,
                    "ts": ts,
                    "dur": round(rnd.uniform(1, 30), 3),
                    "args": {
                        "External id": i,
                        "Record function id": 0,
                        "Ev Idx": i,
                        "Input Dims": [[rnd.randrange(1, 512), 7168], [7168, 2048]],
                    },
                }
            )
        elif r < 0.75:
            recs.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 4242,
                    "tid": 4242,
                    "ts": ts,
                    "dur": 4.25,
                    "args": {"External id": i, "cbid": 211, "correlation": 10**6 + i},
                }
            )
        elif r < 0.95:
            recs.append({"ph": rnd.choice("sf"), "id": i, "pid": 0, "tid": 7, "ts": ts, "cat": "ac2g", "name": "ac2g"})
        elif r < 0.97:
            recs.append({"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": ts})
        elif r < 0.98:
            recs.append(
                {
                    "ph": "X",
                    "cat": "Trace",
                    "name": "PyTorch Profiler (0)",
                    "pid": "Spans",
                    "tid": "PyTorch Profiler",
                    "ts": ts,
                    "dur": 100.0,
                }
            )
        elif r < 0.99:
            recs.append({"ph": "X", "cat": "kernel", "name": "no dur", "pid": 0, "tid": 7, "ts": ts})
        else:
            recs.append({"ph": "X", "cat": "kernel", "name": "negative", "pid": 0, "tid": 7, "ts": ts, "dur": -1.0})
    return recs


def _text(layout: str) -> bytes:
    recs = [re.sub(r'"@([0-9.]+)@"', r"\1", json.dumps(r, ensure_ascii=False)) for r in _records()]
    if layout == "kineto":  # libkineto's multi-line records
        recs = ["  " + r.replace(', "args": {', ',\n    "args": {\n      ').replace("}}", "\n    }\n  }") for r in recs]
        sep = ",\n"
    else:
        sep = ",\n  "
    head = (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA B200", "numSms": 148}],\n'
        '  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},\n  "traceEvents": [\n'
    )
    tail = '\n  ],\n  "traceName": "t.pt.trace.json",\n  "baseTimeNanoseconds": 1712000000000000000\n}\n'
    return (head + sep.join(recs) + tail).encode()


def _write_all(tmp: Path, text: bytes) -> dict[str, Path]:
    third = len(text) // 3
    files = {
        "json": text,
        "gz": gzip.compress(text, compresslevel=6),
        "gz-members": b"".join(gzip.compress(text[i : i + third], compresslevel=1) for i in range(0, len(text), third)),
        "zst": zstandard.ZstdCompressor(level=3).compress(text),
        "zst-frames": b"".join(
            zstandard.ZstdCompressor().compress(text[i : i + third]) for i in range(0, len(text), third)
        ),
    }
    out = {}
    for key, data in files.items():
        suffix = {"json": ".json", "gz": ".json.gz", "gz-members": ".json.gz"}.get(key, ".json.zst")
        path = tmp / f"{key}{suffix}"
        path.write_bytes(data)
        out[key] = path
    return out


_SAME_REPORT = (
    "reader",
    "text_bytes",
    "records_read",
    "events_kept",
    "not_events",
    "dropped",
    "salvaged",
    "bytes_lost",
    "loose_chunks",
    "int_overflows",
)


@pytest.fixture
def helper_use(monkeypatch):
    """Records, per load, how many pieces the helper process decoded (0 when it was not started)."""
    seen: list[int] = []
    results = helper.Helper.results

    def spy(self):
        out = results(self)
        seen.append(self.helper_pieces)
        return out

    monkeypatch.setattr(helper.Helper, "results", spy)
    monkeypatch.setattr(reader, "READ_BLOCK", BLOCK)
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["kineto", "oneline"])
def test_json_gz_zst_one_worker_and_two_give_the_same_table(layout, tmp_path, monkeypatch, helper_use):
    text = _text(layout)
    assert len(text) > 20 * BLOCK
    paths = _write_all(tmp_path, text)
    monkeypatch.setenv("TRACEKIT_WORKERS", "1")
    ref = tracekit.load(paths["json"], cache=False)
    assert ref.report.reader == "stream" and not ref.report.warnings[1:]
    assert ref.report.dropped and ref.report.not_events  # the unusable records are counted, not kept
    assert ref.meta["base_time_ns"] == 1712000000000000000 and ref.meta["num_sms"] == 148
    ref_report = {k: v for k, v in ref.report.to_dict().items() if k in _SAME_REPORT}
    for workers in ("1", "2"):
        monkeypatch.setenv("TRACEKIT_WORKERS", workers)
        for key, path in paths.items():
            helper_use.clear()
            got = tracekit.load(path, cache=False)
            pd.testing.assert_frame_equal(got.events, ref.events, check_exact=True)
            assert {k: v for k, v in got.report.to_dict().items() if k in _SAME_REPORT} == ref_report, (key, workers)
            assert got.meta["thread_names"] == ref.meta["thread_names"]
            assert got.meta["base_time_ns"] == ref.meta["base_time_ns"]
            if workers == "2":
                assert helper_use and helper_use[0] > 0, f"{key}: the helper process decoded no piece"
            else:
                assert helper_use == []


@pytest.mark.slow
@pytest.mark.parametrize("inflate", ["zlib", "isal"])
def test_every_inflater_gives_the_same_table(inflate, tmp_path, monkeypatch, helper_use):
    if inflate == "isal":
        pytest.importorskip("isal")
    paths = _write_all(tmp_path, _text("kineto"))
    monkeypatch.setenv("TRACEKIT_WORKERS", "1")
    ref = tracekit.load(paths["json"], cache=False)
    monkeypatch.setenv("TRACEKIT_INFLATE", inflate)
    for workers in ("1", "2"):
        monkeypatch.setenv("TRACEKIT_WORKERS", workers)
        for key in ("gz", "gz-members"):
            got = tracekit.load(paths[key], cache=False)
            assert got.report.reader == "stream"
            pd.testing.assert_frame_equal(got.events, ref.events, check_exact=True)


@pytest.mark.slow
def test_a_piece_the_helper_cannot_decode_falls_back_to_the_safe_reader(tmp_path, monkeypatch, helper_use):
    """A record that breaks the fast schema in the middle of a big trace: the streaming reader gives up (in
    whichever process met it) and the whole-document reader loads the file, counting what it must."""
    text = _text("oneline")
    at = text.index(b'"name": "aten::mm"', len(text) // 2)
    broken = text[:at] + b'"name": "aten\xff::mm"' + text[at + len(b'"name": "aten::mm"') :]  # invalid UTF-8
    path = tmp_path / "broken.json.gz"
    path.write_bytes(gzip.compress(broken))
    monkeypatch.setenv("TRACEKIT_WORKERS", "1")
    one = tracekit.load(path, cache=False)
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    two = tracekit.load(path, cache=False)
    assert one.report.reader == "whole" and any("invalid UTF-8" in w for w in one.report.warnings)
    pd.testing.assert_frame_equal(two.events, one.events, check_exact=True)
    assert two.report.to_dict() == one.report.to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["kineto", "oneline"])
def test_pieces_decoded_a_sub_chunk_at_a_time_give_the_same_table(layout, tmp_path, monkeypatch, helper_use):
    """Each piece is decoded about SUB_CHUNK bytes at a time (for the allocator's sake): with sub-chunks of
    2 KiB, every 64 KiB piece is cut some thirty times, and the table and the accounting do not change."""
    paths = _write_all(tmp_path, _text(layout))
    monkeypatch.setenv("TRACEKIT_WORKERS", "1")
    ref = tracekit.load(paths["json"], cache=False)  # 64 KiB pieces: below SUB_CHUNK, decoded whole
    ref_report = {k: v for k, v in ref.report.to_dict().items() if k in _SAME_REPORT}
    monkeypatch.setattr(pieces, "SUB_CHUNK", 2048)
    cuts: list[int] = []
    sub_chunks = pieces.sub_chunks

    def count(text):
        chunks = list(sub_chunks(text))
        cuts.append(len(chunks))
        return iter(chunks)

    monkeypatch.setattr(pieces, "sub_chunks", count)
    for workers in ("1", "2"):
        monkeypatch.setenv("TRACEKIT_WORKERS", workers)
        for key, path in paths.items():
            got = tracekit.load(path, cache=False)
            pd.testing.assert_frame_equal(got.events, ref.events, check_exact=True)
            assert {k: v for k, v in got.report.to_dict().items() if k in _SAME_REPORT} == ref_report, (key, workers)
    assert cuts and max(cuts) >= 20  # (counted in this process: the pieces it decoded itself)


@pytest.mark.parametrize("sep", [b",\n  ", b",\n", b",\r\n\t"])
@pytest.mark.parametrize("readonly", [True, False])
def test_sub_chunks_cut_between_events_only(sep, readonly, monkeypatch):
    monkeypatch.setattr(pieces, "SUB_CHUNK", 64)
    events = [b'{"ph": "X", "name": "k%d, },\\n {", "ts": %d}' % (i, i) for i in range(200)]
    text = b"[" + sep.join(events) + b"]"
    chunks = [bytes(c) for c in pieces.sub_chunks(text if readonly else bytearray(text))]
    assert len(chunks) > 10
    decoded = [e for c in chunks for e in json.loads(c)]
    assert decoded == [json.loads(e) for e in events]
