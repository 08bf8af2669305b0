"""Paths on the page as seen from where the command ran: every absolute path of the inputs and the parameters made
relative to the current directory (the home folder as ``~``), and the page's title from the first input's name."""

from __future__ import annotations

import os
import re

from ...result import Result
from .tables import esc


def relative(path: str) -> str:
    """``path`` as seen from where the command ran (the current directory); a path on another drive by its name."""
    if not os.path.isabs(path):
        return path
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return os.path.basename(path)


def path_fixes(result: Result) -> list[tuple[str, str]]:
    """(text, replacement) pairs that make the page's paths relative to the current directory: every absolute path
    among the inputs and the parameters (raw and as HTML-escaped), then the current directory and the home folder
    as prefixes, longest first."""
    paths = {str(i.get("path")) for i in result.inputs if i.get("path")}
    paths |= {v for v in result.params.values() if isinstance(v, str) and os.path.isabs(v)}
    fixes = {p: relative(p) for p in paths if os.path.isabs(p)}
    cwd = os.getcwd()
    if cwd not in ("/", ""):
        fixes[cwd.rstrip(os.sep) + os.sep] = ""
    home = os.path.expanduser("~")
    if home not in ("/", "", "~"):
        fixes[home.rstrip(os.sep) + os.sep] = "~" + os.sep
    out = []
    for k, v in sorted(fixes.items(), key=lambda kv: -len(kv[0])):
        out.append((k, v))
        if esc(k) != k:
            out.append((esc(k), esc(v)))
    return out


def relative_paths(text: str, fixes: list[tuple[str, str]]) -> str:
    """``text`` with each absolute path of ``fixes`` replaced, in one pass (a replacement is never replaced again)
    and only where the path starts (not inside a longer relative path that ends with it)."""
    keys = [k for k, _ in fixes if k in text]
    if not keys:
        return text
    table = dict(fixes)
    pat = re.compile(r"(?<![\w.~/-])(?:" + "|".join(re.escape(k) for k in keys) + ")")
    return pat.sub(lambda m: table[m.group(0)], text)


def names_title(result: Result) -> tuple[list[str], str]:
    """The inputs' names (relative to the current directory), and the page's title (the command and the first input's
    file name)."""
    names = [relative(str(i.get("path") or i.get("label"))) for i in result.inputs if i.get("path") or i.get("label")]
    return names, f"tracekit {result.command}" + (f" · {names[0].rsplit('/', 1)[-1]}" if names else "")
