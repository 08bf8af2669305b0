"""`tracekit report RUN_DIR` (issue 28): the report of the reference rank (the lowest rank id) with the ranks part —
imbalance per step, the straggler with its batch, the per-rank table and the rank findings — against the multi-rank
generator's truth (fixtures/synthlib/multirank.py), the CLI and the Python API giving the same document, and the real
HTA pair."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from fixtures.synthlib import write_run  # noqa: E402
from tracekit.analyses.fleet.multirank.api import reference_files  # noqa: E402

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

HTA = REPO.parent / "shared" / "corpus" / "hta" / "tests" / "data" / "trace_filter"


def _lower_median(v):
    v = sorted(v)
    return v[(len(v) - 1) // 2]


@pytest.fixture(scope="module")
def dp8(tmp_path_factory):
    d = tmp_path_factory.mktemp("report_ranks")
    _, truth = write_run("dp_attn_deepep8", d / "run", truth_path=d / "truth.json")
    return d / "run", json.loads(Path(truth).read_text())


def _json(cli, *args):
    code, out, err = cli("report", *args, "--no-cache", "-f", "json")
    assert code == 0, err
    return json.loads(out)


def test_the_ranks_part_against_the_truth(dp8, cli):
    run, truth = dp8
    doc = _json(cli, run)
    r, ts = doc["summary"]["ranks"], truth["summary"]
    assert r["ranks"] == 8 and r["reference_rank"] == 0 and r["clock"] == "aligned"
    assert r["imbalance_ns_per_step"] == pytest.approx(ts["imbalance_ns_per_step"], rel=0.01)
    st = r["straggler"]
    assert st["rank"] == ts["straggler"]["rank"] and st["bs"] == 64
    assert st["median_bs"] == _lower_median([s["median_bs"] for s in truth["by_step"]])
    by = {row["step"]: row for row in doc["tables"]["rank_by_step"]}
    for row in truth["by_step"]:
        assert by[row["step"]]["imbalance_ns"] == pytest.approx(row["imbalance_ns"], rel=0.01)
    ranks = doc["tables"]["ranks"]
    assert [x["rank"] for x in ranks] == list(range(8))
    assert {"rank", "file", "node", "clock_offset_ns", "steps", "times_last", "total_wait_ns"} <= set(ranks[0])
    assert max(ranks, key=lambda x: x["times_last"])["rank"] == st["rank"]
    # every imbalance table, under rank_* names; the report's own steps stay the reference rank's
    for name in ("rank_steps", "rank_collectives", "rank_per_collective"):
        assert doc["tables"][name], name
    # the rank findings are among the findings, ranked with the rest
    f = doc["tables"]["findings"]
    (imb,) = [x for x in f if x["kind"] == "rank_imbalance"]
    assert f"rank {st['rank']}, last in 3 of 4 steps (bs 64 there)" in imb["title"]  # issue 40: per step
    assert [x["rank"] for x in f] == list(range(1, len(f) + 1)) and doc["summary"]["findings"] == len(f)
    # the reference rank's report: its file first, every rank's file among the inputs
    assert doc["inputs"][0]["rank"] == 0 and "TP-0-" in doc["inputs"][0]["path"]
    assert sorted(i["rank"] for i in doc["inputs"]) == list(range(8))


def test_the_report_is_the_reference_ranks(dp8, cli):
    run, _ = dp8
    doc = _json(cli, run)
    ref = sorted(run.glob("*TP-0-*"))[0]
    one = _json(cli, ref)
    for k, v in one["summary"].items():
        if k not in ("findings", "top_finding"):
            assert doc["summary"][k] == v, k
    for name in ("wall", "steps", "comm", "one_step"):
        assert doc["tables"][name] == one["tables"][name], name
    assert "ranks" not in one["summary"] and "rank_by_step" not in one["tables"]


def test_cli_and_api_give_the_same_document(dp8, cli):
    run, _ = dp8
    doc = _json(cli, run)
    imb = tracekit.imbalance(run, cache=False)
    api = tracekit.report(tracekit.load(reference_files(run, imb)[0], cache=False), ranks=imb).to_dict()
    for x in (doc, api):
        for i in x["inputs"]:
            i.pop("from_cache", None)
    assert doc == api


def test_report_takes_only_an_imbalance_result(dp8):
    run, _ = dp8
    trace = tracekit.load(sorted(run.glob("*TP-0-*"))[0], cache=False)
    with pytest.raises(tracekit.errors.UsageError, match="tracekit.imbalance"):
        tracekit.report(trace, ranks=tracekit.report(trace))


def test_the_terminal_ranks_section(dp8, cli, monkeypatch):
    run, truth = dp8
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err = cli("report", run, "--no-cache")
    assert code == 0, err
    rank = truth["summary"]["straggler"]["rank"]
    text = " ".join(out.split())
    assert f"straggler rank {rank}: last at" in text and "its bs 64 against a median of" in text
    assert "DP imbalance" in text and "per step" in text
    assert "ranks of the run — 8 ranks, reference rank 0" in out
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if "TP-" in ln and ln.split()[0].isdigit()}
    assert sorted(rows) == [str(i) for i in range(8)]  # the per-rank table, every rank
    # the per-step straggler table is drawn (issue 40), partial steps flagged; the instance tables are left out
    assert "rank_by_step" in out and "partial" in out and "not shown: rank_steps" in text
    assert max(len(line) for line in out.splitlines()) <= 100


def test_a_16_rank_report_fits_one_screen_with_the_straggler_first(tmp_path, cli, monkeypatch):
    _, truth = write_run("dp_attn_deepep16", tmp_path / "run", truth_path=tmp_path / "truth.json")
    rank = json.loads(Path(truth).read_text())["summary"]["straggler"]["rank"]
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli("report", tmp_path / "run", "--no-cache")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) <= 50 and max(len(ln) for ln in lines) <= 80
    rows = [ln.split() for ln in lines if "DP-" in ln and ln.split()[0].isdigit()]
    assert rows and rows[0][0] == str(rank)  # the ranks most often last lead: a cut table keeps the straggler
    assert int(rows[0][-2]) == max(int(r[-2]) for r in rows)


@pytest.mark.skipif(not HTA.is_dir(), reason=f"the real HTA rank pair is not here ({HTA})")
def test_the_real_hta_pair(cli):
    doc = _json(cli, HTA)
    r = doc["summary"]["ranks"]
    assert r["ranks"] == 2 and r["reference_rank"] == 0 and r["collectives"] == 10
    assert doc["inputs"][0]["rank"] == 0 and doc["inputs"][0]["path"].endswith("sampled_rank-0.json.gz")
    kinds = {c["kind"] for c in doc["tables"]["rank_collectives"]}
    assert kinds == {"sendrecv"} and all(c["wait_ns"] >= 0 for c in doc["tables"]["rank_collectives"])
    assert doc["summary"]["steps"] == tracekit.report(tracekit.load(HTA / "sampled_rank-0.json.gz")).summary["steps"]
    assert any(w.startswith("ranks: ") and "do not coincide" in w for w in doc["warnings"])


def test_the_rank_files_listed_are_the_run(dp8, cli):
    """`report r0 r1 …` and `findings r0 r1 …` read the files as the ranks of one run, as their directory."""
    run, _ = dp8
    files = sorted(run.glob("*.json.gz"))
    assert len(files) == 8
    by_dir, by_files = _json(cli, run), _json(cli, *reversed(files))
    for doc in (by_dir, by_files):
        for inp in doc["inputs"]:
            inp.pop("from_cache", None)
        for row in doc["tables"]["ranks"]:  # a directory's ranks are named within it, listed files by their path
            row["file"] = Path(row["file"]).name
    assert by_files["summary"] == by_dir["summary"] and by_files["tables"] == by_dir["tables"]
    code, out, err = cli("findings", *files, "--no-cache", "-f", "json")
    assert code == 0, err
    code2, out2, err2 = cli("findings", run, "--no-cache", "-f", "json")
    assert json.loads(out)["tables"] == json.loads(out2)["tables"]
    code, _, err = cli("findings", files[0], "--compare", files[1], files[2])
    assert code == 2 and "not both" in err
