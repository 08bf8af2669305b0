"""What an SQLite file that no reader takes is, by its tables: the one sentence of its refusal (exit 3).

A file reaches here when it is an SQLite database (SQLite's magic header) that the rocpd reader
(:mod:`tracekit.ingest.rocpd_sqlite`) does not take and the Nsight Systems reader
(:class:`tracekit.ingest.nsys_database.Database`) cannot read. The kinds recognised (an nsys export cut down, a
rocprof-compute analysis database, a rocmProfileData trace, …) and their sentences are data
(``tracekit/data/sqlite_kinds.json``): the first kind whose tables fit says what the file is and what to pass instead;
any other database is named as neither profiler's, with its tables listed, so the user sees what they passed.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from ..errors import InputError


@cache
def rules() -> dict[str, Any]:
    return json.loads(resources.files("tracekit.data").joinpath("sqlite_kinds.json").read_text(encoding="utf-8"))


def kind_of(tables: set[str] | frozenset[str]) -> dict[str, Any] | None:
    """The first kind of ``sqlite_kinds.json`` whose tables fit ``tables`` (a database's table and view names):
    every one of its ``all``, one of its ``any`` where it has them, none of its ``none``; None when none fits."""
    for kind in rules()["kinds"]:
        fits = all(t in tables for t in kind.get("all", ()))
        fits = fits and (not kind.get("any") or any(t in tables for t in kind["any"]))
        if fits and not any(t in tables for t in kind.get("none", ())):
            return kind
    return None


def not_rocpd(tables: set[str] | frozenset[str]) -> bool:
    """Whether a database with ``rocpd_`` tables is another format than rocprofv3's (its kind says ``not_rocpd``),
    so that the rocpd reader leaves it to this module's sentence."""
    kind = kind_of(tables)
    return bool(kind and kind.get("not_rocpd"))


def table_list(tables: set[str] | frozenset[str]) -> str:
    """``its tables: a, b, c`` (sorted, at most ``list_at_most`` of them, then how many in all)."""
    if not tables:
        return "it has no tables"
    names = sorted(tables)
    most = int(rules()["list_at_most"])
    shown = ", ".join(names[:most])
    return f"its tables: {shown}" + (f", … ({len(names)} in all)" if len(names) > most else "")


def refusal(shown: str, tables: set[str] | frozenset[str]) -> InputError:
    """The refusal of an SQLite file no reader takes: its kind's sentence, else the sentence of another program's
    database listing its tables."""
    kind = kind_of(tables)
    if kind is not None:
        return InputError(kind["says"].format(shown=shown, none=", ".join(kind.get("none", ()))))
    return InputError(rules()["other"].format(shown=shown, tables=table_list(tables)))


__all__ = ["kind_of", "not_rocpd", "refusal", "rules", "table_list"]
