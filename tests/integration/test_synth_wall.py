"""tracekit's steps (A1) and wall decomposition (A2) against the synthetic deployments' ground truth.

The truth is computed by fixtures/synthlib/truth.py from the generator's own schedule (a pure-Python
sweep that shares no code with tracekit); tracekit must agree to the nanosecond in every step, for both
definitions of the AllGather copies.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from tracekit.analyses import decompose, find_steps  # noqa: E402
from fixtures.synth import FIXTURE_DIR, FIXTURES, build, write_trace  # noqa: E402

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

COLUMNS = ("wall_ns", "busy_ns", "ag_only_ns", "idle_ns")


def _check(trace_path: Path, truth: dict) -> None:
    trace = tracekit.load(trace_path, cache=False)
    steps = find_steps(trace)
    assert steps.table[["start_ns", "end_ns"]].values.tolist() == [[s["start_ns"], s["end_ns"]] for s in truth["steps"]]
    for ag in ("ptop", "ptop+local"):
        per_step = decompose(trace, ag=ag).tables["per_step"]
        got = [[int(r[c]) for c in ("start_ns",) + COLUMNS] for _, r in per_step.iterrows()]
        want = [
            [s["start_ns"], s["wall_ns"], s[ag]["busy_ns"], s[ag]["ag_only_ns"], s[ag]["idle_ns"]]
            for s in truth["steps"]
        ]
        assert got == want, f"{trace_path.name} ag={ag}"


@pytest.mark.parametrize("fx", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_committed_fixture_matches_truth(fx):
    truth = json.loads((FIXTURE_DIR / fx.truth_name).read_text())
    _check(FIXTURE_DIR / fx.trace_name, truth)


@pytest.mark.parametrize(
    "preset,bs,seed,noise,marker",
    [
        ("dp16", 1, 11, True, "decode"),
        ("dp16", 8, 5, False, "both"),
        ("dp2dcp8", 64, 7, True, "run_batch"),
    ],
)
def test_fresh_deployment_matches_truth(tmp_path, preset, bs, seed, noise, marker):
    trace, truth = build(preset, bs, steps=2, seed=seed, noise=noise, step_marker=marker)
    _check(write_trace(tmp_path / "t.trace.json.gz", trace), truth)
