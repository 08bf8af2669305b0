"""The one result shape every analysis returns, and that every renderer accepts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

JSON_SCHEMA_MAJOR = 1
# commands whose contract changed meaning (docs/json-contract.md says how): steps/2 — `source` is
# cpu_launch_window where it was cpu_annotation, empty markers are not steps, no marker is one whole-trace step
SCHEMA_MAJOR = {"steps": 2}


@dataclass(frozen=True)
class Result:
    """An analysis result: scalars in ``summary``, tables in ``tables`` (first = primary).

    ``schema`` names the JSON contract (``tracekit.<command>/<major>``); ``params`` echoes what
    was used; ``warnings`` says what was excluded or doubtful — nothing is dropped silently.
    """

    command: str
    inputs: list[dict[str, Any]]
    params: dict[str, Any]
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    warnings: list[str] = field(default_factory=list)

    @property
    def schema(self) -> str:
        return f"tracekit.{self.command}/{SCHEMA_MAJOR.get(self.command, JSON_SCHEMA_MAJOR)}"

    @property
    def primary_table(self) -> str | None:
        return next(iter(self.tables), None)


def trace_input(trace) -> dict[str, Any]:
    """The ``inputs`` entry describing one trace."""
    return {"path": trace.path, "rank": trace.meta.get("rank"), "from_cache": trace.report.from_cache}
