"""Colours that can be told apart: every kernel category against every other, and every two colours drawn in one
picture of the HTML page (CIE76 ΔE in CIELAB, computed here independently of tracekit.render.colors)."""

from __future__ import annotations

import itertools
import json
import math
import re
from importlib import resources
from pathlib import Path

import pytest

import tracekit
from tracekit.render import emit
from tracekit.render.colors import DE_FLOOR, category_colors, color_of, delta_e, picture_colors

ROOT = Path(__file__).resolve().parents[3]
SYN = ROOT / "fixtures" / "synthetic"
CORPUS = ROOT.parent / "shared" / "corpus"


def lab(hex_color: str) -> tuple[float, float, float]:
    """sRGB → CIELAB (D65), written out here so the test does not check the code with itself."""
    h = hex_color.lstrip("#")
    c = [int(h[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
    xyz = (
        0.4124564 * r + 0.3575761 * g + 0.1804375 * b,
        0.2126729 * r + 0.7151522 * g + 0.0721750 * b,
        0.0193339 * r + 0.1191920 * g + 0.9503041 * b,
    )
    xn, yn, zn = 0.95047, 1.0, 1.08883
    f = [
        t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29
        for t in (xyz[0] / xn, xyz[1] / yn, xyz[2] / zn)
    ]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def de76(a: str, b: str) -> float:
    return math.dist(lab(a), lab(b))


def closest_pair(colors) -> tuple[float, str, str]:
    colors = sorted({c.upper() for c in colors})
    return min(((de76(a, b), a, b) for a, b in itertools.combinations(colors, 2)), default=(math.inf, "", ""))


def test_the_distance_is_cie76():
    assert de76("#FFFFFF", "#000000") == pytest.approx(100, abs=0.01)
    assert delta_e("#D62728", "#1F77B4") == pytest.approx(de76("#D62728", "#1F77B4"), abs=0.05)


def test_every_category_has_its_own_distinguishable_colour():
    cats = json.loads(resources.files("tracekit.data").joinpath("categories.json").read_text())["categories"]
    names = [k for k in cats if not k.startswith("_")]
    got = category_colors()
    assert set(names) <= set(got), sorted(set(names) - set(got))
    assert all(color_of(n) == got[n] for n in names)
    d, a, b = closest_pair(got[n] for n in names)
    assert d >= 20, f"{a} and {b} are only ΔE {d:.1f} apart"
    for fixed in ("exposed", "step", "idle", "(no block)"):  # drawn beside the categories in the timeline
        worst = min(de76(color_of(fixed), got[n]) for n in names)
        assert worst >= 20, (fixed, worst)
    assert len({got[n] for n in names}) == len(names)


def test_a_picture_moves_a_colliding_name_and_keeps_the_others():
    # two names hashed to colours too close: the later one moves, the first and the categories keep theirs
    cols = picture_colors(["gemm", "attention", "layer type A", "layer type B", "layer type C"], fixed=["exposed"])
    assert cols["gemm"] == color_of("gemm") and cols["exposed"] == color_of("exposed")
    d, a, b = closest_pair(cols.values())
    assert d >= DE_FLOOR, (a, b, d)
    many = picture_colors([f"type {i}" for i in range(40)])
    assert closest_pair(many.values())[0] >= DE_FLOOR
    assert picture_colors(["KDA", "MoE"])["KDA"] == color_of("KDA")  # no collision: a name keeps its colour


def _pictures(page: str) -> dict[str, set[str]]:
    """The fill colours of each picture of a page (a section under an <h2>), legend swatches included; the rank ×
    step picture of waits is a sequential scale (one hue, light to dark), not categories, and is left out."""
    out = {}
    for sec in re.split(r"<h2>", page)[1:]:
        title = sec.split("</h2>", 1)[0]
        if "<svg" not in sec or 'class="rank-step-waits"' in sec:
            continue
        fills = set(re.findall(r'fill="(#[0-9A-Fa-f]{6})"', sec)) | set(
            re.findall(r"background:(#[0-9A-Fa-f]{6})", sec)
        )
        out[title] = {c.upper() for c in fills}
    return out


def _pages():
    from tracekit.ingest.sglang_log import read_log

    yield (
        "k3_dp16",
        tracekit.report(
            tracekit.load(SYN / "dp16_bs4.trace.json.gz", cache=False), "k3_dp16", log=read_log(SYN / "dp16.launch.log")
        ),
    )
    yield "k3_dp2_dcp8", tracekit.report(tracekit.load(SYN / "dp2dcp8_bs64.trace.json.gz", cache=False), "k3_dp2_dcp8")
    yield "dsv3, no annotation", tracekit.report(tracekit.load(SYN / "dsv3_bs32.trace.json.gz", cache=False))
    b200 = CORPUS / "tracelens" / "tests" / "traces" / "b200" / "eager_trace.json.gz"
    if b200.exists():  # a real trace, read in place
        yield "b200 eager, no annotation", tracekit.report(tracekit.load(b200, cache=False))


@pytest.mark.slow  # four reports (10 s on 2 busy cores)
def test_every_two_colours_in_one_picture_are_distinguishable():
    checked = 0
    for label, res in _pages():
        pics = _pictures(emit(res, "html"))
        assert any(len(c) >= 5 for c in pics.values()), (label, pics)  # pictures with many categories were seen
        for title, colors in pics.items():
            d, a, b = closest_pair(colors)
            assert d >= DE_FLOOR, f"{label} · {title}: {a} and {b} are only ΔE {d:.1f} apart"
            checked += len(colors) >= 2
    assert checked >= 10


def test_a_plot_figure_gets_distinguishable_colours_too():
    from tracekit.render.plots import NO_BLOCK, type_colors

    types = ["KDA", "MLA", "MoE", "Dense", "draft", "head", "tail", "ReplaySSM"] + [f"layer {i}" for i in range(12)]
    cols = type_colors(types)
    assert cols[NO_BLOCK] == color_of(NO_BLOCK) and cols["KDA"] == color_of("KDA")
    d, a, b = closest_pair(cols.values())
    assert d >= DE_FLOOR, (a, b, d)
