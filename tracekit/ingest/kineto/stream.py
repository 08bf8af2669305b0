"""The streaming path (the fast one): decompressed text in blocks → pieces of whole events → columns.

The text arrives in blocks; the document's head (everything before the ``traceEvents`` array) is read
first, then pieces of whole events are cut at the separator between top-level events and each is decoded
in place (see ``pieces.py``). Only a few blocks of text are held at a time. On two cores a forked helper
process decodes pieces too (:class:`~.helper.Helper`), through memory shared with it; a plain file's
pieces are cut where they lie (``plain_file.py``). The last event and the document's trailer are decoded
at the end, and the pieces' columns are merged in file order.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from ..compression import without_bom
from .columns import ColumnBuilder, RawColumns
from .document import text_head
from .helper import Helper
from .pieces import MAX_INDENT, SEP_RE, NotStreamable, decode_piece
from .plain_file import cut_plain_file
from .schema import ARRAY_DECODER, DOC_DECODER, HEADER_KEYS

# The indentation and the whitespace around the key are bounded, so that a search never backtracks over a long
# run of whitespace (512 MiB of spaces after "}," once made every block's search scan all of it again: quadratic)
# and a search can resume where the last one stopped, _MATCH_SPAN bytes back. A file indented deeper than
# MAX_INDENT is read by the whole-document reader.
_KEY_RE = re.compile(rb'"traceEvents"\s{0,%d}:\s{0,%d}\[' % (MAX_INDENT, MAX_INDENT))
_MATCH_SPAN = 2 * MAX_INDENT + 16  # longer than any match of either pattern
_MAX_HEAD = 64 << 20


def decode_stream(
    blocks: Iterable[bytes],
    *,
    workers: int = 1,
    plain_file: str | None = None,
    piece_bytes: int | None = None,
    on_position=None,
    piece_target: int | None = None,
) -> RawColumns:
    """Decode a trace from text blocks; raise NotStreamable when the layout does not allow it.

    With ``workers`` > 1 a forked helper process shares the decoding of the pieces with this one (see
    :class:`Helper`); the pieces are reassembled in file order, so the result is the same as with one
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
            helper = Helper(plain_file, piece_bytes)
        except (OSError, MemoryError):  # no memory to map the ring or fork (ulimit -v): decode alone
            helper = None
    try:
        return _decode_stream(blocks, helper, on_position, piece_target)
    finally:
        if helper is not None:
            helper.stop()


def _decode_stream(
    blocks: Iterable[bytes], helper: "Helper | None", on_position=None, piece_target: int | None = None
) -> RawColumns:
    it = iter(blocks)
    header_text, array_form, total_in, buf = _read_head(it)
    slots: list = []  # per piece in file order: an exported builder, or None for the helper's next result
    tail = _cut_pieces(it, buf, total_in, helper, slots, on_position, piece_target)
    return _assemble(tail, array_form, header_text, slots, helper)


def _read_head(it) -> tuple[bytes, bool, int, bytearray]:
    """Read blocks until the events array opens: (the document's text before ``"traceEvents"``, whether the
    document is a bare array, the bytes read, the text read from the byte before the first event on)."""
    buf = bytearray()
    head_end = -1
    array_form = False
    total_in = 0
    searched = 0  # no match of _KEY_RE starts before this
    for block in it:
        total_in += len(block)
        if not buf and not bytes(block[:1]).strip():  # whitespace before the document: dropped as it comes
            block = bytes(block).lstrip()
        buf += block
        start = text_head(buf)
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
    return header_text, array_form, total_in, buf


def _cut_pieces(
    it, buf: bytearray, total_in: int, helper: "Helper | None", slots: list, on_position, piece_target: int | None
) -> bytes:
    """Cut the rest of the text (``buf``, then the blocks of ``it``) into pieces of whole events, each decoded
    here or handed to the helper (a slot in ``slots`` apiece); return the text after the last event separator."""
    from .. import reader

    # From here the text gathers in one buffer of fixed size, reused for every piece (fresh memory for each
    # piece would cost a page fault per 4 KiB): acc[:n] is the text not yet cut, acc[0] the byte before its
    # first event. A piece is cut at the last event separator once about `target` bytes have gathered.
    target = piece_target or reader.READ_BLOCK
    limit = target + target // 4 if helper is None else min(target + target // 4, helper.slot_bytes - 2)
    n = len(buf)
    acc = bytearray(max(target + target // 4 + 2, 2 * n))
    acc[:n] = buf
    buf.clear()  # the head's text is in acc now (and the caller's name for it holds nothing)
    sep: bytes | None = None
    lo = 0  # no separator starts before acc[lo] (the search for the next one resumes there: linear in the text)
    for block in itertools.chain((b"",), it):  # the empty first round looks at what the head left
        size = len(block)
        if size:
            total_in += size
            if n + size > len(acc):  # one event bigger than the buffer: grow it, into a new one (pieces.let_go)
                acc = acc + bytes(n + size + len(acc) // 2 - len(acc))
            acc[n : n + size] = block
            n += size
        if sep is None:
            m = SEP_RE.search(acc, lo, n)
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
                return cut_plain_file(helper.fd, helper.submit_range, sep, total_in - n, slots, on_position)
        while n >= target:  # (several pieces when a block is bigger than a piece)
            rest = _cut_piece(acc, n, sep, helper, slots, limit, lo)
            if rest == n:
                lo = max(0, n - len(sep) + 1)  # none up to here: the next search starts at the new text
                break
            n, lo = rest, 0
    while sep is not None:  # the text before the last separator of the input
        rest = _cut_piece(acc, n, sep, helper, slots, limit, lo)
        if rest == n:
            break
        n, lo = rest, 0
    return bytes(acc[1:n])  # acc[0] is the byte before the next event ("[" or whitespace)


def _assemble(tail: bytes, array_form: bool, header_text: bytes, slots: list, helper: "Helper | None") -> RawColumns:
    """Decode the last events and the document's end (``tail``) and its head, and merge every piece's columns in
    file order (the helper's as it hands them over) into the trace's raw columns."""
    try:
        if array_form:
            last = ARRAY_DECODER.decode(b"[" + tail)
            trailer: dict[str, Any] = {}
        else:
            doc = DOC_DECODER.decode(b'{"traceEvents": [' + tail)
            last = doc.traceEvents or []
            trailer = {k: getattr(doc, k) for k in HEADER_KEYS}
        head_doc = DOC_DECODER.decode(header_text + b'"traceEvents": []}') if header_text else None
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


def _cut_piece(
    acc: bytearray, n: int, sep: bytes, helper: "Helper | None", slots: list, limit: int, lo: int = 0
) -> int:
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
        slots.append(decode_piece(acc, k))
    cut = k + len(sep) - 2  # keep the byte before the next '{': it becomes the next '['
    acc[: n - cut] = acc[cut:n]
    return n - cut
