"""A command run again with the same inputs gets its Result from the cache (``tracekit.ingest.result_cache``).

``report`` and ``findings`` on one trace are the commands whose analyses cost seconds; people run them again on
the same trace to see another format (``-f html``, ``-f json``, ``--all``). :func:`reused_or_run` makes the key of
everything the Result depends on — the trace file, every option as the command will use it, the annotation's
content, the content of the other files it reads, ``--device``, the libraries' versions and tracekit's own code
(``code_fingerprint``) — and returns the stored Result when an entry has exactly that key, else computes it and
stores it. ``--no-cache`` neither reads nor writes an entry. The ranks of a run are not cached (many files)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from .common import _state, checked_input, phase


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
    from ..ingest.cache_key import key_of

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
    command: str, given: Path, source: Path, options: dict[str, Any], files: dict[str, Any], ann
) -> dict[str, Any] | None:
    """Everything ``command``'s Result depends on, as plain JSON; None when the trace cannot be keyed."""
    import numpy
    import pandas
    import pyarrow

    from ..ingest.cache_key import key_of
    from ..ingest.result_cache import code_fingerprint

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
        "device": _plain(_state.get("device")),
        "code": code_fingerprint(),
        "libraries": {"numpy": numpy.__version__, "pandas": pandas.__version__, "pyarrow": pyarrow.__version__},
    }


def reused_or_run(
    command: str,
    trace: Optional[Path],
    *,
    options: dict[str, Any],
    files: dict[str, Any],
    ann,
    no_cache: bool,
    cache_dir: Optional[Path],
    compute: Callable[[], Any],
):
    """The stored Result of ``command`` on ``trace`` with exactly these inputs, else ``compute()`` (stored)."""
    if no_cache:
        return compute()
    from ..ingest import result_cache

    given, source = checked_input(trace)
    key = result_key(command, given, source, options, files, ann)
    if key is not None:
        hit = result_cache.get(source, command, key, cache_dir)
        if hit is not None:
            _state["reading"] = None
            if hit.inputs:
                hit.inputs[0]["from_cache"] = True  # the trace's entry: it was not read again
            if _state["verbose"]:
                typer.echo(
                    f"the {command} of {given} from the cache (the same trace, options, annotation and"
                    " tracekit): no analysis ran",
                    err=True,
                )
            return hit
    result = compute()
    if key is not None:
        phase.stop()
        result_cache.put(source, command, key, result, cache_dir)
    return result
