"""`report` asks which shipped annotation fits (best_fit) without running the block engine on annotations that
cannot (issue 30): their ceiling, judged from the kernel names, markers and hardware, is not above fits_above.
Here the ceiling is checked against the engine's score of every shipped annotation, and best_fit against the full
ranking, on the synthetic fixtures and the shared corpus (where present)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tests.conftest import CORPUS
from tracekit.analyses.structure import fit as F
from tracekit.analyses.structure.layers import layers
from tracekit.analyses.steps.resolve import find_steps
from tracekit.errors import TracekitError

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

FIXTURES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "synthetic").glob("*.trace.json.gz"))
CORPUS_FILES = sorted(
    p
    for d in (CORPUS / "hta" / "tests" / "data", CORPUS / "tracelens" / "tests" / "traces")
    if d.is_dir()
    for p in d.rglob("*.json.gz")
)


def _params():
    out = [pytest.param(p, id=p.name) for p in FIXTURES]
    out += [pytest.param(p, id=p.relative_to(CORPUS).as_posix()) for p in CORPUS_FILES]
    return out


@pytest.mark.parametrize("path", _params())
def test_the_ceiling_bounds_the_score_and_best_fit_is_the_full_rankings_top(path):
    tr = tracekit.load(path, cache=False)
    try:
        st = find_steps(tr)
    except TracekitError:
        pytest.skip("no steps: report refuses this trace")
    lay = layers(tr, steps=st, missing_ok=True)
    full = F.annotation_fit(tr, steps=st, layers=lay)
    want = (full.summary["best"], full.summary["best_score"]) if full.summary["best"] is not None else None
    assert F.best_fit(tr, st, layers=lay) == want
    auto = (lay.summary.get("layers_per_step") or None, lay.summary.get("segments_per_layer"))
    table = full.tables["annotations"]
    for name, ann, _, _ in F._candidates(None):
        row = table[table["name"] == name].iloc[0]
        if ann is None or ann.blocks is None or row["score"] != row["score"]:  # unscored: null
            continue
        parts = {
            "hardware": None if row["hardware"] != row["hardware"] else row["hardware"],
            "framework": None if row["framework"] != row["framework"] else row["framework"],
        }
        top = F._ceiling(tr, ann, find_steps(tr, st, ann=ann), parts, auto)
        assert top + 1e-9 >= row["score"], (name, top, row["score"])
