"""A directory of files written as a whole (``export -o``, ``analyze -o``, ``-f csv -o NAME``), and ``analyze -o``'s
set of tables.

The directory is created with its parents when missing and locked while it is written (``.tracekit.lock``, an
advisory ``flock``; a second writer is refused in one sentence); every file is staged under a temporary name first
(the rule of :func:`tracekit.render.files.output_target` applies to each), and the renames into place — the manifest
last — run with SIGINT/SIGTERM/SIGHUP held back, so an interrupt leaves the previous complete set or the new complete
one. Files of the previous set that the new one lacks are removed after the new manifest is in place; temporary
files of a writer that was killed are cleared.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..cache.tempfiles import OUTPUT_TMP_NAME as _TMP  # temp_path's names, to find those a killed writer left
from ..cache.tempfiles import held_signals, remove_quietly, temp_path, write_synced
from ..errors import OutputError
from ..result import Result, to_json_obj
from .files import (
    Target,
    check_dir_target,
    os_error_sentence,
    output_target,
    write_stream,
)

LOCK_NAME = ".tracekit.lock"


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
            raise OutputError(os_error_sentence(exc, p, self.what)) from None
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
            raise OutputError(
                f"another tracekit is writing into {self.path} right now (it holds"
                f" {self.path / LOCK_NAME}); wait until it has finished or choose another --out"
            ) from None
        self._lock_fd = fd

    def __exit__(self, typ, exc, tb) -> None:
        if not self._committed:
            for _, tmp in self._staged:
                remove_quietly(tmp)
            if self._lock_created and self._lock_fd is not None:  # refused or failed: leave nothing of ours behind
                remove_quietly(self.path / LOCK_NAME)  # while the lock is held, so no other writer holds this file
        self._discard()
        if isinstance(exc, OSError):
            raise OutputError(os_error_sentence(exc, self.path, self.what)) from None

    def _discard(self) -> None:
        """Release the lock (the empty lock file stays); a directory this writer created and never filled goes."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
        if self.created and not self._committed:
            remove_quietly(self.path / LOCK_NAME)
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
        tmp = temp_path(self.path / name if target.stream else target.dest)
        self._staged.append((name, tmp))
        self._targets[name] = target
        return tmp

    def stage_bytes(self, name: str, data: bytes | str) -> Path:
        tmp = self.stage(name)
        raw = data.encode("utf-8") if isinstance(data, str) else data
        try:
            write_synced(tmp, lambda fh: fh.write(raw))
        except OSError as exc:
            raise OutputError(os_error_sentence(exc, self.path, self.what)) from None
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
                remove_quietly(Path(e.path))

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
                        write_stream(t, tmp.read_bytes(), self.what)
                        remove_quietly(tmp)
                    else:
                        os.replace(tmp, t.dest)
                    done.append(self.path / name)
                for name in remove:
                    if name not in new and not (self.path / name).is_symlink():  # a link is the user's: left alone
                        remove_quietly(self.path / name)
            except OSError as exc:
                raise OutputError(os_error_sentence(exc, self.path, self.what)) from None
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
            manifest["tables"][name] = {"parquet": f"{name}.parquet", "rows": int(len(df)), "columns": list(df.columns)}
        d.stage_bytes(f"{result.command}.json", json.dumps(to_json_obj(result), indent=1) + "\n")
        manifest["json"] = f"{result.command}.json"
        d.stage_bytes("manifest.json", json.dumps(manifest, indent=1) + "\n")
        d.commit(remove=d.previous_files())
    return out / "manifest.json"
