"""The output formats, one renderer object each, that both draw a result as text and own that format's file writing:
the CLI (``-f FMT -o PATH``, ``tracekit.cli.common._output``) and the API (:meth:`tracekit.result.Result.save`) call
the same object, so they write the same bytes.

* ``json`` — the document of ``Result.to_json``, written (and printed) a table chunk at a time
  (``tracekit.result.iter_json``): a large table never stands whole as Python objects;
* ``csv`` — one table as one file (the first, or ``table``); a path without a suffix (and no ``table``), or an
  existing folder, is a folder of one file per table, the summary too (``csv_text.write_csv_dir``);
* ``md`` — pipe tables (``markdown.py``); ``table`` — the terminal's text (``terminal.py``), in a file as wide as
  ``COLUMNS`` or 100 columns;
* ``html`` — the self-contained page (``html/``) and, beside ``FILE.html``, its json sidecar ``FILE.json`` (the
  json document: every row the page leaves out), the two written together or neither; the paths in both relative
  to the page's folder, or the file name alone (``html/paths.py``: they carry none of the user's folders), unless
  ``full_paths`` (``--full-paths``). The json format itself keeps the paths as given: it is data for scripts.

Every file goes through ``files.py`` (whole or not at all; :func:`tracekit.render.files.output_target`: never over an
input of the run, links written through, a device, FIFO or ``/dev/stdout`` written to directly — then one stream: the
first csv table, an html page without its sidecar)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Protocol

from ..errors import UsageError
from ..result import Result, iter_json, shown_path
from .files import is_stream, write_file, write_files


@dataclass(frozen=True)
class Saved:
    """What :meth:`Renderer.save` wrote: the paths, and the sentence that says so (the CLI prints it on stderr)."""

    paths: list[Path]
    message: str


class Renderer(Protocol):
    """One output format: ``text`` draws a result, ``pieces`` is the same text a piece at a time (for stdout),
    ``save`` writes it to a path as ``-o`` does."""

    name: str

    def text(self, result: Result) -> str: ...

    def pieces(self, result: Result) -> Iterator[str]: ...

    def save(self, result: Result, path: str | Path) -> Saved: ...


class _OneFile:
    """A format written as one file: its text, whole or not at all."""

    name = ""

    def text(self, result: Result) -> str:
        raise NotImplementedError

    def pieces(self, result: Result) -> Iterator[str]:
        yield self.text(result)

    def file_data(self, result: Result) -> str | Callable[[BinaryIO], None]:
        return self.text(result)

    def note(self, result: Result, path: Path) -> str:
        return ""

    def save(self, result: Result, path: str | Path) -> Saved:
        path = Path(path)
        write_file(path, self.file_data(result), what=f"{self.name} output", inputs=result)
        return Saved([path], f"wrote {shown_path(path)}{self.note(result, path)}")


def json_writer(result: Result) -> Callable[[BinaryIO], None]:
    """What writes the json document into an open binary file, piece by piece (``iter_json``)."""

    def write(fh: BinaryIO) -> None:
        for piece in iter_json(result):
            fh.write(piece.encode("utf-8"))

    return write


@dataclass(frozen=True)
class JsonRenderer(_OneFile):
    name = "json"

    def text(self, result: Result) -> str:
        return result.to_json()

    def pieces(self, result: Result) -> Iterator[str]:
        return iter_json(result)

    def file_data(self, result: Result) -> Callable[[BinaryIO], None]:
        return json_writer(result)


@dataclass(frozen=True)
class CsvRenderer(_OneFile):
    table: str | None = None
    name = "csv"

    def text(self, result: Result) -> str:
        from .csv_text import to_csv

        return to_csv(result, self.table)

    def is_folder(self, path: Path) -> bool:
        """A folder of one file per table: an existing folder, or a name without a suffix and no ``table`` (never a
        device, FIFO or ``/dev/stdout``: one stream)."""
        return not is_stream(path) and (path.is_dir() or (not path.suffix and self.table is None))

    def note(self, result: Result, path: Path) -> str:
        if self.table is None and len(result.tables) > 1:
            return (
                f" (table {result.primary_table}, the first of {len(result.tables)}: --table NAME picks another,"
                " and --out NAME without a suffix writes every table into a folder)"
            )
        return ""

    def save(self, result: Result, path: str | Path) -> Saved:
        path = Path(path)
        if not self.is_folder(path):
            return super().save(result, path)
        from .csv_text import write_csv_dir

        new = not path.exists()
        paths = write_csv_dir(result, path, only=self.table)
        return Saved(
            paths,
            f"wrote {len(paths)} csv file{'s' if len(paths) != 1 else ''} ("
            f"{'one per table' if self.table is None else f'table {self.table}'}) into the folder {shown_path(path)}"
            f"{' (created)' if new else ''}",
        )


@dataclass(frozen=True)
class MarkdownRenderer(_OneFile):
    all_rows: bool = False
    wide: bool = False
    name = "md"

    def text(self, result: Result) -> str:
        from .markdown import to_markdown

        return to_markdown(result, all_rows=self.all_rows, wide=self.wide)


def file_width() -> int:
    """The width of the table format in a file: ``COLUMNS`` when it is a number, else 100 (not a terminal)."""
    from .table_layout import NOT_A_TERMINAL_WIDTH

    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() else NOT_A_TERMINAL_WIDTH


@dataclass(frozen=True)
class TableRenderer(_OneFile):
    """The terminal's text; ``width`` None is the terminal's (``text``) or a file's (``save``: :func:`file_width`)."""

    all_rows: bool = False
    width: int | None = None
    wide: bool = False
    name = "table"

    def text(self, result: Result, *, width: int | None = None) -> str:
        from .terminal import to_text

        return to_text(result, width=width if width is not None else self.width, all_rows=self.all_rows, wide=self.wide)

    def file_data(self, result: Result) -> str:
        return self.text(result, width=self.width if self.width is not None else file_width())


def sidecar_of(out: str | Path) -> Path:
    """The JSON companion of an html page written to ``out``: FILE.json beside FILE.html."""
    return Path(out).with_suffix(".json")


def relative_json(result: Result, base: Path) -> Callable[[BinaryIO], None]:
    """The json writer of an html page's sidecar: the document with the paths the page shows relative to ``base``
    (the page's folder), each piece as the page's paths are fixed (``html/paths.py``)."""
    from .html.paths import PathView, escaped, json_escape, relative_paths

    view = PathView(str(base))
    fixes = escaped(view.fixes(result), json_escape)

    def write(fh: BinaryIO) -> None:
        for piece in iter_json(view.result(result)):  # a piece never splits a string: a table chunk is whole rows
            fh.write(relative_paths(piece, fixes).encode("utf-8"))

    return write


@dataclass(frozen=True)
class HtmlRenderer(_OneFile):
    """The page; ``full_paths`` keeps every path as given (else relative to the page's folder, or the file name)."""

    full_paths: bool = False
    name = "html"

    def text(self, result: Result, *, base: str | Path | None = None) -> str:
        from .html import to_html

        return to_html(result, base=None if base is None else str(base), full_paths=self.full_paths)

    def note(self, result: Result, path: Path) -> str:
        return " (a device or stream: no json sidecar beside it)"

    def save(self, result: Result, path: str | Path) -> Saved:
        """The page and its json sidecar (:func:`sidecar_of`), both or neither; a device or stream gets the page."""
        path = Path(path)
        if is_stream(path):
            return super().save(result, path)
        sidecar, folder = sidecar_of(path), path.absolute().parent
        page = self.text(result, base=folder)
        data = json_writer(result) if self.full_paths else relative_json(result, folder)
        paths = write_files([(path, page, "html report"), (sidecar, data, f"json sidecar of {path}")], inputs=result)
        return Saved(paths, f"wrote {shown_path(path)} and its json sidecar {shown_path(sidecar)}")


RENDERERS: dict[str, type] = {
    "table": TableRenderer,
    "json": JsonRenderer,
    "csv": CsvRenderer,
    "md": MarkdownRenderer,
    "html": HtmlRenderer,
}
FORMATS = tuple(RENDERERS)
SUFFIXES = {".json": "json", ".csv": "csv", ".md": "md", ".html": "html", ".txt": "table"}  # a path's suffix -> format


def renderer(
    fmt: str,
    *,
    table: str | None = None,
    all_rows: bool = False,
    width: int | None = None,
    wide: bool = False,
    full_paths: bool = False,
) -> Renderer:
    """The renderer of the format ``fmt`` with the options it takes: ``table`` (csv), ``all_rows`` and ``wide``
    (table, md), ``width`` (table), ``full_paths`` (html)."""
    if fmt not in RENDERERS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    options = {"table": table, "all_rows": all_rows, "width": width, "wide": wide, "full_paths": full_paths}
    cls = RENDERERS[fmt]
    return cls(**{k: v for k, v in options.items() if k in cls.__dataclass_fields__})


def format_of(path: str | Path) -> str:
    """The format a path's suffix names (``.json``, ``.csv``, ``.md``, ``.html``, ``.txt``: the table format)."""
    fmt = SUFFIXES.get(Path(path).suffix.lower())
    if fmt is None:
        raise UsageError(
            f"cannot tell the format of {shown_path(path)} from its suffix ({', '.join(SUFFIXES)}); pass format="
            f" one of {', '.join(FORMATS)} (csv into a folder: format='csv' and a name without a suffix)"
        )
    return fmt


def save(
    result: Result,
    path: str | Path,
    fmt: str | None = None,
    *,
    table: str | None = None,
    all_rows: bool = False,
    wide: bool = False,
    full_paths: bool = False,
) -> Saved:
    """``result`` written to ``path`` in ``fmt`` (default: the one its suffix names), as ``-f FMT -o PATH`` writes it
    (``full_paths``: ``--full-paths``)."""
    if fmt is not None and fmt not in RENDERERS:
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    r = renderer(fmt or format_of(path), table=table, all_rows=all_rows, wide=wide, full_paths=full_paths)
    return r.save(result, path)
