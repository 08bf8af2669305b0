"""Text in blocks: the streaming reader's side of a load (plain, gzip, zstd), read ahead in a thread.

The text of a trace file is handed out in blocks of at most :data:`TEXT_BLOCK` bytes, decompressed as it
is read (gzip by ISA-L where it is installed, into a few reused buffers) and counted against the bound
on decompressed text (``compression.MAX_RATIO``); a damaged stream raises :class:`StreamDamaged`, and the
caller falls back to the whole-document reader (``whole_text.py``), which keeps what decoded cleanly.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

from .compression import GZIP_MAGIC, ZSTD_MAGIC, check_text_limit, text_limit
from .zstd_frames import StreamCut, ZstdDamage, zstd_chunks

READ_BLOCK = 8 << 20  # text block of the streaming reader (tests lower it to get many pieces)


class StreamDamaged(Exception):
    """The compressed stream is corrupt or cut: the caller falls back to the salvaging reader."""


def _isal():
    """ISA-L's ``(igzip, isal_zlib)`` when gzip text is to be inflated with it, else None (zlib then).

    ISA-L (the ``isal`` package, a dependency with wheels for the common platforms) inflates Kineto JSON
    about 4x faster than zlib (benchmarks/README.md), which leaves more of two cores to decoding, and checks
    the CRC and length of every member as zlib does. ``TRACEKIT_INFLATE=zlib`` picks zlib (for benchmarks).
    The whole-document (salvage) reader always uses zlib, whose ``copy()`` it needs to keep every byte
    before a damage."""
    if os.environ.get("TRACEKIT_INFLATE", "").strip().lower() == "zlib":
        return None
    try:
        from isal import igzip, isal_zlib
    except ImportError:
        return None
    return igzip, isal_zlib


def _gzip_readinto(fh):
    """(A file object that inflates the gzip stream of ``fh`` with ISA-L into the caller's buffers
    (``readinto``: no memory allocated per block), the errors it raises), or (None, ()) where zlib is to be
    used. It reads concatenated members and skips zero padding, as the zlib path does; a damaged or cut
    stream raises."""
    isal = _isal()
    if isal is None:
        return None, ()
    igzip, isal_zlib = isal
    return igzip.IGzipFile(fileobj=fh, mode="rb"), (OSError, EOFError, ValueError, zlib.error, isal_zlib.error)


def _inflater():
    """``(decompressobj(wbits), errors)`` for the streaming gzip reader without reused buffers."""
    isal = _isal()
    if isal is not None:
        return isal[1].decompressobj, (isal[1].error, zlib.error)
    return zlib.decompressobj, (zlib.error,)


TEXT_BLOCK = 1 << 20  # bytes of text iter_blocks hands out at a time (at most READ_BLOCK)


PREFETCH_DEPTH = 8  # blocks read ahead by the background thread


def read_ahead(path: Path, on_read=None, *, inline: bool = False) -> Iterator[bytes]:
    """The decompressed text of ``path`` in blocks, as the streaming ingest reads it: read ahead in a
    background thread, or (``inline``) in the caller's thread. Blocks may be views of a few reused buffers,
    each valid until the next block has been taken: the consumer copies what it keeps.

    Inline is for a caller that decodes with the helper process: both cores are busy decoding then, and
    a reader thread only adds hand-offs and contention for the GIL (a cold .json.gz load 5% faster inline,
    paired medians of 10); alone, the thread inflates on the other core while the caller decodes."""
    if inline:
        return iter_blocks(path, on_read=on_read, pool=2)
    return prefetch(iter_blocks(path, on_read=on_read, pool=PREFETCH_DEPTH + 2), PREFETCH_DEPTH)


def iter_blocks(path: Path, block: int | None = None, on_read=None, pool: int = 0) -> Iterator[bytes]:
    """Yield the decompressed text of ``path`` in blocks of at most ``block`` bytes (default: TEXT_BLOCK, or
    READ_BLOCK where that is smaller); raise StreamDamaged on a bad stream.

    Blocks are small, and with ``pool`` a gzip file is inflated by ISA-L straight into ``pool`` buffers used
    in turn (the blocks are views of them, each overwritten ``pool`` blocks later): an inflater asked for
    8 MiB at a time builds its output in growing buffers and joins them, fresh memory every block (about
    1,100 page faults per 8 MiB, which cost more than the inflating itself).

    ``on_read(position)``, when given, is called with the file position after each block (progress)."""
    block = block or min(TEXT_BLOCK, READ_BLOCK)
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(0)
        report = _block_counter(path, fh, head, on_read)
        gz_into, gz_errors = _gzip_readinto(fh) if pool and head.startswith(GZIP_MAGIC) else (None, ())
        if gz_into is not None:
            yield from _pooled_gzip_blocks(gz_into, gz_errors, block, pool, report)
        elif head.startswith(GZIP_MAGIC):
            yield from _gzip_blocks(fh, block, report)
        elif head.startswith(ZSTD_MAGIC):
            yield from _zstd_blocks(fh, block, report)
        else:
            yield from _plain_blocks(fh, block, report)


def _block_counter(path: Path, fh, head: bytes, on_read):
    """The function each reader below calls with the bytes of text of every block it hands out: it counts them
    against the bound on a compressed file's text (see ``compression.MAX_RATIO``) and reports the file position
    to ``on_read``."""
    size = os.fstat(fh.fileno()).st_size
    limit = text_limit(size) if head.startswith((GZIP_MAGIC, ZSTD_MAGIC)) else None
    if limit is None:
        return (lambda got: on_read(fh.tell())) if on_read else (lambda got: None)
    total = 0

    def report(got: int) -> None:
        nonlocal total
        total += got
        check_text_limit(path, total, size, limit)
        if on_read is not None:
            on_read(fh.tell())

    return report


def _pooled_gzip_blocks(gz_into, gz_errors, block: int, pool: int, report) -> Iterator[bytes]:
    """gzip text inflated by ISA-L into ``pool`` reused buffers of ``block`` bytes, in turn."""
    views = [memoryview(bytearray(block)) for _ in range(pool)]
    i = 0
    while True:
        try:
            got = gz_into.readinto(views[i])
        except gz_errors as exc:
            raise StreamDamaged(str(exc)) from exc
        if not got:
            break
        report(got)
        yield views[i][:got]
        i = (i + 1) % pool


def _gzip_blocks(fh, block: int, report) -> Iterator[bytes]:
    """gzip text by an inflater object (zlib's, or ISA-L's), at most one block per call; concatenated members
    are read and zero padding between them skipped."""
    decompressobj, errors = _inflater()
    dec = decompressobj(16 + zlib.MAX_WBITS)
    fed = False
    while True:
        data = fh.read(max(block // 16, 1 << 14))  # about one block of text at Kineto's 10-20x
        if not data:
            break
        while data:
            try:
                out = dec.decompress(data, block)  # at most one block of text per call
            except errors as exc:
                raise StreamDamaged(str(exc)) from exc
            fed = True
            if out:
                report(len(out))
                yield out
            if dec.eof:
                rest = dec.unused_data
                dec = decompressobj(16 + zlib.MAX_WBITS)
                fed = False
                data = rest if rest.strip(b"\x00") else b""
            else:
                data = dec.unconsumed_tail
    if fed and not dec.eof:
        raise StreamDamaged("the gzip stream ends early")


def _zstd_blocks(fh, block: int, report) -> Iterator[bytes]:
    """zstd text. zstd hands out everything one input piece decodes to: feed small pieces, and cut an output
    that is still much bigger than a block (very repetitive text) into blocks."""
    try:
        for out in zstd_chunks(fh, lambda pos: max(block // 16, 1 << 14)):
            report(len(out))
            if len(out) <= 2 * block:
                yield out
            else:
                for i in range(0, len(out), block):
                    yield out[i : i + block]
    except ZstdDamage as exc:
        raise StreamDamaged(str(exc)) from exc
    except StreamCut:
        raise StreamDamaged("the zstd stream ends early") from None


def _plain_blocks(fh, block: int, report) -> Iterator[bytes]:
    """An uncompressed file's bytes, a block at a time."""
    while True:
        data = fh.read(block)
        if not data:
            break
        report(len(data))
        yield data


def prefetch(blocks: Iterator[bytes], depth: int = 8) -> Iterator[bytes]:
    """Run ``blocks`` in a background thread (zlib and file reads release the GIL), ``depth`` ahead.

    The thread also keeps a reference to its last ``depth + 2`` blocks, so that a block the consumer has
    done with is freed by the thread that allocated it: freed in another thread, malloc hands the memory
    back to the allocating thread's arena, which trims it, and every later block faults fresh pages (about
    30,000 faults on a 300 MB trace, measured; none this way)."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    keep: collections.deque = collections.deque(maxlen=depth + 2)

    def work() -> None:
        try:
            for b in blocks:
                keep.append(b)
                while not stop.is_set():
                    try:
                        q.put(("data", b), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(("end", None))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            q.put(("error", exc))

    t = threading.Thread(target=work, name="tracekit-read", daemon=True)
    t.start()
    try:
        while True:
            kind, item = q.get()
            if kind == "data":
                yield item
            elif kind == "end":
                return
            else:
                raise item
    finally:
        stop.set()
