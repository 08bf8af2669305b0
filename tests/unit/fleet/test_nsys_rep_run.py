"""A ``.nsys-rep`` of several GPU processes is a run, each process a rank, exactly like its SQLite export (issue 42):
with ``nsys`` on PATH — here a fake ``nsys`` that "exports" by copying a generator-made export of four processes
(``fixtures/synthlib/nsys.py``, ``write_nsys_processes``, from the multi-rank generator's ranks of one node) to the
``--output`` it is given — ``load_run``, ``imbalance`` and ``report`` read the report as they read that SQLite; the
export goes to a temporary folder, never beside the report, and is removed. Without nsys on PATH the one sentence
that says how to export it stands."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from tracekit.analyses.fleet.multirank import processes  # noqa: E402
from tracekit.analyses.fleet.multirank.processes import split_part  # noqa: E402

PIDS = [4100, 4101, 4102, 4103]  # process 410r drives device r (rank r)
FAKE_NSYS = """#!{python}
import json, os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_NSYS_LOG"], "a") as fh:
    fh.write(json.dumps(args) + "\\n")
shutil.copyfile(os.environ["FAKE_NSYS_DB"], args[args.index("--output") + 1])
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """(the export of four processes, the generator's truth): the SQLite nsys would write, kept apart."""
    from fixtures.synthlib.multirank import build_run
    from fixtures.synthlib.nsys import write_nsys_processes

    docs, truth = build_run("nccl_train4", steps=2, layers=1)
    d = tmp_path_factory.mktemp("export")
    db = write_nsys_processes(d / "node.sqlite", [docs[f"rank-{r}.json.gz"] for r in range(4)], PIDS)
    return db, truth


@pytest.fixture
def rep(tmp_path, monkeypatch, node):
    """A ``.nsys-rep`` alone in its folder, and a fake nsys on PATH that exports it as ``node``'s SQLite."""
    binary = tmp_path / "bin" / "nsys"
    binary.parent.mkdir()
    binary.write_text(FAKE_NSYS.format(python=sys.executable))
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NSYS_DB", str(node[0]))
    monkeypatch.setenv("FAKE_NSYS_LOG", str(tmp_path / "nsys.log"))
    monkeypatch.setattr(processes, "_REPORT_PROCESSES", {})  # each test exports afresh
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    p = run_dir / "node.nsys-rep"
    p.write_bytes(b"a report only nsys reads")
    return p


def _exports(rep: Path) -> list[list[str]]:
    log = rep.parent.parent / "nsys.log"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def test_the_report_of_four_processes_is_a_run_of_four_ranks(rep):
    run = tracekit.load_run(rep)
    assert [rf.rank for rf in run.ranks] == [0, 1, 2, 3] and {rf.source for rf in run.ranks} == {"process"}
    assert [split_part(rf.files[0]) for rf in run.ranks] == [(str(rep), pid) for pid in PIDS]
    assert run.nodes_from == "one export" and set(run.nodes.values()) == {0}  # one export, one host clock
    assert run.reference_device() == 0
    assert len(_exports(rep)) == 1  # listed once, not again for the reference's device
    # the export went to a folder of its own, removed after; nothing was written beside the report
    (args,) = _exports(rep)
    out = Path(args[args.index("--output") + 1])
    assert args[:3] == ["export", "--type", "sqlite"] and args[-1] == str(rep)
    assert out.parent != rep.parent and not out.parent.exists()
    assert sorted(p.name for p in rep.parent.iterdir()) == ["node.nsys-rep"]


@pytest.mark.slow  # two imbalances and two reports of four ranks (~4 s)
def test_imbalance_and_report_of_the_report_are_those_of_its_export(rep, node, cli, monkeypatch):
    db, truth = node
    by_rep = tracekit.imbalance(rep, jobs=1, cache=False)
    by_db = tracekit.imbalance(db, jobs=1, cache=False)
    for name in ("per_collective", "by_step", "collectives", "steps"):
        assert by_rep.tables[name].equals(by_db.tables[name]), name
    assert by_rep.summary == by_db.summary and by_rep.warnings == by_db.warnings
    assert [str(p) for p in by_rep.tables["ranks"]["file"]] == [f"{rep}::process={pid}" for pid in PIDS]
    # the generator's truth, computed without tracekit
    got = by_rep.tables["by_step"][["step", "imbalance_ns", "straggler"]].to_dict("records")
    assert got == [{k: b[k] for k in ("step", "imbalance_ns", "straggler")} for b in truth["by_step"]]
    rep_doc = tracekit.report(tracekit.load_run(rep), ranks=by_rep).to_dict()
    assert rep_doc["summary"]["ranks"]["ranks"] == 4 and rep_doc["summary"]["ranks"]["straggler"]["rank"] == 2
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("report", rep)  # the CLI takes the one report as a run, as it takes node.sqlite
    assert code == 0 and "ranks of the run — 4 ranks, reference rank 0" in out
    assert f"{rep.name}::process={PIDS[2]}" in out and max(len(x) for x in out.splitlines()) <= 80
    assert sorted(p.name for p in rep.parent.iterdir()) == ["node.nsys-rep"]


def test_without_nsys_the_one_sentence_stands(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nsys here
    p = tmp_path / "node.nsys-rep"
    p.write_bytes(b"a report only nsys reads")
    code, out, err = cli("imbalance", p)
    assert code == 3 and "nsys is not on PATH here, so export it where it is" in err
    assert "Traceback" not in err and sorted(x.name for x in tmp_path.iterdir()) == ["node.nsys-rep"]
