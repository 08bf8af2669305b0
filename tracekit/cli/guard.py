"""The one output rule, on every command: the files a command was given to read are readable (else exit 3), and no
output of it (its ``--out``, an html page's json companion) replaces one of them — checked from its parsed
parameters before any work, and kept by every writer while it runs (``tracekit.render.files.output_target``).
``tracekit/cli/__init__.py`` wraps each command's ``invoke`` with :func:`guarded`."""

from __future__ import annotations

import os
from pathlib import Path

from .common import sidecar_of

NOT_INPUTS = frozenset({"out", "cache_dir"})  # path-valued parameters a command writes, not reads


def _role(param) -> str:
    opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    return opts[0] if opts and getattr(param, "param_type_name", "") == "option" else (param.name or "").upper()


def _values(value) -> list:
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _values(item)]
    return [value]


def command_inputs(ctx) -> list[tuple[Path, str, bool]]:
    """Every file a command was given to read, from its parsed parameters, with no list per command:
    ``(path, how the command names it, given as a path)``. Path-valued parameters (arguments and options) other than
    its outputs, and any text value that names an existing file (``-a FILE``, ``--hw FILE``, ``LABEL=FILE``)."""
    found: list[tuple[Path, str, bool]] = []
    for param in ctx.command.params:
        name = param.name or ""
        if name in NOT_INPUTS:
            continue
        for v in _values(ctx.params.get(name)):
            if isinstance(v, Path):
                found.append((v, _role(param), True))
            elif isinstance(v, str) and v:
                for cand in dict.fromkeys((v, v.partition("=")[2])):
                    if cand and len(cand) < 4096 and "\0" not in cand and os.path.isfile(cand):
                        found.append((Path(cand), _role(param), False))
    return found


def _read_beside(inputs: list[tuple[Path, str, bool]]) -> list[tuple[Path, str, bool]]:
    """The files a command reads beside the traces it was given (capture traces, their execution_details.json, graph
    annotation side files): guarded like the given ones, never replaced by an output."""
    traces = [p for p, _, given in inputs if given and p.is_file()]
    if not traces:
        return []
    from ..ingest.captures import files_read_beside

    return [(q, f"file read beside {p.name}", False) for p in traces for q in files_read_beside(p)]


def _check_readable(path: Path, role: str) -> None:
    """An input that exists but cannot be read: one sentence, exit 3 (the parser's check would be a usage error)."""
    import stat as st_

    from ..errors import InputError

    try:
        st = os.stat(path)
    except OSError:
        return  # missing: the command says what it wanted there
    try:
        if st_.S_ISREG(st.st_mode):
            with open(path, "rb"):
                pass
        elif st_.S_ISDIR(st.st_mode):
            os.listdir(path)
    except PermissionError:
        raise InputError(
            f"{path} cannot be read (permission denied); make it readable or pass another {role}"
        ) from None
    except OSError as exc:
        raise InputError(f"{path} cannot be read ({exc.strerror or exc}); pass another {role}") from None


def _finite_numbers(ctx) -> None:
    """No number option takes inf or nan: a usage error (exit 2) naming it, before any work."""
    import math

    from ..errors import UsageError

    for param in ctx.command.params:
        for v in _values(ctx.params.get(param.name or "")):
            if isinstance(v, float) and not math.isfinite(v):
                raise UsageError(f"{_role(param)} {v} is not a finite number; pass a number")


def guarded(invoke):
    """Wrap a command's ``invoke(ctx)`` (its parameters parsed, its callback not yet run) with the one output rule:
    its inputs readable (else exit 3), its ``--out`` (and an html page's json companion) not one of them, checked
    before any work; while it runs no writer (``tracekit.render.files.output_target``) replaces any of them."""
    import functools

    @functools.wraps(invoke)
    def run_guarded(ctx):
        from ..render.files import guarding, output_target

        command = ctx.command_path.split(" ", 1)[1] if " " in ctx.command_path else ctx.command_path
        _finite_numbers(ctx)
        inputs = command_inputs(ctx)
        inputs += _read_beside(inputs)
        for path, role, given_as_path in inputs:
            if given_as_path:
                _check_readable(path, role)
        with guarding([(p, role) for p, role, _ in inputs], command):
            out = ctx.params.get("out")
            if isinstance(out, Path) and not out.is_dir():
                output_target(out, "output", early=True)
                fmt = ctx.params.get("format")
                if (
                    getattr(fmt, "value", fmt) == "html"
                    and out.suffix  # a page (a folder has no suffix)
                    and not output_target(out, early=True).stream
                ):
                    output_target(sidecar_of(out), f"json sidecar of {out}", early=True)
            return invoke(ctx)

    return run_guarded
