"""The whole-document path (the fallback, and for salvage): the full text split into raw event slices,
decoded in chunks of :data:`CHUNK_EVENTS`."""

from __future__ import annotations

from typing import Any

import msgspec

from ...data import inputs_read
from ...errors import InputError
from ..compression import BOM, is_compressed, without_bom
from .columns import ColumnBuilder, RawColumns
from .schema import ARRAY_DECODER, DOC_DECODER, HEADER_KEYS

CHUNK_EVENTS = 65536


def split_document(path, text: bytes | bytearray) -> tuple[list, dict[str, Any]]:
    """Return (event slices, top-level metadata). Raises msgspec errors for malformed JSON."""
    head = text_head(text)
    if text[: len(BOM)] == BOM:  # a UTF-8 byte-order mark (Windows editors write one); a view, not a copy
        text = memoryview(text)[len(BOM) :]
    if head.startswith(b"["):
        return ARRAY_DECODER.decode(text), {}
    if not head.startswith(b"{"):
        if is_compressed(head):
            raise InputError(
                f"{path} is compressed twice (its decompressed content is gzip or zstd data again);"
                " decompress it once and pass the result"
            )
        raise InputError(f"{path} is not JSON (it starts with {head[:16]!r}); tracekit reads {inputs_read()}")
    try:
        doc = DOC_DECODER.decode(text)
    except msgspec.ValidationError as exc:  # the only typed field is traceEvents
        raise InputError(
            f"{path} is JSON but its 'traceEvents' is not a list of events ({exc}); tracekit reads {inputs_read()}"
        ) from exc
    if doc.traceEvents is None:
        raise InputError(
            f"{path} is JSON but not a trace of a profiler tracekit reads (no 'traceEvents' list, no"
            f" 'rocprofiler-sdk-tool'); tracekit reads {inputs_read()}"
        )
    return doc.traceEvents, {k: getattr(doc, k) for k in HEADER_KEYS}


def text_head(text) -> bytes:
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
