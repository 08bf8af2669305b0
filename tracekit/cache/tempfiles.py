"""Files written whole or not at all: a temporary file beside the target, renamed into place; and the removal of
the temporary files that a killed writer left behind.

Every writer of tracekit that writes this way uses this module:

* the cache's entries (:mod:`tracekit.cache.trace_entries`, :mod:`tracekit.cache.result_entries`) through
  :func:`replaced`: a new temporary file ``.tmp-tracekit-PID-XXXXXXXX<suffix>`` in the cache folder, renamed over
  the entry, removed on failure and on SIGTERM/SIGHUP/SIGINT (:func:`signals_raise`); one left by a writer killed outright (SIGKILL, power
  loss) is removed once no write has touched it for :data:`STALE_TMP_S` (:func:`remove_stale_temporaries`; which
  ``.tmp-`` files are a writer's, :func:`is_temporary_of` tells from the name and the first bytes);
* output files (:mod:`tracekit.render.files`, :mod:`tracekit.render.outdir`): a hidden name beside the target
  (:func:`temp_path`, ``.NAME.tmp-PID-XXXXXX``, a name no trace search matches), flushed to disk
  (:func:`write_synced`), renamed into place together with the files that belong with it while SIGINT, SIGTERM and
  SIGHUP are held back (:func:`held_signals`), and removed quietly when anything fails or a signal ends the write
  (:func:`remove_quietly`, :func:`signals_raise`);
* the command line as a whole (:func:`terminating`): SIGTERM and SIGHUP raise :class:`Terminated` for the whole
  command, so every temporary file is removed and every worker process stopped before it exits (128 + the signal).
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import stat
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

STALE_TMP_S = 600  # a cache temporary file not modified for this long belongs to a process that was killed
CACHE_TMP_PREFIX = ".tmp-"  # every cache temporary file's name starts so (``.tmp-tracekit-PID-…`` now)
# the temporary names of temp_path, to find those a killed writer left behind
OUTPUT_TMP_NAME = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-[0-9a-f]{6}$")

_HELD = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None)
_TERMINATING = tuple(s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGHUP")) if s is not None)


def remove_quietly(p: Path | str) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


# --------------------------------------------------------------------------- a cache entry, replaced whole


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived where it is raised (:func:`signals_raise`, :func:`terminating`), so that the
    ``finally`` blocks that remove temporary files and stop worker processes run. A BaseException, as
    KeyboardInterrupt is: no ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame):  # noqa: ARG001
    raise Terminated(signum)


def _catch_termination(old: dict) -> None:
    """SIGTERM and SIGHUP (when they would kill the process outright, i.e. their handler is the default) raise
    :class:`Terminated`, as SIGINT raises KeyboardInterrupt. Only in the main thread, where Python runs signal
    handlers; ``old`` notes the handlers replaced."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in _TERMINATING:
        try:
            if signal.getsignal(s) == signal.SIG_DFL:
                old[s] = signal.signal(s, _raise_terminated)
        except (ValueError, OSError):
            pass


def _restore(old: dict) -> None:
    """Back to the handlers before (only those ``old`` notes were replaced)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s, h in old.items():
        try:
            if signal.getsignal(s) is _raise_terminated:
                signal.signal(s, h)
        except (ValueError, OSError):
            pass


@contextmanager
def terminating() -> Iterator[None]:
    """For a whole command (``tracekit.cli.run``): SIGTERM and SIGHUP raise :class:`Terminated` in the main thread
    while the block runs, so every ``finally`` (temporary files removed, worker processes stopped) runs before the
    process ends; the caller catches it and exits 128 + the signal's number."""
    old: dict = {}
    _catch_termination(old)
    try:
        yield
    finally:
        _restore(old)


@contextmanager
def signals_raise() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP that would kill the process outright raise :class:`Terminated`
    instead, so the block's ``finally`` (removing a temporary file) runs; then the signal acts as usual (the
    process ends as it would have). Where a handler was already set (the CLI's :func:`terminating`), nothing
    changes: its Terminated passes through."""
    old: dict = {}
    terminated = None
    try:
        _catch_termination(old)
        yield
    except Terminated as exc:
        if not old:
            raise
        terminated = exc.signum
    finally:
        _restore(old)
    if terminated is not None:
        signal.raise_signal(terminated)  # the default action now: the process ends as it would have
        raise SystemExit(128 + terminated)  # only if something else caught it meanwhile


@contextmanager
def replaced(path: Path, suffix: str) -> Iterator[str]:
    """A new, empty temporary file in ``path``'s folder (``.tmp-tracekit-PID-XXXXXXXX<suffix>``) for the block to
    write: renamed over ``path`` when the block ends, removed when it raises. SIGTERM and SIGHUP meanwhile remove
    it too, then act as usual (:func:`signals_raise`); SIGINT does, as KeyboardInterrupt."""
    with signals_raise():
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(
                prefix=f"{CACHE_TMP_PREFIX}tracekit-{os.getpid()}-", suffix=suffix, dir=path.parent
            )
            os.close(fd)
            yield tmp
            os.replace(tmp, path)
            tmp = None
        finally:
            if tmp:
                remove_quietly(tmp)


# --------------------------------------------------------------------------- what a killed writer left


def is_stale(st: os.stat_result) -> bool:
    return time.time() - st.st_mtime > STALE_TMP_S


def is_temporary_of(path: Path, st: os.stat_result, name: re.Pattern, heads: tuple[bytes, ...]) -> bool:
    """A temporary file of one writer: its ``name`` pattern, a regular file, and empty or starting with one of
    ``heads`` (as that writer's files start). Never follows a link, never waits on a FIFO."""
    if not (name.match(path.name) and stat.S_ISREG(st.st_mode)):
        return False
    if st.st_size == 0:
        return True
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
        try:
            head = os.read(fd, max(map(len, heads)))
        finally:
            os.close(fd)
    except OSError:
        return False
    return head.startswith(heads)


def remove_stale_temporaries(folder: Path, recognise: Callable[[Path, os.stat_result], bool]) -> int:
    """Remove the temporary files of writes killed before they could (SIGKILL, power loss): those not modified for
    STALE_TMP_S. A write in progress modifies its file all the time, so it is left alone. ``recognise(path, st)``
    says which ``.tmp-`` files are the writer's."""
    removed = 0
    try:
        it = os.scandir(folder)
    except OSError:
        return 0
    with it:
        for e in it:
            if not e.name.startswith(CACHE_TMP_PREFIX):
                continue
            try:
                st = e.stat(follow_symlinks=False)
                if recognise(Path(e.path), st) and is_stale(st):
                    os.unlink(e.path)
                    removed += 1
            except OSError:
                pass
    return removed


# --------------------------------------------------------------------------- output files, renamed together


def temp_path(path: Path) -> Path:
    """A hidden temporary name beside ``path`` (``.NAME.tmp-PID-XXXXXX``), for a file to be renamed into place."""
    return path.with_name(f".{path.name[:180]}.tmp-{os.getpid()}-{secrets.token_hex(3)}")


def write_synced(tmp: Path, write: Callable[[BinaryIO], None]) -> None:
    """Create ``tmp`` (never an existing file), ``write`` into it and flush it to disk before it is renamed."""
    with open(tmp, "xb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())


@contextmanager
def held_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait until the block is done (then they act as usual): for the renames that
    must all happen or none. In the main thread their handlers only take note meanwhile (any thread may receive a
    signal, so blocking it in one is not enough); elsewhere they are blocked in the calling thread."""
    if threading.current_thread() is not threading.main_thread():
        if not hasattr(signal, "pthread_sigmask") or not _HELD:
            yield
            return
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        return
    got: list[int] = []
    old = {}
    for s in _HELD:
        try:
            old[s] = signal.signal(s, lambda signum, frame: got.append(signum))
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for s in dict.fromkeys(got):
            signal.raise_signal(s)
