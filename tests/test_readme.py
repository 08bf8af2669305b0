"""README's Python examples run as written (issue 37): every ```python block of README.md is executed, in order, in one
namespace, in a temporary directory where the files it names exist — `trace.json.gz` (the synthetic DP16 trace,
fixtures/synthetic/dp16_bs4.trace.json.gz) and `profile_dp16/` (a run of two ranks made with fixtures/synth.py). The
code run is the README's text itself, read at test time; nothing of it is copied here."""

from __future__ import annotations

import os
import re

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
DP16 = REPO / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"


def python_blocks(text: str) -> list[str]:
    """The body of every fenced ```python block, in the order they appear."""
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """A run of two ranks, named as sglang names them (tests/integration/test_parity.py builds the same)."""
    from fixtures.synth import build, write_trace

    d = tmp_path_factory.mktemp("readme_ranks")
    for rank in (0, 1):
        tr, _ = build("dsv3", 4, steps=2, seed=rank, step_marker="decode")
        tr["distributedInfo"] = {**tr.get("distributedInfo", {}), "rank": rank}  # each its own rank of the run
        write_trace(d / f"1758612345.12-TP-{rank}.trace.json.gz", tr)
    return d


def test_readme_has_the_python_examples():
    blocks = python_blocks(README.read_text())
    assert blocks, "README.md shows no ```python block"
    code = "\n".join(blocks)
    for call in ("tracekit.load(", "tracekit.report(", "tracekit.imbalance(", ".save(", "tracekit.export("):
        assert call in code, call


@pytest.mark.slow
def test_readme_python_examples_run(tmp_path, monkeypatch, ranks):
    os.symlink(DP16, tmp_path / "trace.json.gz")
    os.symlink(ranks, tmp_path / "profile_dp16", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    for i, block in enumerate(python_blocks(README.read_text())):
        exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
    # what the comments promise: the page with its JSON beside it, and the parquet tables
    assert (tmp_path / "report.html").is_file() and (tmp_path / "report.json").is_file()
    assert any((tmp_path / "out_dir").glob("*.parquet"))
