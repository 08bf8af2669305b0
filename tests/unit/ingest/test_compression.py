"""The one place that says how a file is compressed (tracekit/ingest/compression.py)."""

from __future__ import annotations

import gzip

import zstandard

from tracekit.ingest.compression import BOM, HEAD_BYTES, compression_of, is_compressed, without_bom


def test_compression_of_real_streams():
    text = b'{"traceEvents": []}'
    assert compression_of(gzip.compress(text)[:HEAD_BYTES]) == "gzip"
    assert compression_of(zstandard.ZstdCompressor().compress(text)[:HEAD_BYTES]) == "zstd"
    assert compression_of(text[:HEAD_BYTES]) == "none"
    assert compression_of(b"") == "none" and compression_of(b"\x1f") == "none"
    assert compression_of(b"\x28\xb5\x2f") == "none"  # a cut zstd magic is not zstd
    assert is_compressed(gzip.compress(b"")) and not is_compressed(BOM + text)


def test_without_bom():
    assert without_bom(BOM + b"{}") == b"{}"
    assert without_bom(b"{}") == b"{}" and without_bom(b"") == b""
    assert without_bom(BOM + BOM + b"{}") == BOM + b"{}"  # one mark, as a decoder would
