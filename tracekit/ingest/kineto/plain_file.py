"""An uncompressed file cut into pieces where it lies: a few KiB are read around each cut point, and each
piece's text is read from the file by the process that decodes it (see :class:`~.helper.Helper`)."""

from __future__ import annotations

import os
from collections.abc import Callable

from .pieces import NotStreamable


def cut_plain_file(
    fd: int, submit_range: Callable[[int, int], None], sep: bytes, pos: int, slots: list, on_position=None
) -> bytes:
    """Publish the pieces of the plain file open as ``fd`` from ``pos`` (the offset of the byte before the next
    event) through ``submit_range(offset, length)`` (the helper's), each about one reader block, cut at the last
    event separator before the block's end; return the text after the last separator of the file (the last
    event and the document's end), as the streaming loop would."""
    from .. import reader

    size = os.fstat(fd).st_size
    block = reader.READ_BLOCK
    while True:
        k = _rfind_in_file(fd, sep, pos + 1, min(pos + block, size)) if pos + block < size else -1
        if k < 0:  # a block without a separator (one huge event), or the end of the file is near
            k = _find_in_file(fd, sep, pos + block, size) if pos + block < size else -1
            if k < 0:
                k = _rfind_in_file(fd, sep, pos + 1, size)
                if k < 0:
                    break
                slots.append(None)
                submit_range(pos + 1, k - pos)
                pos = k + len(sep) - 2
                break
        slots.append(None)
        submit_range(pos + 1, k - pos)  # the text from after buf[0] through the '}' of the separator
        pos = k + len(sep) - 2  # the byte before the next '{'
        if on_position is not None:
            on_position(pos)
    if on_position is not None:
        on_position(size)
    return os.pread(fd, size - pos - 1, pos + 1)


_PROBE = 1 << 16


def _rfind_in_file(fd: int, sep: bytes, lo: int, hi: int) -> int:
    """Offset of the last ``sep`` that lies wholly in [lo, hi) of the file, or -1 (reads backwards)."""
    end = hi
    while end - lo >= len(sep):
        start = max(lo, end - _PROBE)
        k = os.pread(fd, end - start, start).rfind(sep)
        if k >= 0:
            return start + k
        if start == lo:
            return -1
        end = start + len(sep) - 1  # a separator across the window's start is found in the next window
    return -1


def _find_in_file(fd: int, sep: bytes, lo: int, hi: int) -> int:
    """Offset of the first ``sep`` that starts at or after ``lo`` and ends by ``hi``, or -1."""
    start = lo
    while hi - start >= len(sep):
        end = min(hi, start + _PROBE)
        k = os.pread(fd, end - start, start).find(sep)
        if k >= 0:
            return start + k
        if end == hi:
            return -1
        start = end - len(sep) + 1
    return -1


def pread_into(fd: int, view: memoryview, offset: int) -> None:
    """Fill ``view`` with the file's bytes from ``offset`` (``preadv`` reads straight into it)."""
    got, n = 0, len(view)
    while got < n:
        if hasattr(os, "preadv"):
            r = os.preadv(fd, [view[got:]], offset + got)
        else:  # pragma: no cover - platforms without preadv
            data = os.pread(fd, n - got, offset + got)
            view[got : got + len(data)] = data
            r = len(data)
        if r == 0:
            raise NotStreamable(f"the file ends before byte {offset + n}")
        got += r
