"""A run's findings (issue 40, review of the run commands): `findings RUN` lists the analysed rank's own findings
ranked with the rank findings, as `report RUN` lists them (one function, ``run_findings``); ``--device N`` on an
export of several processes analyses the rank on that GPU and says so; a missing rank makes the rank finding a
lower bound in its title and data; the straggler's counts come from the rows the summary counts, and a finding that
names another rank says the summary's straggler too."""

from __future__ import annotations

import json

import pytest

import tracekit
from fixtures.synthlib.multirank import write_run
from tests.unit.fleet.test_nsys_ranks import build
from tracekit.analyses.findings.imbalance_findings import rank_findings_of

pytestmark = pytest.mark.slow  # an export's imbalance, report and findings: a few seconds in all


def _json(cli, *args):
    code, out, err = cli(*args, "-f", "json", "--no-cache")
    assert code == 0, err
    return json.loads(out)


def test_findings_of_a_run_are_the_reports_and_device_names_the_rank(tmp_path, cli, monkeypatch):
    f = build(tmp_path / "node.sqlite")
    fnd, rep = _json(cli, "findings", f), _json(cli, "report", f)
    titles = [r["title"] for r in fnd["tables"]["findings"]]
    assert titles == [r["title"] for r in rep["tables"]["findings"]]  # one list, one order
    assert {r["source"] for r in fnd["tables"]["findings"]} > {"ranks"}  # the reference rank's own findings too
    assert {s["source"] for s in fnd["tables"]["sources"]} >= {"ranks", "idle", "comm"}
    assert fnd["summary"]["findings"] == rep["summary"]["findings"] == len(titles)
    assert fnd["summary"]["rank"] == 0 and rep["summary"]["ranks"]["analysed_rank"] == 0
    one = _json(cli, "--device", "1", "findings", f)
    assert one["summary"]["rank"] == 1 and one["summary"]["reference_rank"] == 0
    rep1 = _json(cli, "--device", "1", "report", f)
    assert rep1["summary"]["ranks"]["analysed_rank"] == 1 and rep1["inputs"][0]["rank"] == 1
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli("--device", "1", "report", f, "--no-cache")
    assert code == 0, err
    assert "this report's trace: rank 1 (reference rank 0)" in out and "reference rank 0 (this report's" not in out


def test_a_missing_rank_makes_the_finding_a_lower_bound(tmp_path, cli):
    f = build(tmp_path / "node.sqlite")
    doc = _json(cli, "findings", f, "--world-size", "3")
    (r,) = [x for x in doc["tables"]["findings"] if x["source"] == "ranks"]
    assert "costs at least" in r["title"] and "rank 2 of the world of 3 has no trace (a lower bound)" in r["title"]
    assert r["evidence"].startswith("a lower bound: rank 2 of the world of 3 (--world-size) has no trace")
    assert doc["summary"]["missing_ranks"] == [2] and doc["summary"]["imbalance_is_lower_bound"]


def test_one_straggler_rule_from_the_same_rows(tmp_path):
    # a rotating straggler: each rank heavy in one step, every rank last equally often
    write_run(
        "nccl_train4",
        tmp_path / "rot",
        truth_path=tmp_path / "rot.json",
        heavy_at=[[0, 1, 2.0], [1, 3, 2.0], [2, 0, 2.0], [3, 2, 2.0]],
    )
    imb = tracekit.imbalance(tmp_path / "rot", cache=False)
    s = imb.summary
    assert s["straggler_rotates"]
    (f,) = rank_findings_of(imb).tables["findings"].to_dict("records")
    counts = dict(zip(imb.tables["ranks"]["rank"], imb.tables["ranks"]["times_last"]))
    st = s["straggler"]
    assert ", ".join(f"rank {r} {counts[r]}" for r in sorted(counts)) in f["evidence"]
    assert (
        f"straggler rank {st['rank']} (the rank last most often, the summary's): last at {st['times_last']} of {st['of']}"
        in f["evidence"]
    )
    # a rank whose recording starts mid-step leaves a step partial: the ranks table counts the rows the summary counts
    # (a clock set back no longer does: it is undone, set_back.py)
    write_run("nccl_train4", tmp_path / "back", truth_path=tmp_path / "back.json", mid_step_start=[1])
    imb = tracekit.imbalance(tmp_path / "back", cache=False)
    st, ranks = imb.summary["straggler"], imb.tables["ranks"]
    assert imb.summary["partial_steps"] > 0
    assert int(ranks.loc[ranks["rank"] == st["rank"], "times_last"].iloc[0]) == st["times_last"]
    assert int(ranks["times_last"].sum()) == st["of"]
