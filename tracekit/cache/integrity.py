"""Every cache entry's seal: a CRC-32 of all its bytes in a trailer of its own, checked on every read.

A trace entry (``tracekit.cache.trace_entries``) and a result entry (``tracekit.cache.result_entries``) end in
:data:`TRAILER_SIZE` bytes: ``TAG`` (16 bytes), the CRC-32 of every byte before the trailer as 8 hex digits, and
the number of those bytes (8 bytes, little-endian). A reader checks the seal before it parses anything, so a
flipped bit anywhere in an entry — its data, its metadata, the key, the trailer itself — is found before a value
is served; the entry is then removed with one warning (:func:`dropped`) and the command computes the answer anew.

Why CRC-32 and not a cryptographic hash: the seal is against damage (a bad disk, a bad DIMM, a cut copy, a stray
write), not against a person who can write the cache folder — they could recompute any unkeyed hash too, and what
keeps their entry from running code is the result entries' format (no pickle), not the seal. CRC-32 finds every
single-bit flip, every burst of up to 32 bits and every odd number of flipped bits, and misses random damage with a
chance of 2^-32; ISA-L computes it at ~7 GB/s on the benchmark machine, blake2b at ~1 GB/s (benchmarks/README.md,
"Checksummed caches"), which would have tripled a cached trace's re-open. It is the function the cache's key uses
for the source file (``tracekit.cache.keys``): ISA-L's when installed, zlib's otherwise, the same numbers either way.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .keys import _crc, _checksum

TAG = b"\nTRACEKIT-CRC32:"
TRAILER_SIZE = len(TAG) + 8 + 8


class Damaged(ValueError):
    """An entry whose bytes are not the ones its writer sealed (a sentence saying what does not agree)."""


def trailer(data) -> bytes:
    """The seal of ``data`` (any buffer): TAG, its CRC-32 as 8 hex digits, its length."""
    return TAG + b"%08x" % _crc(data) + len(data).to_bytes(8, "little")


def seal_file(path: str | os.PathLike) -> None:
    """Append the seal of the file's whole content to it (the file is a temporary one, renamed into place later)."""
    fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        crc = _checksum(fd, size, True)
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, TAG + b"%08x" % crc + size.to_bytes(8, "little"))
    finally:
        os.close(fd)


def is_sealed(view) -> bool:
    """Whether ``view`` (a buffer of a whole entry) ends in a trailer's tag, damaged or not."""
    n = len(view)
    return n >= TRAILER_SIZE and bytes(view[n - TRAILER_SIZE : n - 16]) == TAG


def sealed_length(view) -> int:
    """How many bytes of ``view`` the seal covers (those before the trailer), once they agree with it; Damaged when
    they do not (or when ``view`` has no trailer)."""
    with memoryview(view) as v:  # slices of it are views, not copies; released even when Damaged is raised
        return _checked_length(v)


def _checked_length(view: memoryview) -> int:
    n = len(view)
    if not is_sealed(view):
        raise Damaged("it has no checksum trailer")
    tail = bytes(view[n - 16 :])
    length = int.from_bytes(tail[8:], "little")
    if length != n - TRAILER_SIZE:
        raise Damaged(f"it holds {n - TRAILER_SIZE} bytes, its trailer says {length}")
    # compared as the bytes written, not as a number: " 0abc123" or "0ABC123" parse as the same number
    if tail[:8] != b"%08x" % _crc(view[:length]):
        raise Damaged("its checksum does not match its bytes")
    return length


def dropped(logger: logging.Logger, path: Path, why: Exception, then: str) -> None:
    """One warning for a damaged entry, which is removed (``then``: what the command does instead)."""
    try:
        os.unlink(path)
    except OSError:
        pass  # a read-only cache: the entry stays, the write that follows replaces it or warns
    logger.warning("the cache entry %s is damaged (%s): it was removed and %s", path, why, then)
