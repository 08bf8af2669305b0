"""Bytes in: open a trace file (plain, gzip, zstd), decompress, and salvage truncated input.

Everything here is about getting the longest trustworthy JSON text out of a file. Losses are
reported, never hidden: a cut gzip stream or a JSON document that ends mid-event yields the
complete part plus a warning that says how many bytes were lost.
"""
from __future__ import annotations

import collections
import os
import queue
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError, ResourceLimitError

from .compression import GZIP_MAGIC, ZSTD_MAGIC  # noqa: F401 (the magic bytes' home; re-exported for callers)
_READ_BLOCK = 8 << 20
READ_BLOCK = _READ_BLOCK  # text block of the streaming reader (tests lower it to get many pieces)
_GZIP_FEED = 64 << 10  # compressed bytes per zlib call of the whole-document reader: at most ~66 MB of text

# Decompression is bounded: a compressed file may hold at most MAX_RATIO times its size in text (or MIN_TEXT_LIMIT,
# whichever is more). Profiler traces are 8-20x as gzip (the corpus: 7.5-20.5x) and ~35x as zstd -19; 0.5 MB of
# gzip (or 20 KB of zstd) can hold 512 MiB of whitespace, which would be read, held and scanned in full.
MAX_RATIO = 200
MIN_TEXT_LIMIT = 64 << 20
RATIO_ENV = "TRACEKIT_MAX_RATIO"


def text_limit(size: int) -> int | None:
    """Most bytes of text a compressed file of ``size`` bytes may decompress to, or None for no limit
    (``TRACEKIT_MAX_RATIO=0``). ``TRACEKIT_MAX_RATIO=N`` sets the ratio."""
    ratio = _max_ratio()
    return None if ratio <= 0 else max(MIN_TEXT_LIMIT, int(ratio * size))


def _max_ratio() -> float:
    env = os.environ.get(RATIO_ENV, "").strip()
    if not env:
        return MAX_RATIO
    try:
        return float(env)
    except ValueError:
        return MAX_RATIO


def check_text_limit(path, text_bytes: int, size: int, limit: int | None) -> None:
    """Raise ResourceLimitError when ``text_bytes`` of text from a ``size``-byte compressed file exceed ``limit``."""
    if limit is not None and text_bytes > limit:
        raise ResourceLimitError(
            f"{path} decompresses to more than {limit / 1e6:,.0f} MB of text from {size:,} bytes (over"
            f" {text_bytes / max(size, 1):,.0f}x; profiler traces are 8-40x), so it is refused as a likely"
            f" decompression bomb; if it really is a trace, set {RATIO_ENV} to a higher ratio than"
            f" {_max_ratio():g} (0 for no limit) and run again")


@dataclass
class RawText:
    """Decompressed text of one trace file and what was lost getting it."""

    data: bytes | bytearray
    compression: str  # "none", "gzip" or "zstd"
    file_bytes: int
    warnings: list[str] = field(default_factory=list)
    stream_truncated: bool = False


def read_text(path: Path) -> RawText:
    """Read and decompress ``path``; a damaged compressed stream keeps what decoded cleanly."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(4)
            fh.seek(0)
            if head.startswith(GZIP_MAGIC):
                return _read_gzip(path, fh, size)
            if head.startswith(ZSTD_MAGIC):
                return _read_zstd(path, fh, size)
            if path.suffix in (".gz", ".zst") and size:
                raise InputError(
                    f"{path} is named {path.suffix} but is not {'gzip' if path.suffix == '.gz' else 'zstd'}"
                    " data; check that the file is a complete torch-profiler trace"
                )
            return RawText(fh.read(), "none", size)
    except OSError as exc:
        raise InputError(f"{path} could not be read ({exc.strerror or exc}); check the path and permissions") from exc


def _read_gzip(path: Path, fh, size: int) -> RawText:
    out = bytearray()
    warnings: list[str] = []
    truncated = False
    dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
    fed = False  # whether the current gzip member has received any input
    consumed = 0
    limit = text_limit(size)
    while True:
        # small feeds: deflate reaches ~1030x, so one zlib call makes at most ~66 MB of text before the check
        check_text_limit(path, len(out), size, limit)
        block = fh.read(_GZIP_FEED)
        if not block:
            break
        while block:
            saved = dec.copy()
            try:
                out += dec.decompress(block)
                fed = True
            except zlib.error as exc:
                # zlib drops the whole call's output on an error: decode the block again, finely, to keep
                # every byte that came before the damage (a bad CRC damages nothing before it)
                at = consumed + _decompress_until_error(saved, block, out)
                if "incorrect data check" in str(exc) or "incorrect length check" in str(exc):
                    warnings.append(
                        f"{path}: the gzip checksum does not match the decompressed text ({exc}), so the text is"
                        f" damaged somewhere and values read from it may be wrong; kept all {len(out)} bytes"
                    )
                else:
                    warnings.append(
                        f"{path}: the gzip stream is corrupt after about {at} of {size} compressed bytes"
                        f" ({exc}); kept the {len(out)} bytes decompressed before it"
                    )
                return RawText(out, "gzip", size, warnings, stream_truncated=True)
            consumed += len(block) - len(dec.unused_data)
            if dec.eof:
                rest = dec.unused_data
                dec = zlib.decompressobj(16 + zlib.MAX_WBITS)  # concatenated gzip members
                fed = False
                block = rest if rest.strip(b"\x00") else b""
            else:
                block = b""
    check_text_limit(path, len(out), size, limit)
    if fed and not dec.eof:
        try:
            out += dec.flush()
        except zlib.error:
            pass
        truncated = True
        warnings.append(
            f"{path}: the gzip stream ends early (the file was cut at {size} bytes); kept the"
            f" {len(out)} bytes that decompressed"
        )
    return RawText(out, "gzip", size, warnings, stream_truncated=truncated)


def _decompress_until_error(dec, block: bytes, out: bytearray, piece: int = 4096) -> int:
    """Feed ``block`` to ``dec`` piece by piece, then byte by byte inside the failing piece, appending
    what decompresses to ``out``; return how many bytes of ``block`` went in before the error."""
    pos = 0
    while pos < len(block):
        saved = dec.copy()
        try:
            out += dec.decompress(block[pos : pos + piece])
        except zlib.error:
            dec = saved
            for i in range(pos, min(pos + piece, len(block))):
                try:
                    out += dec.decompress(block[i : i + 1])
                except zlib.error:
                    return i
            return min(pos + piece, len(block))
        if dec.eof:  # the member ended inside this block: what follows is the next member's concern
            return pos + piece - len(dec.unused_data)
        pos += piece
    return pos


class _StreamCut(Exception):
    """A compressed stream ends before its end marker."""


class _ZstdDamage(Exception):
    """A zstd stream failed to decode in the input that starts at file offset ``at``."""

    def __init__(self, at: int, error: Exception) -> None:
        super().__init__(str(error))
        self.at = at


def _zstd_chunks(fh, piece_at) -> Iterator[bytes]:
    """Decompressed text of a zstd file, frame after frame (pzstd and ``cat a.zst b.zst`` write several).

    ``piece_at(offset)`` is how many compressed bytes to feed at that file offset. Raises
    :class:`_ZstdDamage` on a corrupt stream and :class:`_StreamCut` when it ends mid-frame."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    dobj = dctx.decompressobj()
    meter = _ZstdMeter()
    fed = False
    pos = fh.tell()
    while True:
        data = fh.read(piece_at(pos))
        if not data:
            break
        at = pos
        pos += len(data)
        while data:
            # a call returns all the text its input decodes to: feed at most _ZstdMeter.BLOCKS blocks at a time
            k = meter.cut(data)
            part = data if k >= len(data) else data[:k]
            try:
                out = dobj.decompress(part)
            except zstandard.ZstdError as exc:
                raise _ZstdDamage(at, exc) from exc
            fed = True
            if out:
                yield out
            if dobj.eof:
                rest = dobj.unused_data + data[len(part):]
                dobj = dctx.decompressobj()  # the next frame, if any
                fed = False
                at = pos - len(rest)
                data = rest if rest.strip(b"\x00") else b""
            else:
                at += len(part)
                data = data[len(part):]
    if fed:
        raise _StreamCut


class _ZstdMeter:
    """Follows the frame and block headers of a zstd stream to say how much of the next input to feed so that
    one decompress call decodes at most :attr:`BLOCKS` blocks. A zstd block holds at most 128 KiB of text, but
    one byte (an RLE block) can stand for all of it, so an unmetered 64 KiB of input can be gigabytes of text
    in one call; metered, a call makes at most 4 MiB. Where the stream is not what the format says (garbage,
    padding) it stops counting and lets everything through: the decoder reports that damage itself."""

    BLOCKS = 32
    _MAGIC, _SKIP_LEN, _FHD, _BLOCK, _LOST = range(5)

    def __init__(self) -> None:
        self.state = self._MAGIC
        self.head = b""  # bytes of the header being read (a header may span two inputs)
        self.skip = 0  # bytes to pass before the next header
        self.after = self._MAGIC  # the state after the bytes skipped
        self.checksum = False

    def cut(self, data) -> int:
        """How many leading bytes of ``data`` to feed next (at least one; up to the end of a frame at most);
        the meter moves past them."""
        n, i, blocks = len(data), 0, 0
        while i < n:
            if self.state == self._LOST:
                return n
            if self.skip:
                step = min(self.skip, n - i)
                i += step
                self.skip -= step
                if not self.skip:
                    self.state = self.after
                    if self.state == self._MAGIC:
                        return i  # a frame ends here: the decoder's next frame starts with the next input
                continue
            if self.state == self._BLOCK and not self.head:
                if blocks == self.BLOCKS:
                    return i
                blocks += 1
                if i + 3 <= n:  # the usual case, a whole block header here: read it and skip its block at once
                    h = data[i] | data[i + 1] << 8 | data[i + 2] << 16
                    i += 3
                    kind = (h >> 1) & 3
                    if kind == 3:
                        self.state = self._LOST
                        continue
                    last = h & 1
                    body = (1 if kind == 1 else h >> 3) + (4 if last and self.checksum else 0)
                    if not last and i + body < n:
                        i += body
                        continue
                    self._pass(body, self._MAGIC if last else self._BLOCK)
                    continue
            want = (4, 4, 1, 3)[self.state]
            take = min(want - len(self.head), n - i)
            self.head += bytes(data[i : i + take])
            i += take
            if len(self.head) == want:
                head, self.head = self.head, b""
                self._header(head)
                if self.state == self._MAGIC and not self.skip:
                    return i  # a frame ended with this header
        return n

    def _header(self, head: bytes) -> None:
        if self.state == self._MAGIC:
            if head == ZSTD_MAGIC:
                self.state = self._FHD
            elif head[0] & 0xF0 == 0x50 and head[1:] == b"\x2a\x4d\x18":  # a skippable frame
                self.state = self._SKIP_LEN
            else:
                self.state = self._LOST
        elif self.state == self._SKIP_LEN:
            self._pass(int.from_bytes(head, "little"), self._MAGIC)
        elif self.state == self._FHD:
            d = head[0]
            single, dict_flag, fcs_flag = (d >> 5) & 1, d & 3, d >> 6
            self.checksum = bool((d >> 2) & 1)
            self._pass((0 if single else 1) + (0, 1, 2, 4)[dict_flag] + ((1 if single else 0), 2, 4, 8)[fcs_flag],
                       self._BLOCK)
        else:  # a block header: last block (1 bit), type (2 bits), size (21 bits)
            h = int.from_bytes(head, "little")
            last, kind, size = h & 1, (h >> 1) & 3, h >> 3
            if kind == 3:
                self.state = self._LOST
                return
            after = (self._MAGIC if last else self._BLOCK)
            self._pass((1 if kind == 1 else size) + (4 if last and self.checksum else 0), after)

    def _pass(self, count: int, after: int) -> None:
        self.state, self.after, self.skip = after, after, count


def _read_zstd(path: Path, fh, size: int) -> RawText:
    # A failed call loses its whole output, so on damage decode again with finer pieces from where the
    # failing piece began (2 MiB, then 4 KiB, then single bytes): all text before the damage is kept.
    fine: list[int] = []  # file offsets from which the pieces shrink, one per retry
    while True:
        out = bytearray()
        fh.seek(0)

        def piece_at(pos: int) -> int:
            return (_READ_BLOCK // 4, 4096, 1)[sum(pos >= f for f in fine)]

        limit = text_limit(size)
        try:
            for chunk in _zstd_chunks(fh, piece_at):
                out += chunk
                check_text_limit(path, len(out), size, limit)
        except _ZstdDamage as exc:
            if len(fine) < 2:
                fine.append(exc.at)
                continue
            return RawText(out, "zstd", size, [f"{path}: the zstd stream is corrupt after about {exc.at} of {size}"
                                               f" compressed bytes ({exc}); kept the {len(out)} bytes decompressed"
                                               " before it"], stream_truncated=True)
        except _StreamCut:
            return RawText(out, "zstd", size, [f"{path}: the zstd stream ends early; kept the {len(out)} bytes that"
                                               " decompressed"], stream_truncated=True)
        return RawText(out, "zstd", size)


_SCAN_BLOCK = 8 << 20
_OPEN_TO_CLOSE = {ord("{"): b"}", ord("["): b"]"}


def salvage_json(data: bytes | bytearray) -> tuple[bytes, int] | None:
    """Cut a truncated JSON document after its last complete element and close it.

    The cut is made after the last complete element of the top-level array (Chrome array form,
    nesting depth 1) or after the last complete value at depth 2 or less of a top-level object
    (Kineto form: an event of ``traceEvents``, or a whole top-level value). Returns
    ``(repaired_text, bytes_lost)`` or ``None`` when no cut point exists. The scan is vectorised
    in blocks of 8 MiB and ignores brackets inside strings.
    """
    view = memoryview(data)
    n = len(view)
    stripped = bytes(view[:64]).lstrip()
    if not stripped[:1] in (b"{", b"["):
        return None
    max_depth = 1 if stripped[:1] == b"[" else 2
    depth_carry = 0
    parity_carry = 0
    bs_carry = 0
    best = -1
    best_depth = -1
    latest: dict[int, tuple[int, int]] = {}  # level -> (position, char) of the latest opener so far
    at_best: dict[int, tuple[int, int]] = {}  # the same, as it stood at the best cut point
    for off in range(0, n, _SCAN_BLOCK):
        chunk = bytes(view[off : off + _SCAN_BLOCK])
        b = np.frombuffer(chunk, dtype=np.uint8)
        q, bs_carry = _unescaped_quotes(b, chunk, bs_carry)
        par = (np.cumsum(q, dtype=np.int64) + parity_carry) & 1
        # An opening quote has parity 1 and a closing one 0; a bracket is never a quote, so a
        # bracket is structural exactly when the parity at its position is 0.
        outside = par == 0
        is_open = ((b == 123) | (b == 91)) & outside
        is_close = ((b == 125) | (b == 93)) & outside
        depth = np.cumsum(is_open.astype(np.int32) - is_close.astype(np.int32), dtype=np.int64) + depth_carry
        cand = np.flatnonzero(is_close & (depth <= max_depth) & (depth >= 1))
        block_openers = {lvl: np.flatnonzero(is_open & (depth == lvl)) for lvl in range(1, max_depth + 1)}
        if cand.size:
            p = int(cand[-1])
            best, best_depth = off + p, int(depth[p])
            at_best = dict(latest)
            for lvl, pos in block_openers.items():
                before = pos[pos < p]
                if before.size:
                    at_best[lvl] = (off + int(before[-1]), int(b[before[-1]]))
        for lvl, pos in block_openers.items():
            if pos.size:
                latest[lvl] = (off + int(pos[-1]), int(b[pos[-1]]))
        if depth.size:
            depth_carry, parity_carry = int(depth[-1]), int(par[-1])
    if best < 0:
        return None
    closers = b""
    for level in range(best_depth, 0, -1):
        if level not in at_best:
            return None
        closers += _OPEN_TO_CLOSE[at_best[level][1]]
    return bytes(view[: best + 1]) + closers, n - (best + 1)


def _unescaped_quotes(b: np.ndarray, chunk: bytes, bs_carry: int) -> tuple[np.ndarray, int]:
    """Mask of the quotes in a block that end or start a string: those not escaped by an odd run of
    backslashes (``\\"`` ends a string, ``\\\"`` does not). ``bs_carry`` is the run of backslashes that
    ended the previous block; returns the mask and this block's trailing run."""
    q = b == 34
    pos = np.flatnonzero(q)
    if pos.size:
        after_bs = np.zeros(pos.size, dtype=bool)
        inner = pos > 0
        after_bs[inner] = b[pos[inner] - 1] == 92
        after_bs[~inner] = bs_carry > 0
        for p in pos[after_bs].tolist():  # rare: quotes right after a backslash
            i = p - 1
            while i >= 0 and chunk[i] == 92:
                i -= 1
            if (p - 1 - i + (bs_carry if i < 0 else 0)) % 2:
                q[p] = False
    trailing = len(chunk) - len(chunk.rstrip(b"\\"))
    return q, trailing + (bs_carry if trailing == len(chunk) else 0)


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
        report = (lambda: on_read(fh.tell())) if on_read else (lambda: None)
        head = fh.read(4)
        fh.seek(0)
        size = os.fstat(fh.fileno()).st_size
        limit = text_limit(size) if head.startswith((GZIP_MAGIC, ZSTD_MAGIC)) else None
        total = 0
        if limit is not None:  # decompressed text is bounded (see MAX_RATIO): counted at each block
            def report():
                nonlocal total
                total += got
                check_text_limit(path, total, size, limit)
                if on_read is not None:
                    on_read(fh.tell())
        got = 0
        gz_into, gz_errors = _gzip_readinto(fh) if pool and head.startswith(GZIP_MAGIC) else (None, ())
        if gz_into is not None:
            views = [memoryview(bytearray(block)) for _ in range(pool)]
            i = 0
            while True:
                try:
                    got = gz_into.readinto(views[i])
                except gz_errors as exc:
                    raise StreamDamaged(str(exc)) from exc
                if not got:
                    break
                report()
                yield views[i][:got]
                i = (i + 1) % pool
        elif head.startswith(GZIP_MAGIC):
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
                        got = len(out)
                        report()
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
        elif head.startswith(ZSTD_MAGIC):
            # zstd hands out everything one input piece decodes to: feed small pieces, and cut an output
            # that is still much bigger than a block (very repetitive text) into blocks
            try:
                for out in _zstd_chunks(fh, lambda pos: max(block // 16, 1 << 14)):
                    got = len(out)
                    report()
                    if len(out) <= 2 * block:
                        yield out
                    else:
                        for i in range(0, len(out), block):
                            yield out[i : i + block]
            except _ZstdDamage as exc:
                raise StreamDamaged(str(exc)) from exc
            except _StreamCut:
                raise StreamDamaged("the zstd stream ends early") from None
        else:
            while True:
                data = fh.read(block)
                if not data:
                    break
                report()
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


_NONFINITE_RE = re.compile(rb"(?<![\w.+-])(-?Infinity|NaN)(?![\w.])")
_NONFINITE_AS = {b"NaN": b"1e999", b"Infinity": b"1e999", b"-Infinity": b"-1e999"}


def replace_nonfinite(data: bytes | bytearray) -> tuple[bytes, int] | None:
    """Rewrite the bare ``NaN`` / ``Infinity`` / ``-Infinity`` tokens that Python's ``json`` writes (and JSON
    forbids) as ``±1e999``, which decodes as a non-finite number; tokens inside strings are left alone.

    Returns ``(text, replacements)``, or ``None`` when there is no such token outside a string."""
    matches = list(_NONFINITE_RE.finditer(data))
    if not matches:
        return None
    starts = np.array([m.start() for m in matches], dtype=np.int64)
    outside = _outside_strings(data, starts)
    if not outside.any():
        return None
    pieces: list[bytes] = []
    prev = 0
    for m, out in zip(matches, outside.tolist()):
        if out:
            pieces += [bytes(data[prev : m.start()]), _NONFINITE_AS[m.group(0)]]
            prev = m.end()
    pieces.append(bytes(data[prev:]))
    return b"".join(pieces), int(outside.sum())


def _outside_strings(data: bytes | bytearray, positions: np.ndarray) -> np.ndarray:
    """For sorted byte positions, whether each lies outside every JSON string (quote parity, in blocks)."""
    view = memoryview(data)
    result = np.zeros(len(positions), dtype=bool)
    parity_carry = 0
    bs_carry = 0
    for off in range(0, len(view), _SCAN_BLOCK):
        chunk = bytes(view[off : off + _SCAN_BLOCK])
        b = np.frombuffer(chunk, dtype=np.uint8)
        q, bs_carry = _unescaped_quotes(b, chunk, bs_carry)
        par = (np.cumsum(q, dtype=np.int64) + parity_carry) & 1  # parity after each byte
        sel = np.flatnonzero((positions >= off) & (positions < off + len(chunk)))
        if sel.size:
            local = positions[sel] - off
            # parity before the byte: after the previous one (a token starts with N, I or -, never a quote)
            before = np.where(local > 0, par[np.maximum(local - 1, 0)], parity_carry)
            result[sel] = before == 0
        parity_carry = int(par[-1]) if par.size else parity_carry
    return result


_SURROGATE_RE = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")


def replace_lone_surrogates(data: bytes | bytearray) -> tuple[bytes, int] | None:
    """Rewrite ``\\uD800``-style escapes that are not half of a surrogate pair (Python's ``json`` writes them
    for undecodable bytes; msgspec rejects them) as ``\\uFFFD``. Returns ``(text, replacements)`` or None."""
    found = [m for m in _SURROGATE_RE.finditer(data) if len(m.group(1)) % 2 == 1]  # an even run is literal text
    lone = []
    i = 0
    while i < len(found):
        m = found[i]
        if int(m.group(2), 16) < 0xDC00 and i + 1 < len(found):
            n = found[i + 1]
            if n.start() == m.end() and len(n.group(1)) == 1 and int(n.group(2), 16) >= 0xDC00:
                i += 2  # a high surrogate followed by a low one: a valid pair
                continue
        lone.append(m)
        i += 1
    if not lone:
        return None
    pieces: list[bytes] = []
    prev = 0
    for m in lone:
        at = m.start(2) - 2  # the escape's own backslash
        pieces += [bytes(data[prev:at]), b"\\ufffd"]
        prev = m.end()
    pieces.append(bytes(data[prev:]))
    return b"".join(pieces), len(lone)
