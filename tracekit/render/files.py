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
* an output never replaces one of the run's inputs (and a sweep skips tracekit's own outputs, so ``analyze DIR
  -o DIR`` does not read its ``analyze.json`` as a trace next time: ``tracekit.ingest.discover``).
"""
from __future__ import annotations

import errno
import json
import os
import re
import secrets
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Union

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


# --------------------------------------------------------------------------- one file


def check_file_target(path: str | Path, what: str = "output") -> Path:
    """``path`` if a file can be written there: not a directory, in an existing folder, not a read-only file."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path} is a directory; pass a file name for the {what} (e.g. {path / 'out'}{_ext(what)})")
    parent = path.parent
    if not parent.exists():
        raise OutputError(f"the folder {parent} does not exist; create it first (tracekit creates no folder for an"
                          " output file)")
    if not parent.is_dir():
        raise OutputError(f"{parent} is a file, not a folder; choose another --out")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{path} is read-only; choose another --out or make it writable")
    return path


def _ext(what: str) -> str:
    fmt = what.split(" ")[0]
    return {"picture": ".png", "annotated": ".json.gz", "csv": ".csv", "md": ".md", "table": ".txt"}.get(fmt, ".json")


def write_file(path: str | Path, data: Data, *, what: str = "output", inputs: Result | None = None) -> Path:
    """Write ``data`` (bytes, text as UTF-8, or a function that writes to a binary file) to ``path`` whole or not
    at all: a temporary name beside it, flushed, then renamed into place."""
    path = check_file_target(path, what)
    if inputs is not None:
        refuse_overwriting_inputs(inputs, path)
    tmp = _temp(path)
    try:
        with open(tmp, "xb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        with held_signals():
            os.replace(tmp, path)
    except OSError as exc:
        _unlink(tmp)
        raise OutputError(_sentence(exc, path, what)) from None
    except BaseException:
        _unlink(tmp)
        raise
    return path


def _input_paths(result: Result) -> list[Path]:
    out = []
    for i in result.inputs:
        p = i.get("path") if isinstance(i, dict) else None
        if p:
            out.append(Path(str(p)))
    return out


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def refuse_overwriting_inputs(result: Result, path: Path) -> None:
    """An output never replaces a file the run read."""
    for p in _input_paths(result):
        if _same(p, path):
            raise OutputError(f"{path} is an input of this {result.command}; writing there would replace it — choose"
                              " another --out")



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
        self._lock_fd: int | None = None
        self._committed = False

    # -- entering: the directory exists and is ours

    def __enter__(self) -> OutputDir:
        p = self.path
        if p.exists() and not p.is_dir():
            raise OutputError(f"{p} exists and is not a directory; pass a directory for the {self.what}")
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
        self._clear_dead_temps(name)
        tmp = _temp(self.path / name)
        self._staged.append((name, tmp))
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
                    os.replace(tmp, self.path / name)
                    done.append(self.path / name)
                for name in remove:
                    if name not in new:
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
