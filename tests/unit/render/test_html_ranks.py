"""The rank × step picture of waits on the page of `tracekit imbalance` (issue 28): a cell per recorded rank-step
coloured by its wait, the straggler of each step marked, the summary's sentence above it, bounded and saying when it
samples — checked on the SVG itself (no browser needed)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from fixtures.synthlib.multirank import write_run
from tracekit.render import emit
from tracekit.render.html.ranks import MAX_CELLS, MAX_RANK_ROWS, MAX_STEP_COLS, MIN_STEP_COLS, wait_color
from tracekit.result import Result
from tracekit.fan_out import imbalance

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import""", re.I)
CELL = re.compile(
    r'<rect class="cell" [^>]*fill="(#[0-9A-F]{6})"><title>rank (\d+) · step (\d+) · (bs \d+|bs n/a)'
    r"(?: · [^<·]*)? · wait ([0-9,.]+) ms</title></rect>"
)
MARK = re.compile(r'<circle class="straggler" [^>]*><title>step (\d+): straggler rank (\d+)')


def _picture(page: str) -> str:
    m = re.search(r"<h2>Waits per rank and step[^<]*</h2>.*?</svg>", page, re.S)
    assert m, "no rank × step picture on the page"
    return m.group(0)


def _luma(hex_color: str) -> float:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return 0.299 * r + 0.587 * g + 0.114 * b


@pytest.fixture(scope="module")
def run8(tmp_path_factory):
    """An 8-rank DP-attention + DeepEP run in which rank 3 starts 1 step late and rank 5 stops 1 step early, read
    through a relative path (as a user in the folder above would)."""
    base = tmp_path_factory.mktemp("ranks")
    write_run(
        "dp_attn_deepep8", base / "run", truth_path=base / "truth.json", late_start={3: 1}, stop_early={5: 1}, steps=6
    )
    import os

    here = os.getcwd()
    os.chdir(base)
    try:
        res = imbalance("run", jobs=1, cache=False)
        page = emit(res, "html")
    finally:
        os.chdir(here)
    return base, res, page


@pytest.mark.slow
def test_the_page_of_an_8_rank_run_draws_a_cell_per_recorded_rank_step(run8):
    base, res, page = run8
    svg = _picture(page)
    steps = res.tables["steps"]
    n_ranks, n_steps = res.summary["ranks"], res.summary["steps"]
    assert (n_ranks, n_steps) == (8, 6)
    unrecorded = n_ranks * n_steps - len(steps)
    assert unrecorded >= 2  # rank 3's first step, rank 5's last: no row, no cell
    cells = CELL.findall(svg)
    assert len(cells) == n_ranks * n_steps - unrecorded == svg.count('class="cell"')
    drawn = {(int(r), int(s)): (fill, bs, float(w.replace(",", ""))) for fill, r, s, bs, w in cells}
    want = {(int(r.rank), int(r.step)): r for r in steps.itertuples()}
    assert set(drawn) == set(want)
    assert (3, 0) not in drawn and (5, n_steps - 1) not in drawn
    for key, (fill, bs, ms) in drawn.items():  # the hover title holds the rank-step's bs and wait
        assert bs == f"bs {int(want[key].bs)}" and ms == pytest.approx(want[key].wait_ns / 1e6, abs=5e-4)
    top = steps["wait_ns"].max()
    for key, (fill, _, _) in drawn.items():  # coloured by the sequential scale, 0 to the longest wait
        assert fill == wait_color(want[key].wait_ns / top)
    longest = max(drawn, key=lambda k: drawn[k][2])
    shortest = min(drawn, key=lambda k: drawn[k][2])
    assert _luma(drawn[longest][0]) < _luma(drawn[shortest][0]) < 250  # darker = longer; no wait is not white


def test_the_straggler_marks_are_by_step_and_the_sentence_is_the_summary(run8):
    base, res, page = run8
    svg = _picture(page)
    marks = {int(s): int(r) for s, r in MARK.findall(svg)}
    by = res.tables["by_step"].dropna(subset=["straggler"])
    assert marks == {int(s): int(r) for s, r in zip(by["step"], by["straggler"])}
    assert len(marks) == svg.count('class="straggler"') >= 1
    s, st = res.summary, res.summary["straggler"]
    sentence = (
        f"rank {st['rank']} was last in {st['times_last']:,} of {st['of']:,} collectives; imbalance "
        f"{s['imbalance_ns_per_step'] / 1e6:,.3f} ms per step (median)"
    )
    assert sentence in svg
    assert st["rank"] == 3  # the preset's big batch: rank 3 is last most often
    # near the top: before the summary, the tables and the rest
    assert page.index("Waits per rank and step") < page.index("<h2>Summary</h2>") < page.index("<h2>Tables</h2>")
    assert "ms</text>" in svg and "linearGradient" in svg  # the scale, in ms
    assert "sampled" not in svg


def test_the_page_names_no_absolute_path_and_needs_no_network(run8):
    base, res, page = run8
    assert str(base) not in page and str(base.resolve()) not in page
    assert "/tmp/" not in page and not re.search(r"[A-Za-z]:\\\\", page)
    assert not EXTERNAL.search(page)
    assert page.count("<script>") == 1
    svg = _picture(page)
    for r in res.tables["ranks"].itertuples():  # each rank's label names its file as the table does
        assert f"rank {r.rank}: {r.file}</title>" in svg


def _synthetic(n_ranks: int, n_steps: int, *, missing_every: int = 97) -> Result:
    """An imbalance result built by hand: every rank-step recorded but every ``missing_every``-th; the straggler of
    step s is rank (7 s) mod n (rank 1 twice as often)."""
    step = np.repeat(np.arange(n_steps), n_ranks)
    rank = np.tile(np.arange(n_ranks), n_steps)
    keep = (np.arange(len(step)) % missing_every) != 5
    steps = pd.DataFrame(
        {
            "step": step[keep],
            "rank": rank[keep],
            "local_step": step[keep],
            "phase": "decode",
            "bs": 16,
            "start_ns": step[keep] * 1_000_000,
            "wall_ns": 900_000,
            "wait_ns": (step[keep] * 31 + rank[keep] * 17) % 250_000,
        }
    )
    strag = [(1 if s % 2 else (7 * s) % n_ranks) for s in range(n_steps)]
    by_step = pd.DataFrame(
        {
            "step": np.arange(n_steps),
            "imbalance_ns": 300_000,
            "straggler": strag,
            "straggler_bs": 64,
            "median_bs": 16,
            "max_wait_rank": 0,
        }
    )
    ranks = pd.DataFrame({"rank": np.arange(n_ranks), "file": [f"rank{r}/trace.json.gz" for r in range(n_ranks)]})
    return Result(
        command="imbalance",
        inputs=[{"path": "run"}],
        params={},
        summary={
            "ranks": n_ranks,
            "reference_rank": 0,
            "clock": "aligned",
            "steps": n_steps,
            "partial_steps": 0,
            "collectives": 10 * n_steps,
            "unmatched": 0,
            "imbalance_ns_per_step": 300_000,
            "straggler": {"rank": 1, "times_last": n_steps // 2, "of": 9 * n_steps},
        },
        tables={"ranks": ranks, "steps": steps, "by_step": by_step},
    )


def test_many_steps_are_sampled_evenly_and_the_page_says_so():
    n_ranks, n_steps = 64, 1_000
    page = emit(_synthetic(n_ranks, n_steps), "html")
    svg = _picture(page)
    assert f"Waits per rank and step ({MAX_STEP_COLS:,} of {n_steps:,} steps, sampled)" in svg
    assert f"sampled: {MAX_STEP_COLS:,} of {n_steps:,} steps drawn, evenly spaced from the first to the last" in page
    cells = CELL.findall(svg)
    drawn_steps = sorted({int(s) for *_, s, _, _ in cells})
    assert len(drawn_steps) == MAX_STEP_COLS and drawn_steps[0] == 0 and drawn_steps[-1] == n_steps - 1
    assert np.ptp(np.diff(drawn_steps)) <= 1  # evenly spaced
    assert len(cells) <= n_ranks * MAX_STEP_COLS
    assert len(cells) > 0.98 * n_ranks * MAX_STEP_COLS
    assert {int(s) for s, _ in MARK.findall(svg)} == set(drawn_steps)  # a mark per drawn step
    assert "rank 1 was last in 500 of 9,000 collectives" in svg


@pytest.mark.slow
def test_many_ranks_draw_fewer_steps_and_past_256_ranks_sample_ranks_keeping_the_stragglers():
    svg = _picture(emit(_synthetic(128, 400), "html"))  # 128 ranks: the cell budget allows 100 steps
    cols = MAX_CELLS // 128
    assert f"({cols:,} of 400 steps, sampled)" in svg
    assert len({s for *_, s, _, _ in CELL.findall(svg)}) == cols and len(CELL.findall(svg)) <= MAX_CELLS
    n_ranks = 1_000
    svg = _picture(emit(_synthetic(n_ranks, 120), "html"))
    assert f"({MIN_STEP_COLS:,} of 120 steps, {MAX_RANK_ROWS:,} of {n_ranks:,} ranks, sampled)" in svg
    cells = CELL.findall(svg)
    assert len(cells) <= MAX_CELLS
    ranks = {int(r) for _, r, *_ in cells}
    assert len(ranks) == MAX_RANK_ROWS and 1 in ranks and 0 in ranks and n_ranks - 1 in ranks
    marks = MARK.findall(svg)
    assert ("1" in {r for _, r in marks}) and all(int(r) in ranks for _, r in marks)
    assert "rank 0: rank0/trace.json.gz</title>" in svg  # a file in a rank folder keeps the folder within the run


def test_an_absolute_file_shows_its_name_only():
    res = _synthetic(2, 2)
    res.tables["ranks"]["file"] = ["/home/someone/run/a.json", ["/home/someone/run/b-DECODE.json", "b-EXTEND.json"]]
    svg = _picture(emit(res, "html"))
    assert "rank 0: a.json</title>" in svg and "rank 1: b-DECODE.json, b-EXTEND.json</title>" in svg
    assert "/home/someone" not in svg


def test_a_run_where_every_collective_ties_says_so():
    res = _synthetic(4, 3)
    res.summary["straggler"] = None
    res.tables["by_step"]["straggler"] = None
    svg = _picture(emit(res, "html"))
    assert "no rank was last: every collective was a tie; imbalance 0.300 ms per step (median)" in svg
    assert 'class="straggler"' not in svg and svg.count('class="cell"') == len(res.tables["steps"]) == 11


def test_a_result_without_rank_steps_draws_no_such_picture():
    res = Result(
        command="kernels",
        inputs=[],
        params={},
        summary={},
        tables={"kernels": pd.DataFrame({"name": ["a"], "total_ns": [1]})},
    )
    assert "Waits per rank and step" not in emit(res, "html")
