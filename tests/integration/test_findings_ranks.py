"""`tracekit findings RUN_DIR` (issue 28): what DP imbalance costs per step and which rank makes the others wait,
against the multi-rank generator's truth (fixtures/synthlib/multirank.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures.synthlib import write_run  # noqa: E402

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    out = {}
    for name, preset, knobs in (
        ("dp8", "dp_attn_deepep8", {}),
        ("train", "nccl_train4", {}),
        ("tie", "dp_attn_deepep8", {"tie": True}),
    ):
        _, truth = write_run(preset, d / name, truth_path=d / f"{name}.truth.json", **knobs)
        out[name] = (d / name, json.loads(Path(truth).read_text()))
    return out


def test_dp_imbalance_names_the_rank_its_batch_and_the_cost(runs, cli):
    run, truth = runs["dp8"]
    code, out, err = cli("findings", run, "-f", "json", "--min-ms", "0")
    assert code == 0, err
    doc = json.loads(out)
    (f,) = [r for r in doc["tables"]["findings"] if r["kind"] == "rank_imbalance"]
    s = truth["summary"]
    rank = s["straggler"]["rank"]
    median_bs = sorted(r["median_bs"] for r in truth["by_step"])[(len(truth["by_step"]) - 1) // 2]
    assert f"rank {rank} had bs 64 against a median of {median_bs}" in f["title"]
    assert f["gain_ms_per_step"] * 1e6 == pytest.approx(s["imbalance_ns_per_step"], rel=0.01)
    assert f["basis"] == "measured" and f["command"] == f"tracekit imbalance {run}"
    assert "batch" in f["suggestion"] and not f["minor"]


def test_a_compute_straggler_is_named_with_its_cause(runs, cli):
    run, truth = runs["train"]
    code, out, err = cli("findings", run, "-f", "json", "--min-ms", "0")
    assert code == 0, err
    rows = json.loads(out)["tables"]["findings"]
    assert rows and f"rank {truth['summary']['straggler']['rank']} " in rows[0]["title"]
    assert "clocks, thermals" in rows[0]["suggestion"]  # the compute cause's advice (findings.json rank_advice)
    # a training run's steps carry no batch: its ranks' imbalance, not "DP imbalance … had bs – against –"
    assert rows[0]["kind"] == "rank_imbalance_unbatched" and rows[0]["title"].startswith("Rank imbalance costs")
    assert "bs" not in rows[0]["title"] and "(compute)" in rows[0]["title"]
    code, out, err = cli("report", run, "--no-cache")
    assert code == 0, err
    assert "DP imbalance" not in out and "Imbalance" in out


def test_ranks_that_tie_give_no_finding_and_say_why(runs, cli):
    run, _ = runs["tie"]
    code, out, err = cli("findings", run, "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert (
        doc["tables"]["findings"] == []
        and "ties within the clock alignment's residual" in doc["tables"]["sources"][0]["reason"]
    )
