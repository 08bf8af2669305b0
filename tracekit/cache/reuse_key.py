"""The key under which a command's Result is reused (:mod:`tracekit.cache.result_entries`): everything the Result
depends on, as plain JSON.

``report`` and ``findings`` run again on the same trace (to see another format) get the stored Result only when the
key the command makes now equals the stored one, whole: the trace file's cache key, every option as the command will
use it, the annotation's content, the content of the other files it reads, ``--device``, the libraries' versions and
tracekit's own code (:func:`code_fingerprint`). The CLI makes it (``tracekit.cli.reuse``); it needs nothing of the
annotation or analysis packages: the options and the annotation are keyed from the objects it is given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import zlib
from pathlib import Path
from typing import Any, Optional

from .._version import __version__
from .keys import key_of

_FINGERPRINT_SUFFIXES = (".py", ".json", ".toml", ".yaml", ".yml", ".csv", ".txt")
_fingerprint: str | None = None


def code_fingerprint() -> str:
    """A fingerprint of every code and data file of the installed tracekit package (its modules, rules, shipped
    annotations and hardware tables): each file's name, size and modification time, with tracekit's version — the
    rule Python's own bytecode cache trusts. Any edit, reinstall or checkout gives another fingerprint. Computed once
    per process (a stat per file, a few ms)."""
    global _fingerprint
    if _fingerprint is None:
        root = Path(__file__).resolve().parents[1]
        crc = zlib.crc32(__version__.encode())
        n = 0
        for folder, dirs, names in sorted(os.walk(root)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in sorted(names):
                if name.endswith(_FINGERPRINT_SUFFIXES):
                    p = os.path.join(folder, name)
                    try:
                        st = os.stat(p)
                        item = f"{os.path.relpath(p, root)}:{st.st_size}:{st.st_mtime_ns}"
                    except OSError:
                        item = f"{p}:?"
                    crc = zlib.crc32(os.fsencode(item), crc)
                    n += 1
        _fingerprint = f"{__version__}:{n}:{crc:08x}"
    return _fingerprint


def _plain(value: Any) -> Any:
    """An option as JSON the key can hold: dataclasses as their fields, enums as their value, paths as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "value") and type(value).__module__ != "builtins":
        return _plain(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _file_key(path: Optional[Path | str]) -> Any:
    """A file the command reads, by its cache key (size, times, inode, checksum of every byte); None when absent."""
    if path is None:
        return None
    try:
        return key_of(Path(path), whole=True)
    except OSError:
        return {"unreadable": str(path)}


def _annotation_key(ann) -> Any:
    if ann is None:
        return None
    import msgspec

    return {"ref": ann.ref, "sha1": hashlib.sha1(msgspec.json.encode(ann)).hexdigest()}


def result_key(
    command: str, given: Path, source: Path, options: dict[str, Any], files: dict[str, Any], ann, device: Any = None
) -> dict[str, Any] | None:
    """Everything ``command``'s Result depends on, as plain JSON; None when the trace cannot be keyed. ``given``:
    the trace as the user named it, ``source``: the file read; ``device``: the ``--device`` the command runs with."""
    import numpy
    import pandas
    import pyarrow

    try:
        trace_key = key_of(source)
    except OSError:
        return None
    return {
        "command": command,
        "trace": {"as_given": str(given), "file": trace_key},
        "options": _plain(options),
        "annotation": _annotation_key(ann),
        "files": {name: _file_key(p) for name, p in files.items()},
        "device": _plain(device),
        "code": code_fingerprint(),
        "libraries": {"numpy": numpy.__version__, "pandas": pandas.__version__, "pyarrow": pyarrow.__version__},
    }
