"""Writing outputs whole or not at all: single files, directories of files (exports), and their errors.

Every file tracekit writes (``-o`` json/csv/md/table files, csv folders, parquet exports, ``analyze -o``, annotated
traces, plots) goes through here:

* it is written to a hidden temporary name beside its target (``.NAME.tmp-PID-XXXXXX``, a name no trace search
  matches), flushed to disk, and renamed into place — a reader sees the old file or the new one, never a part;
* a failure (full disk, read-only file system, no permission, a directory where a file should be) removes the
  temporary file and is one sentence, :class:`OutputError`, exit 3; an interrupt (Ctrl-C) removes it too;
* an output **file** needs an existing folder: tracekit creates no folder for it (a typo in ``-o`` is an error, not
  a new folder); an output **directory** (``export -o``, ``analyze -o``, ``-f csv -o NAME`` without a suffix) is
  created with its parents when missing — the commands' help says so;
* a directory of files (:class:`OutputDir`) is locked while it is written (``.tracekit.lock``, an advisory
  ``flock``; a second writer is refused in one sentence), every file is staged under a temporary name first, and
  the renames into place — the manifest last — run with SIGINT/SIGTERM/SIGHUP held back, so an interrupt leaves
  the previous complete set or the new complete one. Files of the previous set that the new one lacks are removed
  after the new manifest is in place;
* one function decides where an output goes (:func:`output_target`), for every writer: an output that is one of
  the run's inputs (every file a command reads: trace, annotation, hardware file, categories, steps file, log, bench
  file; symlinks followed) is refused before anything is written; a symbolic link is written through (its target
  is replaced, never the link); a character device, a FIFO or ``/dev/stdout`` is written to directly, never
  renamed over. A sweep skips tracekit's own outputs, so ``analyze DIR -o DIR`` does not read its
  ``analyze.json`` as a trace next time (``tracekit.ingest.discover``).
"""
from __future__ import annotations

import errno
import json
import os
import re
import secrets
import signal
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Union

from ..errors import OutputError, TracekitError  # noqa: F401 - OutputError is re-exported here
from ..result import Result, to_json_obj

LOCK_NAME = ".tracekit.lock"
_TMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-[0-9a-f]{6}$")
_HELD = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None)

Data = Union[bytes, str, Callable[[BinaryIO], None]]




# --------------------------------------------------------------------------- sentences


def _errno(exc: OSError) -> int | None:
    if exc.errno is not None:
        return exc.errno
    m = re.search(r"\[errno (\d+)\]", str(exc), re.I)  # pyarrow's IO errors carry it in the text
    return int(m.group(1)) if m else None


def _sentence(exc: OSError, path: Path, what: str) -> str:
    e = _errno(exc)
    if e in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return (f"no space left on the device for {path}: no {what} was written, and whatever was there before is"
                " unchanged; free some space or choose another --out")
    if e == errno.EROFS:
        return f"{path} is on a read-only file system, so the {what} cannot be written there; choose another --out"
    if e in (errno.EACCES, errno.EPERM):
        return f"{path} cannot be written (permission denied); choose another --out"
    if e == errno.EISDIR:
        return f"{path} is a directory; pass a file name for the {what}"
    if e == errno.ENOTDIR:
        return f"{path}: a part of this path is a file, not a folder; choose another --out"
    if e == errno.ENOENT and not path.parent.exists():
        return f"the folder {path.parent} does not exist; create it first (tracekit creates no folder for an output file)"
    if e == errno.ENAMETOOLONG:
        return f"{path}: the name is too long for the file system; choose a shorter --out"
    return f"{path} cannot be written ({exc.strerror or exc}); choose another --out"


def _temp(path: Path) -> Path:
    return path.with_name(f".{path.name[:180]}.tmp-{os.getpid()}-{secrets.token_hex(3)}")


@contextmanager
def held_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait until the block is done (then they act as usual): for the renames that
    must all happen or none. In the main thread their handlers only take note meanwhile (any thread may receive a
    signal, so blocking it in one is not enough); elsewhere they are blocked in the calling thread."""
    import threading

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


def _unlink(p: Path) -> None:
    try:
        p.unlink()
    except OSError:
        pass


# --------------------------------------------------------------------------- where an output goes: the one rule

# A path that names an open descriptor of this process: written to that descriptor, never opened anew or renamed over.
_FD_PATH = re.compile(r"^/(?:proc/(?P<pid>self|thread-self|\d+)/fd|dev/fd)/(?P<fd>\d+)$")
_STD_PATHS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}

# The run's inputs, while a command runs (:func:`guarding`): (st_dev, st_ino) -> (path, how the command names it).
_GUARD: dict[tuple[int, int], tuple[str, str]] = {}
_COMMAND: list[str] = []


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
        yield
    finally:
        _GUARD.clear()
        _GUARD.update(saved)
        _COMMAND[:] = saved_cmd


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


def output_target(path: str | Path, what: str = "output", *, inputs: Iterable[str | Path] = (),
                  early: bool = False) -> Target:
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
        raise OutputError(_sentence(exc, path, what)) from None
    if early:
        if st is not None and stat.S_ISREG(st.st_mode):
            _refuse_input(path, via, st, inputs, what)
        return Target(path, dest, stream=st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode))
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{path}{via} is a directory; pass a file name for the {what} (e.g."
                              f" {path / 'out'}{_ext(what)})")
        if not stat.S_ISREG(st.st_mode):
            return Target(path, dest, stream=True)
        _refuse_input(path, via, st, inputs, what)
        if not os.access(dest, os.W_OK):
            raise OutputError(f"{path}{via} is read-only; choose another --out or make it writable")
    parent = dest.parent
    if not parent.exists():
        raise OutputError(f"the folder {parent} does not exist{' (' + str(path) + ' links there)' if link else ''};"
                          " create it first (tracekit creates no folder for an output file)")
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
        raise OutputError(f"{path}{via} is an input of this {command} ({role}{same}); writing the {what} there would"
                          " replace it — choose another --out")


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


def _write_stream(t: Target, data: Data, what: str) -> None:
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
    except OSError as exc:
        raise OutputError(_sentence(exc, t.path, what)) from None


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
            raise OutputError(f"{seen[key]} and {t.path} are the same file; tracekit would write it twice — choose"
                              " another --out")
        seen[key] = t.path
    temps: list[Path | None] = []
    try:
        for t, (_, data, what) in zip(targets, items):
            if t.stream:
                temps.append(None)
                continue
            tmp = _temp(t.dest)
            temps.append(tmp)
            try:
                with open(tmp, "xb") as fh:
                    _write_to(fh, data)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise OutputError(_sentence(exc, t.path, what)) from None
        with held_signals():
            for t, tmp, (_, data, what) in zip(targets, temps, items):
                if tmp is None:
                    _write_stream(t, data, what)
                    continue
                try:
                    os.replace(tmp, t.dest)
                except OSError as exc:
                    raise OutputError(_sentence(exc, t.path, what)) from None
    finally:
        for tmp in temps:
            if tmp is not None:
                _unlink(tmp)
    return [t.path for t in targets]


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


# --------------------------------------------------------------------------- a directory of files


class OutputDir:
    """A set of files written into one directory as a whole (see the module's docstring)::

        with OutputDir(out) as d:
            pq.write_table(t, d.stage("events.parquet"))
            d.stage_bytes("manifest.json", text)       # staged last, renamed last
            d.commit(remove=d.previous_files())
    """

    def __init__(self, path: str | Path, *, what: str = "export", manifest: str | None = "manifest.json") -> None:
        self.path = Path(path)
        self.what = what
        self.manifest = manifest
        self.created = False
        self._staged: list[tuple[str, Path]] = []
        self._targets: dict[str, Target] = {}
        self._lock_fd: int | None = None
        self._lock_created = False
        self._committed = False

    # -- entering: the directory exists and is ours

    def __enter__(self) -> OutputDir:
        p = check_dir_target(self.path, self.what)
        try:
            if not p.exists():
                p.mkdir(parents=True, exist_ok=True)
                self.created = True
            self._lock()
        except OSError as exc:
            self._discard()
            raise OutputError(_sentence(exc, p, self.what)) from None
        return self

    def _lock(self) -> None:
        self._lock_created = not os.path.lexists(self.path / LOCK_NAME)
        fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock, the temporary names still keep files whole
            self._lock_fd = fd
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(f"another tracekit is writing into {self.path} right now (it holds"
                              f" {self.path / LOCK_NAME}); wait until it has finished or choose another --out") from None
        self._lock_fd = fd

    def __exit__(self, typ, exc, tb) -> None:
        if not self._committed:
            for _, tmp in self._staged:
                _unlink(tmp)
            if self._lock_created and self._lock_fd is not None:  # refused or failed: leave nothing of ours behind
                _unlink(self.path / LOCK_NAME)  # while the lock is held, so no other writer holds this file
        self._discard()
        if isinstance(exc, OSError):
            raise OutputError(_sentence(exc, self.path, self.what)) from None

    def _discard(self) -> None:
        """Release the lock (the empty lock file stays); a directory this writer created and never filled goes."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
        if self.created and not self._committed:
            _unlink(self.path / LOCK_NAME)
            try:
                self.path.rmdir()
            except OSError:
                pass

    # -- staging

    def stage(self, name: str) -> Path:
        """A temporary path for the file ``name``, to be renamed to ``DIR/name`` by :meth:`commit`."""
        if "/" in name or name in ("", ".", "..") or name == LOCK_NAME:
            raise ValueError(f"not a file name: {name!r}")
        target = output_target(self.path / name, self.what)  # an input, a directory, a link written through
        self._clear_dead_temps(name)
        tmp = _temp(self.path / name if target.stream else target.dest)
        self._staged.append((name, tmp))
        self._targets[name] = target
        return tmp

    def stage_bytes(self, name: str, data: bytes | str) -> Path:
        tmp = self.stage(name)
        try:
            with open(tmp, "xb") as fh:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise OutputError(_sentence(exc, self.path, self.what)) from None
        return tmp

    def _clear_dead_temps(self, name: str) -> None:
        """Temporary files of ``name`` left by a writer that was killed (its process is gone)."""
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return
        for e in entries:
            m = _TMP.match(e.name)
            if m and m["name"] == name[:180] and not _alive(int(m["pid"])):
                _unlink(Path(e.path))

    def previous_files(self) -> list[str]:
        """The files the manifest already in the directory lists (the previous export's), if any."""
        if self.manifest is None:
            return []
        try:
            doc = json.loads((self.path / self.manifest).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [n for n in _manifest_files(doc) if "/" not in n and n not in ("", ".", "..", LOCK_NAME)]

    # -- committing

    def commit(self, *, remove: list[str] = ()) -> list[Path]:
        """Rename every staged file into place in the order staged (stage the manifest last), then remove the
        ``remove`` files the new set does not have. Interrupts wait until it is done."""
        for _, tmp in self._staged:
            if not tmp.exists():
                raise OutputError(f"{tmp} disappeared before it was renamed into {self.path}; run the command again")
        done = []
        new = {n for n, _ in self._staged}
        with held_signals():
            try:
                for name, tmp in self._staged:
                    t = self._targets[name]
                    if t.stream:  # a device or FIFO in the folder: its bytes are written to it, nothing renamed
                        _write_stream(t, tmp.read_bytes(), self.what)
                        _unlink(tmp)
                    else:
                        os.replace(tmp, t.dest)
                    done.append(self.path / name)
                for name in remove:
                    if name not in new and not (self.path / name).is_symlink():  # a link is the user's: left alone
                        _unlink(self.path / name)
            except OSError as exc:
                raise OutputError(_sentence(exc, self.path, self.what)) from None
            self._committed = True
        _fsync_dir(self.path)
        return done


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _manifest_files(doc: Any) -> list[str]:
    """File names a tracekit manifest lists: an export's (``tables: [{file}]``) or an analyze output's
    (``tables: {name: {parquet}}``, ``json``)."""
    out: list[str] = []
    if not isinstance(doc, dict):
        return out
    tables = doc.get("tables")
    if isinstance(tables, list):
        out += [t["file"] for t in tables if isinstance(t, dict) and isinstance(t.get("file"), str)]
    elif isinstance(tables, dict):
        out += [t["parquet"] for t in tables.values() if isinstance(t, dict) and isinstance(t.get("parquet"), str)]
    if isinstance(doc.get("json"), str):
        out.append(doc["json"])
    return out


# --------------------------------------------------------------------------- analyze -o


def write_outputs(result: Result, out: Path) -> Path:
    """Every table as parquet and JSON, plus a manifest (written last); returns the manifest's path.

    The directory is created when missing. It may lie inside the trace directory the run read: the next sweep
    skips ``analyze.json`` as a tracekit output (``tracekit.ingest.discover``) and says so."""
    out = Path(out)
    manifest: dict[str, Any] = {"command": result.command, "schema": result.schema, "tables": {}}
    with OutputDir(out, what=f"{result.command} output") as d:
        for name, df in result.tables.items():
            df.to_parquet(d.stage(f"{name}.parquet"), index=False)
            manifest["tables"][name] = {"parquet": f"{name}.parquet", "rows": int(len(df)),
                                        "columns": list(df.columns)}
        d.stage_bytes(f"{result.command}.json", json.dumps(to_json_obj(result), indent=1) + "\n")
        manifest["json"] = f"{result.command}.json"
        d.stage_bytes("manifest.json", json.dumps(manifest, indent=1) + "\n")
        d.commit(remove=d.previous_files())
    return out / "manifest.json"
