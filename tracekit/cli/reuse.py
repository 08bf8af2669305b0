"""A command run again with the same inputs gets its Result from the cache (``tracekit.cache.result_entries``).

``report`` and ``findings`` on one trace are the commands whose analyses cost seconds; people run them again on
the same trace to see another format (``-f html``, ``-f json``, ``--all``). :func:`reused_or_run` makes the key of
everything the Result depends on (:func:`tracekit.cache.reuse_key.result_key`: the trace file, every option as the
command will use it, the annotation's content, the content of the other files it reads, ``--device``, the
libraries' versions and tracekit's own code) and returns the stored Result when an entry has exactly that key, else
computes it and stores it. ``--no-cache`` neither reads nor writes an entry. The ranks of a run are not cached (many
files). The key is the cache package's; what is the CLI's stays here: the trace as the user gave it, ``--device``
and ``--verbose`` (the CLI's state), and the timing of the phases."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import typer

from .common import _state, checked_input, phase


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
    from ..cache import result_entries
    from ..cache.reuse_key import result_key

    given, source = checked_input(trace)
    key = result_key(command, given, source, options, files, ann, device=_state.get("device"))
    if key is not None:
        hit = result_entries.get(source, command, key, cache_dir)
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
        result_entries.put(source, command, key, result, cache_dir)
    return result
