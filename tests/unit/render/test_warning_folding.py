"""Repeated warnings folded ("… and 19 more like it") in the terminal, Markdown and the HTML page; the JSON keeps
every warning; the HTML ranks part is a table, not a dict's text (issue 39)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import write_as_rank
from tracekit.render.formats import renderer
from tracekit.render.warning_folding import fold_warnings, folded_lines, shape_of
from tracekit.result import Result

SYN = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic"
PER_RANK = [
    f"/runs/r16/1761743581.4810-TP-{i}-DP-{i}-EP-{i}.trace.json.gz: 3 AllGather(s) have no local copy in front"
    for i in range(16)
]
ODD = "layers found automatically (4 per step; types mla+moe)"


def _result(warnings: list[str], summary: dict | None = None) -> Result:
    return Result(
        command="report",
        inputs=[],
        params={},
        summary=summary or {"steps": 4},
        tables={"t": pd.DataFrame({"a": [1]})},
        warnings=warnings,
    )


def _render(fmt: str, r: Result) -> str:
    return "".join(renderer(fmt).pieces(r))


def test_alike_warnings_fold_others_stay():
    assert shape_of(PER_RANK[0]) == shape_of(PER_RANK[15])
    assert shape_of(PER_RANK[0]) != shape_of(ODD)
    folded = fold_warnings([*PER_RANK, ODD, "rank 3: 2 steps", "rank 4: 2 steps"])
    assert [f.more for f in folded] == [15, 0, 0, 0]  # 16 alike: one shown; two alike: both shown
    assert folded[0].text == PER_RANK[0] and folded[0].more_text == "… and 15 more like it"
    assert folded_lines(PER_RANK)[1] == "  … and 15 more like it"


def test_markdown_and_html_fold_json_keeps_all():
    r = _result([*PER_RANK, ODD])
    md = _render("md", r)
    assert md.count("have no local copy") == 1 and "… and 15 more like it" in md and ODD in md
    page = _render("html", r)
    assert page.count("have no local copy") == 1 and "… and 15 more like it" in page
    assert len(json.loads(_render("json", r))["warnings"]) == 17


def test_html_ranks_part_is_a_table():
    ranks = {
        "ranks": 16,
        "clock": "aligned",
        "steps": 4,
        "partial_steps": 0,
        "collectives": 32,
        "unmatched": 0,
        "imbalance_ns_per_step": 346857,
        "straggler": {"rank": 10, "times_last": 12, "of": 24},
    }
    page = _render("html", _result([], {"steps": 4, "ranks": ranks}))
    assert "{&#x27;ranks&#x27;" not in page and "&#x27;straggler&#x27;" not in page  # no dict text
    assert '<table class="record"><caption>ranks</caption>' in page
    assert "<th>straggler times last</th><td class=n>12</td>" in page
    assert "<th>imbalance per step</th><td class=n>0.347 ms</td>" in page


@pytest.mark.slow
def test_terminal_folds_at_80_columns(tmp_path, cli, monkeypatch):
    """A run directory with two ranks and 20 files that are not traces: 20 "left out" warnings, one line and a
    count on stderr, all 20 in the JSON."""
    monkeypatch.setenv("COLUMNS", "80")
    for r in (0, 1):
        write_as_rank(SYN / "dsv3_bs32.trace.json.gz", tmp_path / f"{r}.trace.json.gz", r)
    for i in range(20):
        (tmp_path / f"extra_{i}.json").write_text(json.dumps({"n": i}))
    code, out, err = cli("imbalance", tmp_path)
    assert code == 0
    lines = [x for x in err.splitlines() if x.strip()]
    assert sum("left out" in x for x in lines) == 1 and "  … and 19 more like it" in lines
    assert max(len(x) for x in out.splitlines()) <= 80
    code, out, _ = cli("imbalance", tmp_path, "-f", "json", "-q")
    assert sum("left out" in w for w in json.loads(out)["warnings"]) == 20
