"""The streaming reader (with and without its helper process) and the whole-document reader agree."""

from __future__ import annotations

import json
import random
import re

import pytest

import tracekit
from tracekit.ingest.kineto.document import decode_slices, split_document
from tracekit.ingest.kineto.pieces import NotStreamable
from tracekit.ingest.kineto.stream import decode_stream
from tracekit.ingest.normalize import build_events
from tests.conftest import kernel, memcpy


def _events(n: int = 3000) -> list:
    rnd = random.Random(7)
    evs = []
    for i in range(n):
        ts = f"@@{1712195495519600 + rnd.randrange(10**7)}.{rnd.randrange(1000):03d}@@"  # unquoted below
        r = rnd.random()
        if r < 0.5:
            evs.append(
                kernel(
                    f"k{rnd.randrange(40)}",
                    ts,
                    round(rnd.uniform(1, 50), 3),
                    stream=rnd.choice([7, 20]),
                    grid=[rnd.randrange(1, 300), 1, 1],
                    block=[128, 1, 1],
                    corr=i,
                )
            )
        elif r < 0.7:
            evs.append(memcpy("Memcpy PtoP (Device -> Device)", ts, 12.5, nbytes=rnd.randrange(10**6)))
        elif r < 0.9:
            evs.append({"ph": "f", "id": i, "bp": "e", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": ts})
        else:
            evs.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 1,
                    "tid": 1,
                    "ts": ts,
                    "dur": 3.0,
                    "args": {"External id": i, "Input Dims": [[4, 4]]},
                }
            )
    evs.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}})
    return evs


def _text(events: list, layout: str, wrap: bool = True) -> bytes:
    lines = [re.sub(r'"@@([0-9.]+)@@"', r"\1", json.dumps(e)) for e in events]
    sep = {"kineto": ",\n  ", "oneline": ",\n", "minified": ","}[layout]
    body = "[" + ("\n  " if layout == "kineto" else "") + sep.join(lines) + "]"
    if not wrap:
        return body.encode()
    return (
        '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "numSms": 148}], "traceEvents": '
        + body
        + ', "baseTimeNanoseconds": 1711964646000000000}'
    ).encode()


def _table(cols):
    df, reasons, lanes = build_events(cols)
    return df, reasons, lanes, cols.header.get("baseTimeNanoseconds")


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["kineto", "oneline"])
@pytest.mark.parametrize("wrap", [True, False])
def test_stream_equals_whole_document(layout, wrap, tmp_path, monkeypatch):
    text = _text(_events(), layout, wrap)
    raws, header = split_document("t", text)
    ref = _table(decode_slices(raws, header))
    blocks = [text[i : i + 5000] for i in range(0, len(text), 5000)]
    got = _table(decode_stream(iter(blocks)))
    path = tmp_path / "t.json"
    path.write_bytes(text)
    helper_file = _table(decode_stream(iter(blocks), workers=2, plain_file=str(path)))
    helper_pipe = _table(decode_stream(iter(blocks), workers=2))
    for other in (got, helper_file, helper_pipe):
        assert other[0].equals(ref[0])
        assert other[1:] == ref[1:]
    assert ref[1] == {
        "flow record (ph 'f')": sum(1 for e in _events() if e.get("ph") == "f"),
        "metadata record (ph 'M')": 1,
    }


def test_minified_layout_is_not_streamable_when_large_but_loads():
    text = _text(_events(), "minified")
    with pytest.raises(NotStreamable):
        import tracekit.ingest.kineto.stream as k

        old = k._MAX_HEAD
        k._MAX_HEAD = 1000
        try:
            decode_stream(iter([text[i : i + 5000] for i in range(0, len(text), 5000)]))
        finally:
            k._MAX_HEAD = old


def test_load_uses_helper_and_matches_single_process(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_bytes(_text(_events(), "kineto"))
    monkeypatch.setenv("TRACEKIT_WORKERS", "1")
    one = tracekit.load(path, cache=False)
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    two = tracekit.load(path, cache=False)
    assert one.report.reader == two.report.reader == "stream"
    assert two.events.equals(one.events)
    assert two.report.to_dict() == one.report.to_dict()


@pytest.mark.parametrize("kind", ["json", "gz", "gz-zlib", "gz-members", "zst"])
def test_read_ahead_gives_the_text_in_order(kind, tmp_path, monkeypatch):
    """The streaming ingest's blocks (views of reused buffers for gzip, taken one at a time as the decoder
    does) put back together are the file's text."""
    import gzip as _gzip

    import zstandard

    from tracekit.ingest import reader

    text = b"".join(b'{"ph": "X", "name": "k%d", "ts": %d}\n' % (i, i) for i in range(40000))
    data = {
        "json": text,
        "gz": _gzip.compress(text),
        "gz-zlib": _gzip.compress(text),
        "gz-members": _gzip.compress(text[:1000]) + _gzip.compress(text[1000:]) + b"\x00" * 8,
        "zst": zstandard.ZstdCompressor().compress(text),
    }[kind]
    if kind == "gz-zlib":
        monkeypatch.setenv("TRACEKIT_INFLATE", "zlib")
    monkeypatch.setattr(reader, "TEXT_BLOCK", 4096)  # many blocks: the pool of buffers goes round often
    path = tmp_path / "t.bin"
    path.write_bytes(data)
    got = bytearray()
    for block in reader.read_ahead(path):
        got += block
    assert bytes(got) == text


@pytest.mark.parametrize("kind", ["json", "gz", "gz-pool", "zst"])
def test_iter_blocks_reports_the_file_position_and_bounds_compressed_text(kind, tmp_path, monkeypatch):
    """Every reader of iter_blocks (plain, gzip by an inflater, gzip into pooled buffers, zstd) reports the file
    position after each block, up to the file's size, and counts a compressed file's text against the bound on
    decompressed text (compression.MAX_RATIO) block by block; a plain file is never bounded."""
    import gzip as _gzip

    import zstandard

    from tracekit.errors import ResourceLimitError
    from tracekit.ingest import compression, reader

    text = b"".join(b'{"ph": "X", "name": "k%d", "ts": %d}\n' % (i, i) for i in range(40000))
    data = (
        _gzip.compress(text)
        if kind.startswith("gz")
        else (zstandard.ZstdCompressor().compress(text) if kind == "zst" else text)
    )
    pool = 2 if kind == "gz-pool" else 0
    path = tmp_path / "t.bin"
    path.write_bytes(data)
    seen: list[int] = []
    got = b"".join(bytes(b) for b in reader.iter_blocks(path, block=4096, on_read=seen.append, pool=pool))
    assert got == text
    assert len(seen) > 1 and seen == sorted(seen) and seen[-1] == len(data)

    monkeypatch.setattr(compression, "MIN_TEXT_LIMIT", 0)
    monkeypatch.setenv("TRACEKIT_MAX_RATIO", "2")  # these files hold 10x their size and more in text
    blocks = reader.iter_blocks(path, block=4096, pool=pool)
    if kind == "json":
        assert b"".join(bytes(b) for b in blocks) == text
    else:
        with pytest.raises(ResourceLimitError, match="decompression bomb"):
            for _ in blocks:
                pass
