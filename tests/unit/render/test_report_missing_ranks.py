"""A run that lacks rank files (issue 40): `tracekit report RUN_DIR`'s ranks section has its own line naming the
ranks of the world without a trace and saying that the imbalance is a lower bound — in the terminal at 80 columns,
in Markdown atop the ranks table and in HTML in the run's ranks part — besides the warning. Hand-built summaries,
then the multi-rank generator's missing-rank shape (``drop_files``: the file of a rank is not written)."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from tracekit.render import emit  # noqa: E402
from tracekit.render.ranks_text import missing_line  # noqa: E402
from tracekit.result import Result, shown_ranks  # noqa: E402

WIDTH = 80


def _ranks(missing, world=8, source="--world-size") -> dict:
    return {
        "ranks": world - len(missing),
        "reference_rank": 0,
        "clock": "aligned",
        "steps": 2,
        "partial_steps": 0,
        "collectives": 4,
        "unmatched": 0,
        "imbalance_ns_per_step": 2_211,
        "world_size": world,
        "world_size_from": source,
        "missing_ranks": list(missing),
        "imbalance_is_lower_bound": bool(missing),
        "imbalance_ns_mean_per_step": 5_284,
        "worst_steps": [],
        "straggler_rotates": False,
        "stragglers": [],
        "straggler": None,
    }


def _report(r: dict) -> Result:
    return Result(command="report", inputs=[], params={}, summary={"ranks": r}, tables={})


def _section(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ranks of the run"))
    return lines[start:]


def test_ranks_are_shown_as_spans():
    assert shown_ranks([7, 2, 5, 6]) == "2, 5–7"
    assert shown_ranks(range(3, 64)) == "3–63"
    assert shown_ranks([0, 2, 4, 6, 8, 10, 12, 14, 16, 18], most=8) == "0, 2, 4, 6, 8, 10, 12, 14 and 2 more"


def test_the_line_names_the_missing_ranks_and_says_lower_bound():
    assert missing_line(_ranks([])) is None
    one = missing_line(_ranks([10], world=32, source="distributedInfo"))
    assert (
        one == "Missing: rank 10 of the world of 32 (distributedInfo) has no trace, so the imbalance is a lower bound."
    )
    many = missing_line(_ranks([2, 5, 6, 7]))
    assert many.startswith("Missing: ranks 2, 5–7 of the world of 8 (--world-size) have no trace")


def test_terminal_markdown_and_html_carry_the_line_and_a_whole_run_does_not():
    miss = _report(_ranks([2, 5, 6, 7]))
    sec = _section(emit(miss, "table", width=WIDTH))
    assert sec[1].startswith("Missing: ranks 2, 5–7 of the world of 8") and "lower bound" in " ".join(sec[1:3])
    assert max(len(ln) for ln in sec) <= WIDTH
    assert "**Missing: ranks 2, 5–7 of the world of 8 (--world-size) have no trace" in emit(miss, "md")
    page = emit(miss, "html")
    assert re.search(r'<p class="warn missing-ranks">Missing: ranks 2, 5–7 .*lower bound\.</p>', page)
    whole = _report(_ranks([]))
    assert not any(ln.startswith("Missing") for ln in _section(emit(whole, "table", width=WIDTH)))
    assert "Missing:" not in emit(whole, "md") and "missing-ranks" not in emit(whole, "html")


@pytest.mark.slow  # a generated 4-rank run, one rank's file not written: its report (~2 s)
def test_the_generator_run_missing_a_rank_file(tmp_path):
    from fixtures.synthlib.multirank import write_run

    write_run("nccl_train4", tmp_path / "run", truth_path=tmp_path / "truth.json", drop_files=[2], steps=2, layers=2)
    run = tracekit.load_run(tmp_path / "run")
    assert run.missing_ranks == [2] and run.world_size == 4
    rep = tracekit.report(run)
    r = rep.summary["ranks"]
    assert (r["missing_ranks"], r["imbalance_is_lower_bound"]) == ([2], True)
    want = "Missing: rank 2 of the world of 4 (distributedInfo) has no trace, so the imbalance is a lower bound."
    sec = _section(emit(rep, "table", width=WIDTH))
    assert " ".join(ln.strip() for ln in sec[1:3]) == want  # right under the section's title, wrapped at 80
    assert max(len(ln) for ln in emit(rep, "table", width=WIDTH).splitlines()) <= WIDTH
    md = emit(rep, "md")
    assert md.index(f"**{want}**") > md.index("### ranks") and md.count(want) == 1
    page = emit(rep, "html")
    part = re.search(r"<h2>Ranks of the run[^<]*</h2>(.*?)<h2>", page, re.S)
    assert part and html.escape(want) in part.group(1)
    assert any(w.startswith("ranks: rank 2 of the world of 4") for w in rep.warnings)  # the warning stays
