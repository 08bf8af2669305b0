"""Writing output files whole or not at all, and the one rule of where an output may go.

Every file tracekit writes (``-o`` json/csv/md/table files, csv folders, parquet exports, ``analyze -o``, annotated
traces, plots) goes through here (a directory of files through :class:`tracekit.render.outdir.OutputDir`, which
uses the same rule and the same temporary names):

* it is written to a hidden temporary name beside its target (``.NAME.tmp-PID-XXXXXX``, a name no trace search
  matches), flushed to disk, and renamed into place — a reader sees the old file or the new one, never a part (the
  temporary names, the flush and the held signals below are :mod:`tracekit.cache.tempfiles`, the cache's too);
* a failure (full disk, read-only file system, no permission, a directory where a file should be) removes the
  temporary file and is one sentence, :class:`OutputError`, exit 3; an interrupt (Ctrl-C) removes it too;
* an output **file** needs an existing folder: tracekit creates no folder for it (a typo in ``-o`` is an error, not
  a new folder); an output **directory** (``export -o``, ``analyze -o``, ``-f csv -o NAME`` without a suffix) is
  created with its parents when missing — the commands' help says so;
* several files that belong together (a page and its JSON sidecar) are renamed into place together, with
  SIGINT/SIGTERM/SIGHUP held back (:func:`held_signals`), so an interrupt leaves all of them or none;
* one function decides where an output goes (:func:`output_target`), for every writer: an output that is one of
  the run's inputs (every file a command reads: trace, annotation, hardware file, categories, steps file, log, bench
  file; symlinks followed) is refused before anything is written; a symbolic link is written through (its target
  is replaced, never the link); a character device, a FIFO or ``/dev/stdout`` is written to directly, never
  renamed over. A sweep skips tracekit's own outputs, so ``analyze DIR -o DIR`` does not read its
  ``analyze.json`` as a trace next time (``tracekit.ingest.discover``).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Union

from ..cache.tempfiles import held_signals, remove_quietly, signals_raise, temp_path, write_synced
from ..errors import OutputError, TracekitError  # noqa: F401 - OutputError is re-exported here
from ..result import Result

Data = Union[bytes, str, Callable[[BinaryIO], None]]


# --------------------------------------------------------------------------- sentences


def _errno(exc: OSError) -> int | None:
    if exc.errno is not None:
        return exc.errno
    m = re.search(r"\[errno (\d+)\]", str(exc), re.I)  # pyarrow's IO errors carry it in the text
    return int(m.group(1)) if m else None


def os_error_sentence(exc: OSError, path: Path, what: str) -> str:
    e = _errno(exc)
    if e in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return (
            f"no space left on the device for {path}: no {what} was written, and whatever was there before is"
            " unchanged; free some space or choose another --out"
        )
    if e == errno.EROFS:
        return f"{path} is on a read-only file system, so the {what} cannot be written there; choose another --out"
    if e in (errno.EACCES, errno.EPERM):
        return f"{path} cannot be written (permission denied); choose another --out"
    if e == errno.EISDIR:
        return f"{path} is a directory; pass a file name for the {what}"
    if e == errno.ENOTDIR:
        return f"{path}: a part of this path is a file, not a folder; choose another --out"
    if e == errno.ENOENT and not path.parent.exists():
        return (
            f"the folder {path.parent} does not exist; create it first (tracekit creates no folder for an output file)"
        )
    if e == errno.ENAMETOOLONG:
        return f"{path}: the name is too long for the file system; choose a shorter --out"
    if e == errno.EIO:
        return (
            f"{path} cannot be written (an input/output error on its device): the {what} is incomplete or missing;"
            " check the device or choose another --out"
        )
    return f"{path} cannot be written ({exc.strerror or exc}); choose another --out"


def stdout_error(exc: OSError) -> OutputError:
    """Standard output could not be written (a full disk or ``/dev/full``, an input/output error): one sentence
    naming it and what it is (a file, a device), exit 3. A closed pipe is not one of these: the CLI ends quietly
    with exit 0 then, as ``head`` users expect."""
    e = _errno(exc)
    where = "standard output"
    try:
        st = os.fstat(sys.stdout.fileno())
        kind = "a file" if stat.S_ISREG(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) else "a pipe"
        link = os.readlink(f"/proc/self/fd/{sys.stdout.fileno()}") if os.path.exists("/proc/self/fd") else None
        where = f"standard output ({kind}{', ' + link if link and link.startswith('/') else ''})"
    except (OSError, ValueError, AttributeError):
        pass
    if e in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return OutputError(
            f"no space left on the device for {where}: the output is incomplete; free some space or write"
            " elsewhere (-o FILE on another disk)"
        )
    return OutputError(
        f"{where} cannot be written ({exc.strerror or exc}): the output is incomplete; write elsewhere (-o FILE)"
    )


# --------------------------------------------------------------------------- where an output goes: the one rule

# A path that names an open descriptor of this process: written to that descriptor, never opened anew or renamed over.
_FD_PATH = re.compile(r"^/(?:proc/(?P<pid>self|thread-self|\d+)/fd|dev/fd)/(?P<fd>\d+)$")
_STD_PATHS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}

# The run's inputs, while a command runs (:func:`guarding`): (st_dev, st_ino) -> (path, how the command names it).
_GUARD: dict[tuple[int, int], tuple[str, str]] = {}
_COMMAND: list[str] = []
_LAST_INPUTS: list[str] = []  # the inputs of the command guarded last: an error after it ended still names them


@dataclass(frozen=True)
class Target:
    """Where an output goes. ``path`` as given (messages name it); ``dest`` the file that is replaced: the path itself,
    or the final target of a symbolic link (written through, never replaced); ``stream`` for a character device, a
    FIFO, a socket or an open descriptor (``/dev/stdout``, ``/dev/fd/N``): written to directly, never renamed over."""

    path: Path
    dest: Path
    stream: bool = False
    fd: int | None = None


@contextmanager
def guarding(inputs: Iterable[tuple[str | Path, str]], command: str = "command") -> Iterator[None]:
    """While the block runs, an output that is one of ``inputs`` (``(path, how the command names it)``, symlinks
    followed, hard links included) is refused by :func:`output_target`, so no writer replaces a file the run reads."""
    saved, saved_cmd = dict(_GUARD), list(_COMMAND)
    _COMMAND[:] = [command]
    try:
        for p, role in inputs:
            protect(p, role)
        _LAST_INPUTS[:] = [p for p, _ in _GUARD.values()]
        yield
    finally:
        _GUARD.clear()
        _GUARD.update(saved)
        _COMMAND[:] = saved_cmd


def guarded_inputs() -> list[str]:
    """The files the running command reads (or the last guarded command read), as it names them
    (:func:`guarding`): error messages after it ended name them. :func:`forget_inputs` starts afresh."""
    return [p for p, _ in _GUARD.values()] or list(_LAST_INPUTS)


def forget_inputs() -> None:
    _LAST_INPUTS.clear()


def protect(path: str | Path, role: str = "an input") -> None:
    """Add ``path`` (a file the run reads) to the inputs no output may replace; directories are not files to guard."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    if not stat.S_ISDIR(st.st_mode):
        _GUARD.setdefault((st.st_dev, st.st_ino), (str(path), role))


def _fd_of(path: Path) -> int | None:
    """The descriptor a path such as ``/dev/stdout``, ``/dev/fd/3`` or ``/proc/self/fd/1`` (or a link to one) names."""
    p = os.path.abspath(path)
    for _ in range(40):
        if p in _STD_PATHS:
            return _STD_PATHS[p]
        m = _FD_PATH.match(p)
        if m and (m["pid"] is None or not m["pid"].isdigit() or int(m["pid"]) == os.getpid()):
            return int(m["fd"])
        try:
            link = os.readlink(p)
        except OSError:
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), link))
    return None


def is_stream(path: str | Path) -> bool:
    """A character device, a FIFO, a socket or an open descriptor (``/dev/stdout``): no file to rename, no companion
    beside it, no folder of csv files."""
    if _fd_of(Path(path)) is not None:
        return True
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode)


def output_target(
    path: str | Path, what: str = "output", *, inputs: Iterable[str | Path] = (), early: bool = False
) -> Target:
    """The one decision about an output path, made before anything is written; every writer calls it.

    * an output that is one of the run's inputs (:func:`guarding`, or ``inputs``), symlinks followed, is refused;
    * a character device, a FIFO, a socket, an open descriptor (``/dev/stdout``) is written to directly;
    * a symbolic link is written through: its target is replaced (atomically), never the link itself;
    * a directory, a missing folder, a read-only file, a link that loops are refused in one sentence.

    ``early`` (a command's ``--out`` before its work): only whether it is an input; the rest is decided when it is
    written (a directory writer creates its folder then)."""
    path = Path(path)
    fd = _fd_of(path)
    if fd is not None:
        return Target(path, path, stream=True, fd=fd)
    link = path.is_symlink()
    if link:
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OutputError(f"{path} is a symbolic link that loops; choose another --out") from None
        dest = Path(os.path.realpath(path))
    else:
        dest = path
    via = f" (a link to {dest})" if link else ""
    try:
        st = os.stat(dest)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(os_error_sentence(exc, path, what)) from None
    if early:
        if st is not None and stat.S_ISREG(st.st_mode):
            _refuse_input(path, via, st, inputs, what)
        return Target(
            path, dest, stream=st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)
        )
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(
                f"{path}{via} is a directory; pass a file name for the {what} (e.g. {path / 'out'}{_ext(what)})"
            )
        if not stat.S_ISREG(st.st_mode):
            return Target(path, dest, stream=True)
        _refuse_input(path, via, st, inputs, what)
        if not os.access(dest, os.W_OK):
            raise OutputError(f"{path}{via} is read-only; choose another --out or make it writable")
    parent = dest.parent
    if not parent.exists():
        raise OutputError(
            f"the folder {parent} does not exist{' (' + str(path) + ' links there)' if link else ''};"
            " create it first (tracekit creates no folder for an output file)"
        )
    if not parent.is_dir():
        raise OutputError(f"{parent} is a file, not a folder; choose another --out")
    return Target(path, dest)


def _refuse_input(path: Path, via: str, st: os.stat_result, inputs: Iterable[str | Path], what: str) -> None:
    key = (st.st_dev, st.st_ino)
    hit = _GUARD.get(key)
    if hit is None:
        for p in inputs:
            try:
                s = os.stat(p)
            except (OSError, ValueError):
                continue
            if (s.st_dev, s.st_ino) == key:
                hit = (str(p), "an input")
                break
    if hit is not None:
        command = _COMMAND[0] if _COMMAND else "command"
        named, role = hit
        same = "" if os.path.abspath(named) == os.path.abspath(path) else f", {named}"
        raise OutputError(
            f"{path}{via} is an input of this {command} ({role}{same}); writing the {what} there would"
            " replace it — choose another --out"
        )


def check_file_target(path: str | Path, what: str = "output") -> Path:
    """``path`` if a file can be written there (:func:`output_target`): not a directory, in an existing folder, not a
    read-only file, not an input of the run."""
    output_target(path, what)
    return Path(path)


def check_dir_target(path: str | Path, what: str = "output") -> Path:
    """``path`` if a directory of files can be written there: a directory (a link to one is followed) or nothing yet
    (created then). A file, a device or a link that loops is refused in one sentence — before the work, by commands
    whose ``--out`` is a folder."""
    path = Path(path)
    if _fd_of(path) is not None or (os.path.lexists(path) and not path.is_dir()):
        if path.is_symlink() and not path.exists():
            raise OutputError(f"{path} is a symbolic link to nothing; pass a directory for the {what}")
        raise OutputError(f"{path} exists and is not a directory; pass a directory for the {what}")
    return path


def _ext(what: str) -> str:
    fmt = what.split(" ")[0]
    return {"picture": ".png", "annotated": ".json.gz", "csv": ".csv", "md": ".md", "table": ".txt"}.get(fmt, ".json")


def _write_to(fh: BinaryIO, data: Data) -> None:
    if callable(data):
        data(fh)
    else:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def write_stream(t: Target, data: Data, what: str) -> None:
    """A device, FIFO or descriptor: written to directly (nothing to rename; a partial write cannot be taken back)."""
    try:
        if t.fd is not None:
            if t.fd in (1, 2):
                (sys.stdout if t.fd == 1 else sys.stderr).flush()
            fh = os.fdopen(os.dup(t.fd), "wb")
        else:
            fh = open(t.dest, "wb")
        with fh:
            _write_to(fh, data)
            fh.flush()
    except BrokenPipeError:
        raise  # the reader went away (-o /dev/stdout | head): the CLI ends quietly, exit 0
    except OSError as exc:
        raise OutputError(os_error_sentence(exc, t.path, what)) from None


def write_file(path: str | Path, data: Data, *, what: str = "output", inputs: Result | None = None) -> Path:
    """Write ``data`` (bytes, text as UTF-8, or a function that writes to a binary file) to ``path`` whole or not
    at all: a temporary name beside it (beside a link's target), flushed, then renamed into place. A device, FIFO or
    ``/dev/stdout`` is written to directly (:func:`output_target` decides)."""
    write_files([(path, data, what)], inputs=inputs)
    return Path(path)


def write_files(items: list[tuple[str | Path, Data, str]], *, inputs: Result | None = None) -> list[Path]:
    """Several files (a page and its companion) all or none: every target is decided, every temporary file written,
    and only then are they renamed into place (interrupts held back meanwhile); a refusal or a failure leaves none."""
    extra = _input_paths(inputs) if inputs is not None else []
    targets = [output_target(p, what, inputs=extra) for p, _, what in items]
    seen: dict[str, Path] = {}
    for t in targets:
        key = str(t.dest) if not t.stream else f"stream:{t.dest}:{t.fd}"
        if key in seen:
            raise OutputError(
                f"{seen[key]} and {t.path} are the same file; tracekit would write it twice — choose another --out"
            )
        seen[key] = t.path
    temps: list[Path | None] = []
    with signals_raise():  # SIGTERM/SIGHUP remove the temporary files too (the CLI's handler, or this one)
        _write_all(targets, items, temps)
    return [t.path for t in targets]


def _write_all(targets: list[Target], items: list[tuple[str | Path, Data, str]], temps: list[Path | None]) -> None:
    """Every temporary file written, then all renamed into place (signals held back); the temporaries removed
    whatever happens."""
    try:
        for t, (_, data, what) in zip(targets, items):
            if t.stream:
                temps.append(None)
                continue
            tmp = temp_path(t.dest)
            temps.append(tmp)
            try:
                write_synced(tmp, lambda fh, data=data: _write_to(fh, data))
            except OSError as exc:
                raise OutputError(os_error_sentence(exc, t.path, what)) from None
        with held_signals():
            for t, tmp, (_, data, what) in zip(targets, temps, items):
                if tmp is None:
                    write_stream(t, data, what)
                    continue
                try:
                    os.replace(tmp, t.dest)
                except OSError as exc:
                    raise OutputError(os_error_sentence(exc, t.path, what)) from None
    finally:
        for tmp in temps:
            if tmp is not None:
                remove_quietly(tmp)


def _input_paths(result: Result) -> list[Path]:
    out = []
    for i in result.inputs:
        p = i.get("path") if isinstance(i, dict) else None
        if p:
            out.append(Path(str(p)))
    return out


def refuse_overwriting_inputs(result: Result, path: Path) -> None:
    """An output never replaces a file the run read (:func:`output_target` with the result's inputs)."""
    path = Path(path)
    if path.is_dir():
        return
    output_target(path, f"{result.command} output", inputs=_input_paths(result))


def protect_result_inputs(result: Result) -> None:
    """Every file a result names as its input joins the guarded inputs of the running command."""
    for p in _input_paths(result):
        protect(p, "an input")
