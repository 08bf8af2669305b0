"""The text a piece is decoded from, while its decoded events are still held elsewhere.

A Dask worker's profiler holds its task threads' frames while it walks them; a frame that held a chunk's decoded
events then outlives its call, and their ``msgspec.Raw`` values keep buffers of the text exported. Releasing the
text then raised ``BufferError: memoryview has N exported buffers`` (seen once under Dask; every time with a thread
holding the decoder's frames). Here the events are held on purpose, as such a frame would hold them.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.ingest import reader
from tracekit.ingest.kineto import columns, pieces


def _events(n: int, big_name_at: int | None = None, big: int = 0) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "kernel",
            "name": ("k" * big) if i == big_name_at else f"kernel_{i % 37}",
            "pid": 0,
            "tid": 7,
            "ts": 1712195495519689.047 + i,
            "dur": 3.5,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
        for i in range(n)
    ]


def _text(events: list[dict]) -> bytes:
    return ("[" + ",\n  ".join(json.dumps(e) for e in events) + "]").encode()


@pytest.fixture
def held(monkeypatch):
    """Every chunk's decoded events kept alive after the builder is done with them (as a sampled frame keeps
    them): the list of what is held."""
    kept: list = []
    add_events = columns.ColumnBuilder.add_events

    def holding(self, events):
        kept.append(events)
        return add_events(self, events)

    monkeypatch.setattr(columns.ColumnBuilder, "add_events", holding)
    return kept


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            np.testing.assert_array_equal(a[k], b[k])


def test_a_piece_whose_events_are_still_held_decodes_as_one_whose_are_not(monkeypatch, held):
    monkeypatch.setattr(pieces, "SUB_CHUNK", 2048)  # a piece of ~60 sub-chunks, each with its own view
    text = _text(_events(1000))
    free = pieces.decode_text(bytearray(text))
    held.clear()
    got = pieces.decode_text(bytearray(text))  # each sub-chunk released while its events are held
    assert len(held) > 20 and sum(map(len, held)) == 1000
    assert bytes(held[0][0].ts) == b"1712195495519689.0"  # a Raw ts of the released text: still there
    _same(got, free)
    whole = bytearray(text)
    got = pieces.decode_piece(whole, len(whole) - 2)  # the reader's way: its own '[' and ']' written in place
    _same(got, free)


@pytest.mark.slow
def test_a_stream_that_grows_its_buffer_while_events_are_held_loads_alike(tmp_path, monkeypatch, held):
    """An event bigger than the stream's buffer after pieces whose events are held: the buffer grows into a new
    one (resizing it under their exported views would fail), and the table is the same."""
    monkeypatch.setattr(reader, "READ_BLOCK", 16 << 10)
    monkeypatch.setenv("TRACEKIT_WORKERS", "1")  # every piece decoded in this process
    path = tmp_path / "trace.json"
    path.write_bytes(b'{"traceEvents": ' + _text(_events(3000, big_name_at=2000, big=200_000)) + b"}")
    got = tracekit.load(path, cache=False)
    assert held and got.report.reader == "stream"
    monkeypatch.undo()
    monkeypatch.setenv("TRACEKIT_WORKERS", "1")
    ref = tracekit.load(path, cache=False)
    pd.testing.assert_frame_equal(got.events, ref.events, check_exact=True)
    assert len(got.events) == 3000 and got.events["name"].astype(str).str.len().max() == 200_000
