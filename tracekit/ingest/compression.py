"""How a file is compressed, and the byte-order mark, decided in one place for every reader (traces, launch logs,
benchmark files, the CLI's progress bar); and how much text a compressed trace may decompress to (the bound both
trace readers apply). Standard library only, so the CLI may import it at start-up."""

from __future__ import annotations

import os

from ..errors import ResourceLimitError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark (Windows editors write one)
HEAD_BYTES = 4  # enough of a file's start for compression_of


def compression_of(head: bytes) -> str:
    """``"gzip"``, ``"zstd"`` or ``"none"`` from the first bytes of a file (at least :data:`HEAD_BYTES`)."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return "none"


def is_compressed(head: bytes) -> bool:
    return compression_of(head) != "none"


def without_bom(data: bytes) -> bytes:
    """``data`` without a leading UTF-8 byte-order mark."""
    return data[len(BOM) :] if data[: len(BOM)] == BOM else data


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
            f" {_max_ratio():g} (0 for no limit) and run again"
        )
