"""The CLI's help is written for users (issue 17): every command and every option and argument has a help text,
none carries the study's section codes (A1–A14), and `tracekit --help` fits 100 columns and lists each command's
first sentence whole.

A failure names the module that declares the command or option: the shared options (``TraceArg``, ``FormatOpt``,
…) live in tracekit/cli/common.py, the rest in the command module that uses them.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import typing
from pathlib import Path

import typer.main
from typer.models import ParameterInfo

import tracekit.cli
from tracekit.cli import app

SECTION_CODE = re.compile(r"\bA(1[0-4]|[1-9])\b")  # the study's section codes: A1 … A14
ROOT = Path(tracekit.cli.__file__).resolve().parents[2]


def _modules() -> list:
    return [importlib.import_module(f"tracekit.cli.{m.name}") for m in pkgutil.iter_modules(tracekit.cli.__path__)]


def _where(module) -> str:
    return Path(module.__file__).resolve().relative_to(ROOT).as_posix()


def _shared_declarations() -> dict[int, tuple[str, str]]:
    """id of each module-level option/argument declaration (``FormatOpt = Annotated[..., typer.Option(...)]``) ->
    (the path of the module that assigns it, not of one that imports it; the alias's name)."""
    out: dict[int, tuple[str, str]] = {}
    for mod in _modules():
        source = Path(mod.__file__).read_text(encoding="utf-8")
        for name, value in vars(mod).items():
            if typing.get_origin(value) is not typing.Annotated or not re.search(rf"^{name}\s*=", source, re.M):
                continue
            for meta in value.__metadata__:
                if isinstance(meta, ParameterInfo):
                    out[id(meta)] = (_where(mod), name)
    return out


def _group_modules() -> dict[str, str]:
    """Sub-command group name (cache, plot, waves) -> the module that builds its typer app (and its help)."""
    apps = {id(v): _where(mod) for mod in _modules() for v in vars(mod).values() if isinstance(v, typer.Typer)}
    return {info.name: apps[id(info.typer_instance)] for info in app.registered_groups}


def _commands():
    """(the command as typed, its click command, the module that declares it), the root group included."""
    groups = _group_modules()

    def walk(cmd, path):
        fn = getattr(cmd.callback, "__wrapped__", cmd.callback)
        if not path:
            where = _where(importlib.import_module("tracekit.cli.common"))  # the app and its help
        elif fn is not None:
            where = _where(importlib.import_module(fn.__module__))
        else:
            where = groups[path[0]]
        yield " ".join(["tracekit", *path]), cmd, where
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def _parameters():
    """(command, click parameter, where it is declared: 'module' or 'module (AliasName)')."""
    shared = _shared_declarations()
    for command, cmd, where in _commands():
        fn = getattr(cmd.callback, "__wrapped__", cmd.callback)
        hints = typing.get_type_hints(fn, include_extras=True) if fn is not None else {}
        for param in cmd.params:
            if "--help" in getattr(param, "opts", ()):
                continue
            infos = [m for m in getattr(hints.get(param.name), "__metadata__", ()) if isinstance(m, ParameterInfo)]
            decl = shared.get(id(infos[0])) if infos else None
            yield command, param, (f"{decl[0]} ({decl[1]})" if decl else where)


def _label(param) -> str:
    return (
        "/".join(param.opts + getattr(param, "secondary_opts", []))
        if param.param_type_name == "option"
        else f"argument {param.name.upper()}"
    )


def test_every_command_has_help_without_section_codes():
    bad = []
    for command, cmd, where in _commands():
        text = (cmd.help or "").strip()
        if not text:
            bad.append(f"{where}: `{command}` has no help (a docstring, or help= of its group)")
        elif SECTION_CODE.search(text):
            bad.append(
                f"{where}: `{command}`'s help carries a section code ({SECTION_CODE.search(text).group()}):"
                f" {text.splitlines()[0]!r}"
            )
    assert bad == [], "\n".join(bad)


def test_every_option_and_argument_has_help_without_section_codes():
    """One line per declaration: a shared option (declared once, used by many commands) is named once, with the
    commands that use it."""
    bad: dict[tuple[str, str, str], list[str]] = {}
    for command, param, where in _parameters():
        text = (getattr(param, "help", None) or "").strip()
        if not text:
            problem = "has no help"
        elif SECTION_CODE.search(text):
            problem = f"carries a section code ({SECTION_CODE.search(text).group()}) in its help: {text!r}"
        else:
            continue
        bad.setdefault((where, _label(param), problem), []).append(command)
    lines = [
        f"{where}: {label} {problem} (in {', '.join(f'`{c}`' for c in cmds)})"
        for (where, label, problem), cmds in sorted(bad.items())
    ]
    assert lines == [], "\n".join(lines)


def test_tracekit_help_fits_100_columns_and_lists_whole_first_sentences(cli, monkeypatch):
    """`tracekit --help` (and each group's) lists every command by its first sentence: it must fit the listing
    (about 60 characters), or the listing cuts it with "..."."""
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "dumb")
    code, out, _ = cli("--help")
    assert code == 0 and "Commands:" in out
    wide = [line for line in out.splitlines() if len(line) > 100]
    assert wide == [], "\n".join(wide)
    groups = [[]] + [c.split()[1:] for c, cmd, _ in _commands() if len(c.split()) == 2 and hasattr(cmd, "commands")]
    cut = []
    for group in groups:
        code, out, _ = cli(*group, "--help")
        assert code == 0, group
        listing = out.split("Commands:", 1)[1].split("\n\n", 1)[0]
        cut += [
            f"{' '.join(['tracekit', *group])}: {line.strip()}"
            for line in listing.splitlines()
            if line.rstrip().endswith("...")
        ]
    assert cut == [], "first sentences cut in the command listing (shorten them):\n" + "\n".join(cut)
