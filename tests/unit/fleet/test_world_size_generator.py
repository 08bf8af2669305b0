"""A missing rank file (issue 40) on the multi-rank generator's run of world size 32 (fixtures/synthlib/multirank.py,
``drop_files``): the file of rank 10, the real straggler of three of its four steps, is not written. imbalance, report
and findings name the missing rank and mark the imbalance a lower bound; what they report is what the 31 files show
(the truth of the files) and never more than the whole run's truth (the missing rank's file written)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from fixtures.synthlib import write_run  # noqa: E402

pytestmark = pytest.mark.slow  # a 32-rank run analysed twice (about 10 s)

DROPPED = 10  # the preset's big-batch rank: the straggler of steps 0 and 1 (of 3)


@pytest.fixture(scope="module")
def run32(tmp_path_factory):
    d = tmp_path_factory.mktemp("world32")
    _, truth = write_run(
        "dp_attn_deepep16", d / "run", truth_path=d / "truth.json", ranks=32, drop_files=[DROPPED], steps=3, layers=2
    )
    return d / "run", json.loads(Path(truth).read_text())


def _doc(res) -> dict:
    doc = json.loads(json.dumps(res.to_dict()))
    for i in doc["inputs"]:
        i.pop("from_cache", None)
    return doc


def test_the_truth_has_the_missing_rank_as_a_real_straggler(run32):
    _, truth = run32
    whole = truth["meta"]["whole_run"]
    assert [b["straggler"] for b in whole["by_step"]].count(DROPPED) >= 1  # it made the others wait
    assert truth["summary"]["missing_ranks"] == [DROPPED] and truth["summary"]["world_size"] == 32
    assert truth["summary"]["imbalance_ns_per_step"] < whole["imbalance_ns_per_step"]


def test_imbalance_report_and_findings_name_it_and_say_lower_bound(run32, cli):
    run, truth = run32
    ts, whole = truth["summary"], truth["meta"]["whole_run"]
    loaded = tracekit.load_run(run)  # the run found once: its world size and missing rank before any file is read
    assert loaded.missing_ranks == [DROPPED] and loaded.world_size == 32 and len(loaded.ranks) == 31
    res = tracekit.imbalance(loaded, cache=False)
    imb = _doc(res)
    s = imb["summary"]
    assert s["ranks"] == 31 and s["world_size"] == 32 and s["world_size_from"] == "distributedInfo"
    assert s["missing_ranks"] == [DROPPED] and s["imbalance_is_lower_bound"] is True
    # what the files show, and a lower bound of the whole run's imbalance, per step and in the median
    assert s["imbalance_ns_per_step"] == pytest.approx(ts["imbalance_ns_per_step"], rel=0.01)
    assert s["imbalance_ns_per_step"] < 0.5 * whole["imbalance_ns_per_step"]  # 36 µs shown, 204 µs there was
    by = {r["step"]: r["imbalance_ns"] for r in imb["tables"]["by_step"]}
    for b, w in zip(truth["by_step"], whole["by_step"]):
        assert by[b["step"]] == pytest.approx(b["imbalance_ns"], rel=0.01, abs=500)
        assert by[b["step"]] <= w["imbalance_ns"] * 1.01
    assert s["straggler"]["rank"] != DROPPED and DROPPED not in [r["rank"] for r in imb["tables"]["ranks"]]
    sentence = (
        f"rank {DROPPED} of the world of 32 (distributedInfo) has no readable trace: the imbalance is a lower bound"
    )
    (said,) = [w for w in imb["warnings"] if w.startswith(sentence)]
    assert said.endswith("record every rank's trace")
    rep = _doc(tracekit.report(loaded, ranks=res))
    r = rep["summary"]["ranks"]
    assert (r["world_size"], r["missing_ranks"], r["imbalance_is_lower_bound"]) == (32, [DROPPED], True)
    assert f"ranks: {said}" in rep["warnings"]
    fin = _doc(tracekit.findings(loaded, ranks=res))
    f = fin["summary"]
    assert (f["world_size"], f["missing_ranks"], f["imbalance_is_lower_bound"]) == (32, [DROPPED], True)
    assert said in fin["warnings"]
    # the CLI, given the path, says the same (the Run gives the path's document)
    code, out, err = cli("findings", run, "--no-cache", "-f", "json")
    assert code == 0 and sentence in err
    cli_doc = json.loads(out)
    for i in cli_doc["inputs"]:
        i.pop("from_cache", None)
    assert cli_doc == fin
