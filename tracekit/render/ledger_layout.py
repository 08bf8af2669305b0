"""The memory ledger's waterfall, for every picture of it (the PNG/SVG plot and the HTML page): usable memory, then
each fixed-overhead row falling from the level left, then the state pools stacked from zero. The rows and their
names are data (``tracekit/data/ledger_plot.json``)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from importlib import resources


def _ledger_rows() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    doc = json.loads(resources.files("tracekit.data").joinpath("ledger_plot.json").read_text(encoding="utf-8"))
    return [tuple(r) for r in doc["steps"]], [tuple(r) for r in doc["pools"]]


LEDGER_STEPS, LEDGER_POOLS = _ledger_rows()  # (ledger row, name in the picture): the fixed overhead, the state pools


def _finite(v) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def ledger_bars(rows: Mapping[str, float]) -> tuple[list[tuple[str, float, float]], float]:
    """The bars of one ledger's waterfall as (name, bottom, height) in GiB — ``usable`` first, then each
    fixed-overhead row below the level it leaves, then the state pools from zero up — and the level left for the
    state pools. A row the ledger lacks, or whose value is not a finite number, is left out."""
    usable = float(rows.get("usable_gib") or 0.0)
    bars = [("usable", 0.0, usable)]
    level = usable
    for key, name in LEDGER_STEPS:
        v = _finite(rows.get(key))
        if v is None:
            continue
        level -= v
        bars.append((name, level, v))
    bottom = 0.0
    for key, name in LEDGER_POOLS:
        v = _finite(rows.get(key))
        if v is None:
            continue
        bars.append((name, bottom, v))
        bottom += v
    return bars, level
