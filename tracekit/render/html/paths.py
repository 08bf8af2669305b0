"""Paths on the page and in its JSON sidecar as seen from the page's folder (issue 41: a page carries none of the
user's folders): every path of the inputs and the parameters relative to the folder the page is written to (the
current directory for a page on stdout), or its file name alone where a relative path would climb to the root or
above the home folder (it would spell the machine's folders out); any other absolute path under a known folder
likewise, the home folder as ``~``. ``full`` (``--full-paths``, ``Result.save(full_paths=True)``) keeps every path
as given. Also the page's title from the first input's name."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Callable

from ...result import Result
from .tables import esc


def _private(common: str) -> bool:
    """Whether a relative path that climbs up to ``common`` would name the machine's folders: ``common`` is the root,
    or holds the home folder (``/home``: the way back down names the user)."""
    if os.path.dirname(common) == common:
        return True
    home = os.path.expanduser("~")
    return home not in ("", "~") and home.startswith(common.rstrip(os.sep) + os.sep)


@dataclasses.dataclass(frozen=True)
class PathView:
    """How a page shows paths: relative to ``base`` (the folder of the output file; None: the current directory,
    where a page printed on stdout is read from), or as given when ``full``."""

    base: str | None = None
    full: bool = False

    def folder(self) -> str:
        return os.path.abspath(self.base) if self.base is not None else os.getcwd()

    def _relative(self, path: str) -> str | None:
        """``path`` (absolute, or relative to the current directory) relative to the folder; None where that would
        climb to the root or above the home folder, or onto another drive."""
        full, folder = os.path.abspath(path), self.folder()
        try:
            common = os.path.commonpath([full, folder])
        except ValueError:  # another drive (Windows)
            return None
        return None if _private(common) else os.path.relpath(full, folder)

    def shown(self, path: str) -> str:
        """``path`` as the page shows it: relative to the folder, else its file name; a relative path that names
        nothing here (a label, a shipped annotation's name) or one already relative to the folder as given."""
        path = str(path)
        if self.full or not path:
            return path
        if not os.path.isabs(path) and (self.base is None or not os.path.exists(path)):
            return path
        rel = self._relative(path)
        return rel if rel is not None else (os.path.basename(path.rstrip(os.sep)) or path)

    def _prefix(self, folder: str) -> str | None:
        """What a folder's path and its separator become at the start of a longer path ("" for the folder itself
        and where only the file name is shown)."""
        rel = self._relative(folder)
        return "" if rel in (None, ".") else rel + os.sep

    def fixes(self, result: Result) -> list[tuple[str, str]]:
        """(absolute text, replacement) pairs, longest first: every absolute path among the inputs and the
        parameters, the folders that hold them (a file beside an input), the output folder and the current
        directory as prefixes, the home folder as ``~``; none when ``full``."""
        if self.full:
            return []
        paths = {str(i.get("path")) for i in result.inputs if i.get("path")}
        paths |= {v for v in result.params.values() if isinstance(v, str)}
        fixes: dict[str, str] = {}
        for p in (p for p in paths if os.path.isabs(p) and p != os.sep):
            p = p.rstrip(os.sep)
            fixes[p] = self.shown(p)
            for folder in {p, os.path.dirname(p)}:
                if os.path.dirname(folder) != folder:
                    fixes[folder + os.sep] = self._prefix(folder)
                    fixes.setdefault(folder, self.shown(folder))  # a run's folder beside its rank files
        for folder in (self.folder(), os.getcwd()):
            if os.path.dirname(folder) != folder and self._relative(folder) is not None:
                fixes[folder.rstrip(os.sep) + os.sep] = self._prefix(folder)
        home = os.path.expanduser("~")
        if os.path.dirname(home) != home and home != "~":
            fixes.setdefault(home.rstrip(os.sep) + os.sep, "~" + os.sep)
        return sorted(fixes.items(), key=lambda kv: -len(kv[0]))

    def inputs(self, result: Result) -> list[dict]:
        """The result's inputs with each path as shown."""
        return [{**i, "path": self.shown(i["path"])} if i.get("path") else dict(i) for i in result.inputs]

    def result(self, result: Result) -> Result:
        """``result`` with its inputs' paths as shown (for the JSON sidecar)."""
        return result if self.full else dataclasses.replace(result, inputs=self.inputs(result))


def escaped(fixes: list[tuple[str, str]], escape: Callable[[str], str]) -> list[tuple[str, str]]:
    """``fixes`` with each pair also as ``escape`` writes it (HTML, JSON), where that differs."""
    out = []
    for k, v in fixes:
        out.append((k, v))
        if escape(k) != k:
            out.append((escape(k), escape(v)))
    return out


def json_escape(text: str) -> str:
    """``text`` as it stands inside a JSON string."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def relative(path: str) -> str:
    """``path`` as seen from where the command ran (the current directory); a path on another drive by its name."""
    return PathView().shown(path)


def path_fixes(result: Result, view: PathView | None = None) -> list[tuple[str, str]]:
    """The page's (text, replacement) pairs: ``view``'s fixes, raw and as HTML-escaped."""
    return escaped((view or PathView()).fixes(result), esc)


def relative_paths(text: str, fixes: list[tuple[str, str]]) -> str:
    """``text`` with each absolute path of ``fixes`` replaced, in one pass (a replacement is never replaced again)
    and only where the path starts (not inside a longer relative path that ends with it) and, but for a folder's
    prefix, where its name ends (``/a/x`` is not the start of ``/a/x.bak``)."""
    keys = sorted((k for k, _ in fixes if k and k in text), key=len, reverse=True)
    if not keys:
        return text
    table = dict(fixes)
    ends = {k: "" if k.endswith(("/", os.sep)) else r"(?![\w.-])" for k in keys}  # a whole name, not its start
    pat = re.compile(r"(?<![\w.~/-])(?:" + "|".join(re.escape(k) + ends[k] for k in keys) + ")")
    return pat.sub(lambda m: table[m.group(0)], text)


def names_title(result: Result, view: PathView | None = None) -> tuple[list[str], str]:
    """The inputs' names (as ``view`` shows them: relative to the page's folder), and the page's title (the command
    and the first input's file name)."""
    view = view or PathView()
    names = [
        view.shown(str(i.get("path"))) if i.get("path") else str(i["label"])
        for i in result.inputs
        if i.get("path") or i.get("label")
    ]
    return names, f"tracekit {result.command}" + (f" · {names[0].rsplit('/', 1)[-1]}" if names else "")
