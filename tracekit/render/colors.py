"""One colour per name (block type, layer type, kernel category, wall part) in every picture: the plots and the
HTML report ask here, so the same block type never changes colour between two pictures (tracekit/data/colors.json)."""
from __future__ import annotations

import json
import zlib
from functools import lru_cache
from importlib import resources

from ..errors import DataFileError


@lru_cache(maxsize=1)
def _colors() -> tuple[dict[str, str], tuple[str, ...]]:
    try:
        doc = json.loads(resources.files("tracekit.data").joinpath("colors.json").read_text(encoding="utf-8"))
        return {str(k): str(v) for k, v in doc["named"].items()}, tuple(str(c) for c in doc["palette"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DataFileError(f"tracekit/data/colors.json is invalid ({exc})") from exc


def color_of(name) -> str:
    """The colour of ``name`` (a ``#RRGGBB`` string): its own if colors.json names it, else a palette colour picked
    by a stable hash of the name (never by what else is drawn)."""
    named, palette = _colors()
    key = str(name)
    if key in named:
        return named[key]
    return palette[zlib.crc32(key.encode("utf-8")) % len(palette)]
