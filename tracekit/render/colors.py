"""One colour per name (block type, layer type, kernel category, wall part) in every picture: the plots and the
HTML report ask here, so the same block type never changes colour between two pictures (tracekit/data/colors.json).

Kernel categories take the colours colors.json lists for them — a hue per family, shades per category, every two
at least CIE76 ΔE 20 apart. Other names take their own colour, or one of the palette by a stable hash of the name.
Within one picture every two colours must be told apart: :func:`picture_colors` keeps each name's colour unless it
comes within ``DE_FLOOR`` of a colour already drawn there, and then moves that name (never a category or a
fixed colour such as exposed time) to the first candidate far enough from all.
"""

from __future__ import annotations

import json
import math
import zlib
from functools import lru_cache
from importlib import resources
from typing import Iterable

from ..errors import DataFileError

DE_FLOOR = 15.0  # CIE76 ΔE: two colours in one picture at least this far apart (a swatch of 10 px tells them apart)


@lru_cache(maxsize=1)
def _colors() -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
    try:
        doc = json.loads(resources.files("tracekit.data").joinpath("colors.json").read_text(encoding="utf-8"))
        return (
            {str(k): str(v) for k, v in doc["named"].items()},
            {str(k): str(v) for k, v in doc.get("categories", {}).items()},
            tuple(str(c) for c in doc["palette"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataFileError(
            f"tracekit/data/colors.json is invalid ({exc}); restore it from the tracekit package"
        ) from exc


def category_colors() -> dict[str, str]:
    """The colour of each kernel category colors.json lists (a copy)."""
    return dict(_colors()[1])


def color_of(name) -> str:
    """The colour of ``name`` (a ``#RRGGBB`` string): a kernel category's, else its own if colors.json names it, else
    a palette colour picked by a stable hash of the name (never by what else is drawn)."""
    named, cats, palette = _colors()
    key = str(name)
    if key in cats:
        return cats[key]
    if key in named:
        return named[key]
    return palette[zlib.crc32(key.encode("utf-8")) % len(palette)]


# --------------------------------------------------------------------------- colour distance (CIE76 ΔE in CIELAB)


@lru_cache(maxsize=4096)
def lab(hex_color: str) -> tuple[float, float, float]:
    """CIELAB (D65) of a ``#RRGGBB`` colour."""
    h = hex_color.lstrip("#")
    rgb = [int(h[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = lambda t: t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116  # noqa: E731
    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def delta_e(a: str, b: str) -> float:
    """CIE76 colour difference of two ``#RRGGBB`` colours (about 2.3 is just noticeable)."""
    return math.dist(lab(a.upper()), lab(b.upper()))


def _lch_hex(L: float, C: float, h: float) -> str:
    """The sRGB colour of CIE LCh(ab) (L, C, h°), chroma reduced until it is inside the gamut."""
    while True:
        a, b = C * math.cos(math.radians(h)), C * math.sin(math.radians(h))
        fy = (L + 16) / 116
        fx, fz = fy + a / 500, fy - b / 200
        inv = lambda t: t**3 if t**3 > 0.008856 else (t - 16 / 116) / 7.787  # noqa: E731
        x, y, z = 0.95047 * inv(fx), inv(fy), 1.08883 * inv(fz)
        lin = (
            3.2406 * x - 1.5372 * y - 0.4986 * z,
            -0.9689 * x + 1.8758 * y + 0.0415 * z,
            0.0557 * x - 0.2040 * y + 1.0570 * z,
        )
        if all(-1e-9 <= c <= 1 + 1e-9 for c in lin) or C <= 0:
            break
        C = max(C - 2, 0)
    g = [12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055 for c in lin]
    return "#" + "".join(f"{int(round(min(max(c, 0.0), 1.0) * 255)):02X}" for c in g)


@lru_cache(maxsize=1)
def _candidates() -> tuple[str, ...]:
    """Where a name moves when its colour is taken in a picture: the palette, then an even LCh grid (hues every 20°,
    three lightness levels, two chromas), in a fixed order."""
    grid = [_lch_hex(L, C, h) for L in (55, 72, 38) for C in (55, 35) for h in range(0, 360, 20)]
    return tuple(dict.fromkeys([*(c.upper() for c in _colors()[2]), *grid]))


def picture_colors(names: Iterable, fixed: Iterable = ()) -> dict[str, str]:
    """The colour of each name in one picture: :func:`color_of`, except that a name whose colour is within
    ``DE_FLOOR`` of one already given in this picture takes the first candidate at least ``DE_FLOOR`` from all of
    them. ``fixed`` names (and kernel categories) are given first and never move; the others keep their order."""
    cats = _colors()[1]
    order = list(dict.fromkeys(str(n) for n in [*fixed, *names]))
    fixed_set = {str(n) for n in fixed}
    first = [n for n in order if n in fixed_set or n in cats]
    out: dict[str, str] = {n: color_of(n) for n in first}
    for n in order:
        if n in out:
            continue
        c = color_of(n)
        if any(delta_e(c, u) < DE_FLOOR for u in out.values()):
            c = next((k for k in _candidates() if all(delta_e(k, u) >= DE_FLOOR for u in out.values())), c)
        out[n] = c
    return out
