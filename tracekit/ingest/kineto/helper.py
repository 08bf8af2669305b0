"""The decode helper: a forked process that shares the decoding of the stream's pieces with this one.

The pieces' text (or, for a plain file, their offsets) travels through a ring of memory slots shared with
the helper, and its results come back pickled into the same slots; see :class:`Helper`.
"""

from __future__ import annotations

import mmap
import os
import pickle
import struct
from typing import Any

import numpy as np

from .pieces import NotStreamable, decode_text
from .plain_file import pread_into

_REPLY = struct.Struct("<qqq")  # (piece index, status, payload length)
_OK, _OK_IN_SLOT, _FAILED = 0, 1, 2
_RING = 4  # pieces handed over and not yet decoded, at most (each has a shared memory slot for its text)
# the shared control block: int64 words
_PUBLISHED, _TAKEN, _STOP = 0, 1, 2
_DESC = 8  # descriptors (offset or slot start, length) of the ring's pieces start at this word


class Helper:
    """A forked process that shares the decoding of pieces with this one.

    Pieces go into a ring of :data:`_RING` entries in memory shared with the helper (anonymous shared
    mappings made before the fork): an uncompressed file's pieces as (offset, length), which the helper
    reads from the file itself; decompressed text copied into the piece's slot. Whoever is free takes the
    oldest piece not yet taken (a counter under a lock, a semaphore counting the pieces waiting), so this
    process decodes whenever the ring is full, and at the end of the input it takes every piece the
    helper has not started: neither side waits on a queue the other filled. The helper pickles each
    piece's columns into the piece's slot (the pipe only says which piece, and carries a result too big
    for the slot), so it never waits for this process to read; a collector thread unpickles them and
    files them by piece index, which frees the ring entry.
    """

    def __init__(self, plain_file: str | None = None, piece_bytes: int | None = None) -> None:
        import multiprocessing as mp
        import threading

        from .. import reader

        ctx = mp.get_context("fork")
        self.plain_file = plain_file
        self.slot_bytes = piece_bytes or (reader.READ_BLOCK + reader.READ_BLOCK // 4 + 2)
        self.shm = mmap.mmap(-1, _RING * self.slot_bytes)  # the pieces' text (compressed input) and results
        self.ctl_map = mmap.mmap(-1, 8 * (_DESC + 2 * _RING))
        self.ctl = np.frombuffer(self.ctl_map, dtype=np.int64)
        self.lock = ctx.Lock()
        self.waiting = ctx.Semaphore(0)  # pieces published and not yet taken (plus one to stop)
        self._res_r, res_w = os.pipe()
        _grow_pipe(res_w)
        self.fd = os.open(plain_file, os.O_RDONLY) if plain_file is not None else None
        self._scratch = bytearray()
        self.proc = ctx.Process(
            target=_helper_main, name="tracekit-decode", daemon=True, args=(self, res_w, os.getpid())
        )
        try:
            self.proc.start()
        finally:
            os.close(res_w)
        self.published = 0
        self.helper_pieces = 0  # pieces the helper decoded (for tests and benchmarks)
        self.done: dict[int, Any] = {}  # piece index -> its exported columns (decoded here or by the helper)
        self._error: str | None = None
        self._fatal: BaseException | None = None  # a MemoryError of the collector thread, raised by the waiter
        self._gone = False
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._collect, daemon=True, name="tracekit-collect")
        self._thread.start()

    # ---- this process ------------------------------------------------------------------------

    def can_take(self, k: int) -> bool:
        """Whether the piece buf[1:k+1] can go into the ring (a piece too big for a slot is decoded here)."""
        return k + 2 <= self.slot_bytes

    def submit_range(self, offset: int, length: int) -> None:
        """Publish the plain file's bytes [offset, offset + length) as the next piece."""
        self._free_entry()
        self._publish((offset, length))

    def submit(self, buf: bytearray, k: int) -> None:
        """Publish buf[1:k+1] (whole events of decompressed text) as the next piece, copied into its slot."""
        at = self._free_entry() * self.slot_bytes
        buf[0] = 91  # '[' over the byte before the first '{'
        buf[k + 1] = 93  # ']' over the ',' after the last complete event
        self.shm[at : at + k + 2] = memoryview(buf)[: k + 2]
        self._publish((at, k + 2))

    def _free_entry(self) -> int:
        """The ring entry of the next piece, once free: decodes waiting pieces here while the ring is full."""
        i = self.published
        done = self.done
        while i >= _RING and (i - _RING) not in done:  # the entry still holds piece i - _RING
            if not self._take_one():
                self._wait_until(lambda: (i - _RING) in done)
        return i % _RING

    def _publish(self, desc: tuple[int, int]) -> None:
        i = self.published
        entry = i % _RING
        self.ctl[_DESC + 2 * entry : _DESC + 2 * entry + 2] = desc
        self.published = i + 1
        self.ctl[_PUBLISHED] = i + 1
        self.waiting.release()

    def results(self) -> list:
        """Every piece's columns in order: decodes what the helper has not started, waits for the rest."""
        while self._take_one():
            pass
        self._wait_until(lambda: len(self.done) >= self.published)
        self.stop()
        if self._fatal is not None:
            raise MemoryError from None
        if self._error is not None:
            raise NotStreamable(self._error)
        return [self.done.pop(i) for i in range(self.published)]

    def _take_one(self) -> bool:
        if not self.waiting.acquire(False):
            return False
        j = self._claim()
        if j < 0:
            return False
        a, length = (int(x) for x in self.ctl[_DESC + 2 * (j % _RING) : _DESC + 2 * (j % _RING) + 2])
        if self.fd is not None and len(self._scratch) < length + 2:
            self._scratch = bytearray(length + 2 + (length >> 3))  # reused: fresh pages cost a fault each
        self.done[j] = decode_text_at(a, length, self.shm, self.fd, self._scratch)
        return True

    def _claim(self) -> int:
        if not self.lock.acquire(timeout=30):  # only a helper killed inside its few locked lines holds it
            raise NotStreamable("the decode helper process holds its lock")
        try:
            j = int(self.ctl[_TAKEN])
            if j >= self.ctl[_PUBLISHED]:
                return -1
            self.ctl[_TAKEN] = j + 1
            return j
        finally:
            self.lock.release()

    def _wait_until(self, ready) -> None:
        """Wait for the helper's results until ``ready()``; checked under the collector's lock, so a result
        that lands between the caller's own check and this wait is not missed."""
        with self._cond:
            while not ready():
                if self._fatal is not None:
                    raise MemoryError from None
                if self._error is not None:
                    raise NotStreamable(self._error)
                if self._gone or not self.proc.is_alive():
                    if ready():
                        break
                    raise NotStreamable(f"the decode helper process ended early (exit code {self.proc.exitcode})")
                self._cond.wait(1.0)
        if self._fatal is not None:
            raise MemoryError from None
        if self._error is not None:
            raise NotStreamable(self._error)

    def _collect(self) -> None:
        _quiet_dealloc(True)
        try:
            self._collect_results()
        except BaseException as exc:  # noqa: BLE001 - out of memory, say: the waiting thread raises it, never a traceback here
            with self._cond:
                self._fatal = exc if isinstance(exc, MemoryError) else None
                self._error = (
                    self._error or f"the results of the decode helper process were lost ({type(exc).__name__})"
                )
                self._gone = True
                self._cond.notify_all()
        finally:
            _quiet_dealloc(False)

    def _collect_results(self) -> None:
        fd = self._res_r
        while True:
            head = _read_exact(fd, _REPLY.size)
            payload = None
            if head is not None:
                j, status, length = _REPLY.unpack(head)
                payload = _read_exact(fd, length) if length and status != _OK_IN_SLOT else bytearray()
            with self._cond:
                if payload is None:
                    self._gone = True
                    self._cond.notify_all()
                    return
                if status != _FAILED:
                    self.helper_pieces += 1
                if status == _OK_IN_SLOT:
                    at = (j % _RING) * self.slot_bytes
                    with memoryview(self.shm) as view, view[at : at + length] as data:
                        self.done[j] = pickle.loads(data)
                elif status == _OK:
                    self.done[j] = pickle.loads(payload)
                else:
                    self._error = bytes(payload).decode("utf-8", "replace")
                    if self._error.startswith("MemoryError"):  # the whole-document reader would need more
                        self._fatal = MemoryError()
                self._cond.notify_all()
            del payload

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.ctl[_STOP] = 1
        self.waiting.release()  # wakes the helper if it waits for a piece
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self._thread.join(timeout=5)
        for fd in (self._res_r, self.fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        del self.ctl
        for m in (self.shm, self.ctl_map):
            if m is not None:
                try:
                    m.close()
                except BufferError:  # a view is still alive somewhere: the mapping goes with it
                    pass

    # ---- the helper process ------------------------------------------------------------------

    def _next(self, parent: int) -> int:
        """The next piece for the helper to decode, or -1 to stop (asked to, or the parent is gone)."""
        while True:
            if self.waiting.acquire(timeout=1.0):
                if self.ctl[_STOP]:
                    return -1
                j = self._claim()
                if j >= 0:
                    return j
            elif os.getppid() != parent or self.ctl[_STOP]:
                return -1


_DEALLOC_NOISE = "deallocated bytearray object has exported buffers"
_quiet = {"depth": 0, "previous": None}


def _quiet_dealloc(on: bool) -> None:
    """While results are unpickled, drop the one line CPython prints (through ``sys.excepthook``, not as an
    exception) when an unpickle runs out of memory: numpy's error path leaves a buffer export on a bytearray
    it frees, which prints "SystemError: deallocated bytearray object has exported buffers". The MemoryError
    itself reaches the caller; only that line is dropped, every other hook call passes through."""
    import sys

    if on:
        _quiet["depth"] += 1
        if _quiet["depth"] == 1:
            previous = _quiet["previous"] = sys.excepthook

            def hook(kind, value, tb):
                if not (kind is SystemError and str(value) == _DEALLOC_NOISE):
                    previous(kind, value, tb)

            sys.excepthook = hook
    else:
        _quiet["depth"] -= 1
        if _quiet["depth"] == 0 and _quiet["previous"] is not None:
            if getattr(sys.excepthook, "__qualname__", "") == "_quiet_dealloc.<locals>.hook":
                sys.excepthook = _quiet["previous"]
            _quiet["previous"] = None


def decode_text_at(a: int, length: int, shm, fd: int | None, scratch: bytearray | None = None) -> dict[str, Any]:
    """Decode one ring piece: (offset, length) of the plain file, or (slot start, length) in ``shm``."""
    if fd is not None:
        buf = scratch if scratch is not None and len(scratch) >= length + 2 else bytearray(length + 2)
        view = memoryview(buf)
        try:
            pread_into(fd, view[1 : 1 + length], a)
            buf[0] = 91
            buf[length + 1] = 93
            with view[: length + 2] as text:
                return decode_text(text)
        finally:
            view.release()
    with memoryview(shm) as view, view[a : a + length] as text:
        return decode_text(text)


def _helper_main(helper: Helper, res_w: int, parent: int) -> None:
    """The helper process: decode pieces until told to stop. Whatever goes wrong here (no memory for a piece
    under ``ulimit -v``, an interrupt) ends the process quietly, never with a traceback: the parent sees it gone
    and decodes, or reports, itself."""
    try:
        _helper_loop(helper, res_w, parent)
    except BaseException:  # noqa: BLE001
        os._exit(1)


def _helper_loop(helper: Helper, res_w: int, parent: int) -> None:
    os.close(helper._res_r)  # so that the pipe reports end-of-file to the parent when this process goes
    fd = os.open(helper.plain_file, os.O_RDONLY) if helper.plain_file is not None else None
    scratch = bytearray(helper.slot_bytes if fd is not None else 0)
    try:
        while True:
            j = helper._next(parent)
            if j < 0:
                break
            e = _DESC + 2 * (j % _RING)
            a, length = int(helper.ctl[e]), int(helper.ctl[e + 1])
            payload = None
            try:
                if fd is not None and len(scratch) < length + 2:
                    scratch = bytearray(length + 2 + (length >> 3))
                columns = decode_text_at(a, length, helper.shm if fd is None else None, fd, scratch)
                # pickled straight into the piece's slot (its text is no longer needed there); a result too
                # big for the slot goes through the pipe
                slot = _SlotFile(helper.shm, (j % _RING) * helper.slot_bytes, helper.slot_bytes)
                try:
                    pickle.Pickler(slot, protocol=pickle.HIGHEST_PROTOCOL).dump(columns)
                    status, size = _OK_IN_SLOT, slot.pos - slot.start
                except _SlotFull:
                    payload = pickle.dumps(columns, protocol=pickle.HIGHEST_PROTOCOL)
                    status, size = _OK, len(payload)
                del columns
            except Exception as exc:  # reported to the parent, which falls back to the safe path
                payload = f"{type(exc).__name__}: {exc}".encode()
                status, size = _FAILED, len(payload)
            _write_all(res_w, _REPLY.pack(j, status, size))
            if payload is not None:
                _write_all(res_w, payload)
            del payload
    except OSError:
        pass  # the parent closed its end: nothing left to report to
    finally:
        os.close(res_w)
        if fd is not None:
            os.close(fd)


class _SlotFull(Exception):
    pass


class _SlotFile:
    """A write-only file over ``size`` bytes of a shared mapping from ``start`` (for ``pickle.Pickler``)."""

    def __init__(self, mapping, start: int, size: int) -> None:
        self.mapping, self.start, self.end, self.pos = mapping, start, start + size, start

    def write(self, data) -> int:
        with memoryview(data) as view:
            n = view.nbytes
            if self.pos + n > self.end:
                raise _SlotFull
            self.mapping[self.pos : self.pos + n] = view.cast("B") if view.ndim != 1 or view.format != "B" else view
        self.pos += n
        return n


def _grow_pipe(fd: int) -> None:
    """Make the pipe hold 1 MiB (Linux; elsewhere the default), so replies move in few system calls."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


def _read_exact(fd: int, n: int) -> bytearray | None:
    """Read exactly ``n`` bytes from ``fd`` into one buffer; ``None`` at end of file."""
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    try:
        while got < n:
            r = os.readv(fd, [view[got:]])
            if r == 0:
                return None
            got += r
    finally:
        view.release()
    return out


def _write_all(fd: int, data) -> None:
    view = memoryview(data).cast("B")
    try:
        while view:
            view = view[os.write(fd, view) :]
    finally:
        view.release()
