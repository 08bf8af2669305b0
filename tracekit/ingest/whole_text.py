"""The whole-document reader: a trace file read and decompressed whole (plain, gzip, zstd).

Used where the streaming reader cannot go (salvage, a damaged stream, an odd layout). Everything here is
about getting the longest trustworthy JSON text out of a file; losses are reported, never hidden: a cut
gzip stream yields the complete part plus a warning that says how many bytes were lost.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from .compression import GZIP_MAGIC, ZSTD_MAGIC, check_text_limit, text_limit
from .zstd_frames import StreamCut, ZstdDamage, zstd_chunks

_GZIP_FEED = 64 << 10  # compressed bytes per zlib call: at most ~66 MB of text
_ZSTD_FEED = 2 << 20  # compressed bytes per zstd call, before any damage (a quarter of the streaming READ_BLOCK)


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


def _read_zstd(path: Path, fh, size: int) -> RawText:
    # A failed call loses its whole output, so on damage decode again with finer pieces from where the
    # failing piece began (2 MiB, then 4 KiB, then single bytes): all text before the damage is kept.
    fine: list[int] = []  # file offsets from which the pieces shrink, one per retry
    while True:
        out = bytearray()
        fh.seek(0)

        def piece_at(pos: int) -> int:
            return (_ZSTD_FEED, 4096, 1)[sum(pos >= f for f in fine)]

        limit = text_limit(size)
        try:
            for chunk in zstd_chunks(fh, piece_at):
                out += chunk
                check_text_limit(path, len(out), size, limit)
        except ZstdDamage as exc:
            if len(fine) < 2:
                fine.append(exc.at)
                continue
            return RawText(
                out,
                "zstd",
                size,
                [
                    f"{path}: the zstd stream is corrupt after about {exc.at} of {size}"
                    f" compressed bytes ({exc}); kept the {len(out)} bytes decompressed"
                    " before it"
                ],
                stream_truncated=True,
            )
        except StreamCut:
            return RawText(
                out,
                "zstd",
                size,
                [f"{path}: the zstd stream ends early; kept the {len(out)} bytes that decompressed"],
                stream_truncated=True,
            )
        return RawText(out, "zstd", size)
