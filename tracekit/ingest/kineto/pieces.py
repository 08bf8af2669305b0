"""One piece of the stream — ``[`` + whole events + ``]`` — decoded into a builder's exported columns.

A piece is cut at the separator between top-level events (``},`` + newline + indentation + ``{``: JSON
strings cannot hold a raw newline, so the pattern never occurs inside a value); it is decoded in place, a
sub-chunk of about :data:`SUB_CHUNK` bytes at a time, by whichever process holds it.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from .columns import ColumnBuilder

# The indentation is bounded, so that a search never backtracks over a long run of whitespace (see stream.py);
# a file indented deeper than MAX_INDENT is read by the whole-document reader.
MAX_INDENT = 64
SEP_RE = re.compile(rb"\},(\r?\n[ \t]{0,%d})\{" % MAX_INDENT)


class NotStreamable(Exception):
    """The layout is not one the streaming path handles; use the whole-document path."""


def decode_text(text) -> dict[str, Any]:
    """Decode one piece ("[" + whole events + "]"), a sub-chunk at a time (see :func:`sub_chunks`)."""
    b = ColumnBuilder()
    out_of_memory = False
    try:
        for chunk in sub_chunks(text):
            try:
                b.add_text(chunk)
            except MemoryError:
                # raised again below: the decoded events in this traceback's frames hold views of the text (their
                # msgspec.Raw ts), so the text can be released only once the handler has let go of them
                out_of_memory = True
            finally:
                if isinstance(chunk, memoryview):
                    let_go(chunk)
            if out_of_memory:
                break
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise NotStreamable(str(exc)) from exc
    if out_of_memory:
        raise MemoryError
    return b.export()


SUB_CHUNK = 1 << 20  # bytes of text decoded at a time inside a piece


def sub_chunks(text):
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
            m = SEP_RE.search(view, a + SUB_CHUNK)
            if m is None:
                break
            comma, brace = m.start() + 1, m.end() - 1
            view[comma] = 93  # "]"
            view[brace - 1] = 91  # "["
            yield view[a : comma + 1]
            a = brace - 1
        yield view[a:]
    finally:
        let_go(view)


def let_go(view: memoryview) -> None:
    """Release a view of the text now; or, while something still holds buffers of it, drop it and leave its memory
    to go with the last of them.

    The decoded events' ``msgspec.Raw`` values (``ts``, a cpu_op's inputs) are buffers exported by the view they
    were decoded from. They die with the chunk's events, unless a frame that held those events outlives its call:
    another thread took it (a Dask worker's profiler holds its task threads' frames while it walks them), or a
    traceback keeps it. Releasing the view then raises ``BufferError: memoryview has N exported buffers``. Dropping
    it instead is safe: the text's buffer stays until they let go (written over meanwhile, never read), and it is
    never resized under them (``stream._cut_pieces`` grows its buffer into a new one)."""
    try:
        view.release()
    except BufferError:
        pass


def decode_piece(buf: bytearray, k: int) -> dict[str, Any]:
    """Decode buf[1:k+1] (whole events) in place: '[' and ']' are written over the bytes around it."""
    buf[k + 1] = 93  # ']' over the ',' after the last complete event
    buf[0] = 91  # '[' over the byte before the first '{'
    view = memoryview(buf)[: k + 2]
    try:
        return decode_text(view)
    finally:
        let_go(view)
