"""How a file is compressed, and the byte-order mark, decided in one place for every reader (traces, launch logs,
benchmark files, the CLI's progress bar). Standard library only, so the CLI may import it at start-up."""
from __future__ import annotations

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
    return data[len(BOM):] if data[:len(BOM)] == BOM else data
