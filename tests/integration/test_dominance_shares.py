"""'What dominates the step' gives shares of the step that are shares: a group's kernels are counted once where
they overlap (streams) and only inside their step, against the steps' time. On a DP-attention rank whose steps vary
(one waits 4.9 ms at a dispatch) the communication share once read 103 %."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from fixtures.synthlib import write_run  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("dominance")
    write_run("dp_attn_deepep8", d / "run", truth_path=d / "truth.json")
    return sorted((d / "run").glob("*.json.gz"))


def _shares(res) -> list[tuple[str, float, float]]:
    out = []
    df = res.tables["findings"]
    for _, r in df[df["source"] == "dominance"].iterrows():
        m = re.search(r"takes? (\d+)% of the step", r["title"])
        how = re.search(r"([\d.,]+) (µs|ms) per step in .*?\((\d+)% of the ([\d.,]+) (µs|ms) step\)", r["how"])
        assert m and how, (r["title"], r["how"])
        unit = {"µs": 1e3, "ms": 1e6}
        busy = float(how.group(1).replace(",", "")) * unit[how.group(2)]
        step = float(how.group(4).replace(",", "")) * unit[how.group(5)]
        out.append((r["kind"], float(m.group(1)), 100 * busy / step))
    return out


def test_every_dominance_share_is_a_share_and_reads_true(run):
    seen = 0
    for path in run:
        res = tracekit.findings(tracekit.load(path, cache=False))
        for kind, share, from_text in _shares(res):
            seen += 1
            assert 0 <= share <= 100, (path.name, kind, share)
            assert share == pytest.approx(from_text, abs=1.5), (path.name, kind)  # busy ÷ the step it names
        df = res.tables["findings"]
        for title in df.loc[df["kind"] == "dominant_comm", "title"]:
            m = re.search(r"takes (\d+)% of the step, (\d+)% with no compute running", title)
            assert m and int(m.group(2)) <= int(m.group(1)) <= 100, title
    assert seen
