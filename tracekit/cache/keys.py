"""Which cache entries are a source file's, and whether one is current: the key of the file, which the entry
stores and must agree on.

Entries live in ``$TRACEKIT_CACHE_DIR`` (default ``$XDG_CACHE_HOME/tracekit`` or ``~/.cache/tracekit``), named by
the source's name and a hash of its absolute path (:func:`entry_file`), so read-only trace folders work and trace
folders are not littered; a trace's entry (``NAME.<20 hex>.arrow``) and its commands' Results
(``NAME.<20 hex>.<command>.result``) share the name.

The key is the file's size, mtime, ctime and inode, tracekit's version and the cache format, and a CRC-32 of its
content: of every byte of a small file (or one changed a moment ago), else of blocks spread over all of it, a
change elsewhere being caught by ctime. The stat fields are compared first, the checksum only when they agree.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
import zlib
from pathlib import Path
from typing import Any

from .._version import __version__

# 3: the key holds a content fingerprint; 4: uncompressed Arrow IPC instead of lz4 parquet; 5: the key covers the
# whole file (ctime, inode, a CRC-32 of every byte, or of blocks spread over all of a big file); 6: the events table
# has the cpu_ops' recorded inputs (the `shapes` column); 7: every entry ends in a CRC-32 of its bytes, checked on
# every read (tracekit.cache.integrity), and a Result is stored as JSON and buffers, not a pickle; 8: the kernels'
# CUDA-graph ids (`graph_id`, `graph_node_id`); 9: custom, quick and symmetric-memory all-reduce kernels carry their
# collective and algorithm, NCCL symmetric kernels (ncclSymkDevKernel_) are communication (data/classes.json)
CACHE_FORMAT = 9

# the key's checksum: every byte of a file up to WHOLE_MAX (a .json.gz of ~1 GB of JSON), else the first and last
# 64 KiB and SAMPLES blocks of 4 KiB spread evenly over the file — then a change is caught by ctime, which every
# write and every utime() moves, and a file changed less than RACY_NS ago (when ctime may not yet have moved past
# the key's: the clock behind file times ticks in ms) is checksummed whole. docs/ingest.md has the costs.
WHOLE_MAX = 64 << 20
_END = 1 << 16
SAMPLES = 256
_BLOCK = 1 << 12
RACY_NS = 2_000_000_000
_READ = 4 << 20


def default_cache_dir() -> Path:
    env = os.environ.get("TRACEKIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tracekit"


def entry_file(source: Path, tail: str, cache_dir: Path | None = None) -> Path:
    """The cache file of ``source`` that ends with ``tail`` (``.arrow``, ``.report.result``): its name (60 characters
    at most) and a hash of its absolute path, in ``cache_dir`` (default :func:`default_cache_dir`)."""
    source = Path(source)
    digest = hashlib.sha1(os.fsencode(source.resolve())).hexdigest()[:20]  # any name: bytes, not str.encode()
    return (cache_dir or default_cache_dir()) / f"{source.name[:60]}.{digest}{tail}"


_crc32 = None


def _crc(data, value: int = 0) -> int:
    """CRC-32 of ``data`` continuing ``value``: ISA-L's (~8 GB/s) when installed, else zlib's (~1 GB/s); the same
    numbers either way."""
    global _crc32
    if _crc32 is None:
        try:
            from isal import isal_zlib

            _crc32 = isal_zlib.crc32
        except ImportError:
            _crc32 = zlib.crc32
    return _crc32(data, value)


def _racy(st: os.stat_result) -> bool:
    """Changed so recently (or dated in the future) that a further change may not move mtime or ctime."""
    return time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS


def pread(fd: int, n: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # no pread (Windows)
    return os.read(fd, n)


def _checksum(fd: int, size: int, whole: bool) -> int:
    crc = 0
    if whole:
        buf = bytearray(min(_READ, max(size, 1)))
        view = memoryview(buf)
        os.lseek(fd, 0, os.SEEK_SET)
        with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
            while True:
                n = fh.readinto(view)
                if not n:
                    break
                crc = _crc(view[:n], crc)
        return crc
    for offset, length in _samples(size):
        crc = _crc(pread(fd, length, offset), crc)
    return crc


def _samples(size: int) -> list[tuple[int, int]]:
    """(offset, length) of the blocks the checksum of a big file covers: both ends, and SAMPLES blocks between."""
    spots = [(0, _END), (max(0, size - _END), _END)]
    step = max(0, size - _BLOCK) / (SAMPLES - 1)
    spots += [(int(i * step), _BLOCK) for i in range(SAMPLES)]
    return spots


def key_of(source: Path, whole: bool | None = None) -> dict[str, Any]:
    """What the cached entry must agree on: size, mtime, ctime, inode, tracekit's version and format, and a CRC-32
    of the content — of every byte (``whole``), or of blocks spread over the file. ``whole=None`` decides: whole
    for a file up to WHOLE_MAX or one changed in the last RACY_NS. Raises OSError for anything but a regular file."""
    fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(source))
        if whole is None:
            whole = st.st_size <= WHOLE_MAX or _racy(st)
        crc = _checksum(fd, st.st_size, whole)
    finally:
        os.close(fd)
    return {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "ino": st.st_ino,
        "crc32": crc,
        "whole": whole,
        "version": __version__,
        "format": CACHE_FORMAT,
    }


def key(source: Path) -> dict[str, Any] | None:
    """The cache key of ``source`` now (take it before reading the file; :func:`write` compares)."""
    try:
        return key_of(source)
    except OSError:
        return None


def matches(stored: Any, source: Path) -> bool:
    """Whether the entry's key is ``source``'s now; the stat fields first, the checksum only when they agree."""
    if not isinstance(stored, dict) or stored.get("format") != CACHE_FORMAT or stored.get("version") != __version__:
        return False
    st = os.stat(source)
    if (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) != (
        stored.get("size"),
        stored.get("mtime_ns"),
        stored.get("ctime_ns"),
        stored.get("ino"),
    ):
        return False
    return key_of(source, whole=bool(stored.get("whole"))) == stored
