"""The HTML page without a browser: self-contained, escaped, bounded, the same colour for a name everywhere."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

import tracekit
from tracekit.annotation import load_annotation
from tracekit.render import emit
from tracekit.render.colors import color_of
from tracekit.render.html.tables import MAX_ROWS
from tracekit.render.plots import type_colors
from tracekit.result import Result

from conftest import gpu_ann, kernel, load_events

SYN = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic"
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import""", re.I)


def test_the_page_needs_no_network_and_escapes_names(tmp_path):
    evil = '<script>alert("x")</script><img src="http://evil.example/x.png">'
    t = load_events(
        tmp_path, [gpu_ann("scheduler.run_batch", 0.0, 100.0), kernel(evil, 0.0, 40.0), kernel("gemm", 50.0, 40.0)]
    )
    page = emit(tracekit.report(t), "html")
    assert not EXTERNAL.search(page), EXTERNAL.search(page).group(0)
    res = Result(
        command="kernels",
        inputs=[{"path": evil}],
        params={"select": evil},
        summary={"top_name": evil},
        tables={"kernels": pd.DataFrame({"name": [evil], "total_ns": [5]})},
        warnings=[evil],
    )
    page = emit(res, "html")
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page
    assert not EXTERNAL.search(page)
    assert page.count("<script>") == 1  # the one inline sorting script


def test_k3_report_page_holds_its_sections_and_stays_small():
    t = tracekit.load(SYN / "dp16_bs4.trace.json.gz", cache=False)
    res = tracekit.report(t, load_annotation("k3_dp16"))
    page = emit(res, "html")
    for section in (
        "Findings",
        "Summary",
        "Wall decomposition per step",
        "Kernel time per block type",
        "timeline (the median step)",
        "Trace health",
        "How these numbers were obtained",
    ):
        assert section in page, section
    assert len(page.encode()) < 2_000_000
    assert res.tables["findings"].iloc[0]["title"] in page


def test_long_tables_are_cut_with_a_note():
    df = pd.DataFrame({"name": [f"k{i}" for i in range(MAX_ROWS + 7)], "total_ns": range(MAX_ROWS + 7)})
    page = emit(Result(command="kernels", inputs=[], params={}, summary={}, tables={"kernels": df}), "html")
    assert f"the first {MAX_ROWS:,} of {MAX_ROWS + 7:,} rows" in page
    assert page.count("<tr>") == MAX_ROWS + 1  # rows + the header


def test_one_colour_per_name_whatever_else_is_drawn():
    assert color_of("KDA") == type_colors(["KDA", "MoE"])["KDA"] == type_colors(["KDA", "zzz", "aaa"])["KDA"]
    assert color_of("some_new_type") == color_of("some_new_type") and color_of("some_new_type").startswith("#")
    assert type_colors(["x", "y"])["x"] == type_colors(["x"])["x"]


def test_a_notebook_shows_what_the_page_shows():
    t = tracekit.load(SYN / "dp16_bs4.trace.json.gz", cache=False)
    res = tracekit.report(t, "k3_dp16")
    cell = res._repr_html_()
    assert cell.startswith('<div class="tracekit-result"><style>.tracekit-result')
    assert "<!DOCTYPE" not in cell and "<body" not in cell and "<script" not in cell  # a fragment, styles scoped
    for section in ("Findings", "Wall decomposition per step", "timeline (the median step)", "Trace health"):
        assert section in cell, section
    assert "result.frames()[NAME]" in cell  # long tables say where every row is
    css = cell.split("<style>", 1)[1].split("</style>", 1)[0]
    assert all(rule.startswith(".tracekit-result") for rule in css.split("}") if rule)


def _many_steps(n: int) -> Result:
    """A report-shaped result of ``n`` steps: per-step tables of n rows, without running an analysis."""
    import numpy as np

    step = np.arange(n)
    wall = pd.DataFrame(
        {
            "step": step,
            "start_ns": step * 100_000,
            "wall_ns": 90_000 + step % 7,
            "busy_ns": 70_000 + step % 5,
            "ag_only_ns": step % 3,
            "idle_ns": 20_000 - step % 5 - step % 3,
        }
    )
    comm = pd.DataFrame({"step": step, "critical_ns": step % 11, "side_ns": step % 13})
    health = pd.DataFrame(
        {"check": [f"c{i}" for i in range(3)], "ok": [True, False, True], "detail": ["", "one step is long", ""]}
    )
    return Result(
        command="report",
        inputs=[{"path": "many.json"}],
        params={},
        summary={"steps": n, "median_wall_ns": 90_003},
        tables={"wall": wall, "steps": wall[["step", "start_ns", "wall_ns"]], "comm": comm, "health": health},
    )


def test_a_page_of_many_steps_is_sampled_bounded_and_says_so():
    """10^5 steps: the per-step picture draws MAX_BARS steps evenly spaced through the trace and says it sampled;
    every table shows its first MAX_ROWS rows and says how many it has; the page takes under a second here (the
    bound is loose for a loaded machine; listing every step for a picture of 60 took 13 s)."""
    import time

    from tracekit.render.html.svg import MAX_BARS

    n = 100_000
    res = _many_steps(n)
    t0 = time.perf_counter()
    page = emit(res, "html")
    took = time.perf_counter() - t0
    assert took < 20, took
    assert f"Wall decomposition per step ({MAX_BARS:,} of {n:,} steps, sampled)" in page
    assert f"sampled: {MAX_BARS:,} of {n:,} steps drawn, evenly spaced from the first to the last" in page
    assert ">step 0<" in page and f">step {n - 1}<" in page and ">step 1<" not in page  # first, last; sampled
    assert page.count("<rect") <= 3 * MAX_BARS + 10
    assert page.count("<tr") <= 4 * (MAX_ROWS + 1)  # wall, steps, comm: the first MAX_ROWS rows; health: all
    assert page.count(f"the first {MAX_ROWS:,} of {n:,} rows") == 3
    assert len(page.encode()) < 3_000_000


def test_a_picture_cut_at_max_bars_says_so():
    from tracekit.render.html.svg import MAX_BARS, stacked_bars

    svg = stacked_bars([(f"p{i}", [("busy", 1.0)]) for i in range(MAX_BARS + 5)], "ms", 1.0)
    assert f"the first {MAX_BARS:,} of {MAX_BARS + 5:,} bars drawn" in svg
    assert "bars drawn" not in stacked_bars([("p", [("busy", 1.0)])], "ms", 1.0)
