"""A run in the API (issue 40): ``tracekit.load_run`` finds the ranks once; ``tracekit.imbalance``, ``report`` and
``findings`` take the Run and give the document the path gives; `report RUN_DIR` searches the run once (it searched
it three times: to tell a run from a trace, in imbalance, and for the reference rank's file)."""

from __future__ import annotations

import json

import pytest

import tracekit
from tests.unit.fleet.test_world_size import _write
from tracekit.analyses.fleet.multirank import discover, run as run_module
from tracekit.errors import UsageError


def _doc(res) -> dict:
    from tracekit.result import to_json_obj

    doc = json.loads(json.dumps(to_json_obj(res)))
    for i in doc["inputs"]:
        i.pop("from_cache", None)
    return doc


def _cli_doc(cli, *args) -> dict:
    code, out, err = cli(*args, "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    for i in doc["inputs"]:
        i.pop("from_cache", None)
    return doc


@pytest.fixture
def searches(monkeypatch):
    """How many times the ranks of a run are searched on disk (discover.find_ranks, wherever it is called from)."""
    calls = []
    real = discover.find_ranks

    def counted(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(discover, "find_ranks", counted)
    monkeypatch.setattr(run_module, "find_ranks", counted)
    return calls


def test_the_run_object(tmp_path):
    root = _write(tmp_path / "run", [0, 1, 3], world_size=4)
    run = tracekit.load_run(root, gpus_per_node=2)
    assert isinstance(run, tracekit.Run) and "load_run" in tracekit.__all__
    assert [rf.rank for rf in run.ranks] == [0, 1, 3] and sorted(run.files) == [0, 1, 3]
    assert run.files[3] == [root / "prof-TP-3-DP-3-EP-3.trace.json"]
    assert (run.world_size, run.world_size_from, run.missing_ranks) == (4, "distributedInfo", [2])
    assert run.nodes == {0: 0, 1: 0, 3: 1} and run.nodes_from == "2 GPUs per node"
    assert run.reference_files() == [root / "prof-TP-0-DP-0-EP-0.trace.json"] and run.root == root
    assert repr(run) == "Run(3 ranks, world size 4 from distributedInfo, missing ranks [2], 2 node(s))"
    assert tracekit.load_run(run) is run  # a Run is already found
    again = tracekit.load_run(run, world_size=6)
    assert again.missing_ranks == [2, 4, 5] and again.ranks is run.ranks and run.world_size == 4
    with pytest.raises(UsageError, match="--world-size must be a whole number"):
        tracekit.load_run(root, world_size="4")
    with pytest.raises(UsageError, match="--gpus-per-node must be a whole number"):
        tracekit.load_run(root, gpus_per_node=0)


@pytest.mark.slow  # report and findings of a small run, through the CLI and the API (8 s)
def test_a_run_gives_the_paths_documents_and_is_searched_once(tmp_path, cli, searches):
    root = _write(tmp_path / "run", [0, 1, 2], world_size=4)
    for command in ("report", "findings"):
        searches.clear()
        doc = _cli_doc(cli, command, root, "--no-cache")
        assert len(searches) == 1, command  # report RUN_DIR searched the run 3 times before issue 40
        searches.clear()
        api = _doc(getattr(tracekit, command)(tracekit.load_run(root)))
        assert len(searches) == 1, command  # load_run's, and no other
        assert doc == api, command
        s = doc["summary"]["ranks"] if command == "report" else doc["summary"]
        assert s["missing_ranks"] == [3] and s["world_size"] == 4 and s["imbalance_is_lower_bound"] is True
        assert any("rank 3 of the world of 4" in w and "lower bound" in w for w in doc["warnings"]), command
    # imbalance: the Run and the path give one document (the CLI's: tests/integration/test_parity.py)
    by_path = _doc(tracekit.imbalance(root, jobs=1, cache=False))
    assert by_path == _doc(tracekit.imbalance(tracekit.load_run(root), jobs=1, cache=False))
    assert by_path["summary"]["missing_ranks"] == [3]
