"""Bytes in: open a trace file (plain, gzip, zstd), decompress, and salvage truncated input.

Everything here is about getting the longest trustworthy JSON text out of a file. Losses are
reported, never hidden: a cut gzip stream or a JSON document that ends mid-event yields the
complete part plus a warning that says how many bytes were lost.
"""
from __future__ import annotations

import queue
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_READ_BLOCK = 8 << 20


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
    while True:
        block = fh.read(_READ_BLOCK)
        if not block:
            break
        while block:
            try:
                out += dec.decompress(block)
                fed = True
            except zlib.error as exc:
                warnings.append(
                    f"{path}: the gzip stream is corrupt after about {consumed} of {size} compressed bytes"
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


def _read_zstd(path: Path, fh, size: int) -> RawText:
    import zstandard

    out = bytearray()
    warnings: list[str] = []
    dobj = zstandard.ZstdDecompressor().decompressobj()
    try:
        while True:
            block = fh.read(_READ_BLOCK)
            if not block:
                break
            out += dobj.decompress(block)
    except zstandard.ZstdError as exc:
        warnings.append(f"{path}: the zstd stream is corrupt ({exc}); kept the {len(out)} bytes decompressed before it")
        return RawText(out, "zstd", size, warnings, stream_truncated=True)
    if not dobj.eof:
        warnings.append(f"{path}: the zstd stream ends early; kept the {len(out)} bytes that decompressed")
        return RawText(out, "zstd", size, warnings, stream_truncated=True)
    return RawText(out, "zstd", size, warnings)


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
    prev2 = b"  "
    best = -1
    best_depth = -1
    latest: dict[int, tuple[int, int]] = {}  # level -> (position, char) of the latest opener so far
    at_best: dict[int, tuple[int, int]] = {}  # the same, as it stood at the best cut point
    for off in range(0, n, _SCAN_BLOCK):
        chunk = bytes(view[off : off + _SCAN_BLOCK])
        b = np.frombuffer(chunk, dtype=np.uint8)
        ext = np.frombuffer(prev2 + chunk, dtype=np.uint8)
        q = b == 34
        q &= ~((ext[1:-1] == 92) & (ext[:-2] != 92))  # an escaped quote is not a quote
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
        prev2 = (prev2 + chunk[-2:])[-2:]
    if best < 0:
        return None
    closers = b""
    for level in range(best_depth, 0, -1):
        if level not in at_best:
            return None
        closers += _OPEN_TO_CLOSE[at_best[level][1]]
    return bytes(view[: best + 1]) + closers, n - (best + 1)


class StreamDamaged(Exception):
    """The compressed stream is corrupt or cut: the caller falls back to the salvaging reader."""


def iter_blocks(path: Path, block: int = _READ_BLOCK) -> Iterator[bytes]:
    """Yield the decompressed text of ``path`` in blocks; raise StreamDamaged on a bad stream."""
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(0)
        if head.startswith(GZIP_MAGIC):
            dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
            fed = False
            while True:
                data = fh.read(block // 4)
                if not data:
                    break
                while data:
                    try:
                        out = dec.decompress(data, block)  # at most one block of text per call
                    except zlib.error as exc:
                        raise StreamDamaged(str(exc)) from exc
                    fed = True
                    if out:
                        yield out
                    if dec.eof:
                        rest = dec.unused_data
                        dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
                        fed = False
                        data = rest if rest.strip(b"\x00") else b""
                    else:
                        data = dec.unconsumed_tail
            if fed and not dec.eof:
                raise StreamDamaged("the gzip stream ends early")
        elif head.startswith(ZSTD_MAGIC):
            import zstandard

            dobj = zstandard.ZstdDecompressor().decompressobj()
            try:
                while True:
                    data = fh.read(block // 4)
                    if not data:
                        break
                    out = dobj.decompress(data)
                    for i in range(0, len(out), block):
                        yield out[i : i + block]
            except zstandard.ZstdError as exc:
                raise StreamDamaged(str(exc)) from exc
            if not dobj.eof:
                raise StreamDamaged("the zstd stream ends early")
        else:
            while True:
                data = fh.read(block)
                if not data:
                    break
                yield data


def prefetch(blocks: Iterator[bytes], depth: int = 2) -> Iterator[bytes]:
    """Run ``blocks`` in a background thread (zlib and file reads release the GIL), ``depth`` ahead."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def work() -> None:
        try:
            for b in blocks:
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
