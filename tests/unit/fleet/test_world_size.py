"""The world size of a run (issue 40): from the traces' distributedInfo, the rank tags or rank-N in the file names,
or --world-size; the ranks without a file named, the imbalance marked a lower bound; two world sizes refused."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import write_trace
from tests.unit.fleet.test_multirank import _run_events
from tracekit.analyses.fleet.multirank.api import lower_bound_sentence
from tracekit.analyses.fleet.multirank.discover import RankFiles, missing_of, world_size_of
from tracekit.errors import InputError, UsageError
from tracekit.fan_out import imbalance
from tracekit.ingest.distributed_info import distributed_info
from tracekit.analyses.fleet.multirank.run import load_run


def _rf(rank, name=None, source="name"):
    return RankFiles(rank=rank, files=[Path(name or f"rank-{rank}.json")], source=source)


# --------------------------------------------------------------------------- the decision, on its own


def test_the_world_size_and_where_it_came_from():
    ranks = [_rf(0), _rf(1), _rf(3)]
    said = {rf.files[0]: None for rf in ranks}
    assert world_size_of(ranks, said, None)[:2] == (4, "file names")  # the highest rank + 1: a gap is seen
    assert missing_of(ranks, 4) == [2]
    said8 = {rf.files[0]: 8 for rf in ranks}
    assert world_size_of(ranks, said8, None)[:2] == (8, "distributedInfo")
    assert missing_of(ranks, 8) == [2, 4, 5, 6, 7]
    ws, src, warn = world_size_of(ranks, said8, 6)
    assert (ws, src) == (6, "--world-size") and "distributedInfo says world_size 8" in warn[0]
    # a trace of its own one-rank run (world_size 1) says nothing of this run's size
    assert world_size_of(ranks, {rf.files[0]: 1 for rf in ranks}, None)[:2] == (4, "file names")
    # ranks only their traces named: the highest rank + 1
    opaque = [_rf(0, "a.json", "distributedInfo"), _rf(2, "b.json", "distributedInfo")]
    assert world_size_of(opaque, {}, None)[:2] == (3, "rank ids")
    assert world_size_of([], {}, None)[:2] == (None, "unknown") and missing_of([], None) == []


def test_a_rank_beyond_the_traces_world_size_widens_it_with_a_warning():
    ranks = [_rf(0), _rf(9)]
    ws, src, warn = world_size_of(ranks, {rf.files[0]: 8 for rf in ranks}, None)
    assert (ws, src) == (10, "rank ids") and "files hold rank 9" in warn[0]


def test_two_world_sizes_are_two_runs_and_a_small_world_size_is_a_usage_error():
    ranks = [_rf(0, "rank-0.json"), _rf(1, "rank-1.json")]
    with pytest.raises(InputError, match=r"rank-0.json says distributedInfo.world_size 8 and rank-1.json says 16"):
        world_size_of(ranks, {Path("rank-0.json"): 8, Path("rank-1.json"): 16}, None)
    with pytest.raises(UsageError, match=r"--world-size 1 is less than the ranks the files hold \(rank 1\)"):
        world_size_of(ranks, {}, 1)


def test_the_sentence_names_the_missing_ranks_as_spans():
    def said(miss, ws=64, src="--world-size"):
        return lower_bound_sentence({"missing_ranks": miss, "world_size": ws, "world_size_from": src})

    assert said([10], 32, "distributedInfo") == (
        "rank 10 of the world of 32 (distributedInfo) has no readable trace: the imbalance is a lower bound (a missing"
        " rank may be the one the others waited for); record every rank's trace"
    )
    assert said(list(range(3, 64))).startswith("ranks 3–63 of the world of 64 (--world-size) have no readable trace")
    assert said([2, 5, 6, 7, 9]).startswith("ranks 2, 5–7, 9 of the world of 64")
    assert said(list(range(1, 40, 2))).startswith("ranks 1, 3, 5, 7, 9, 11, 13, 15 and 12 more of the world")


# --------------------------------------------------------------------------- the head of a trace


@pytest.mark.parametrize("compress", [None, "gz", "zst"])
def test_distributed_info_from_the_head_alone(tmp_path, compress):
    p = write_trace(
        tmp_path / "t.json",
        [{"ph": "X", "name": "k", "ts": 1, "dur": 1, "args": {"distributedInfo": {"rank": 99}}}],
        compress=compress,
        distributedInfo={"backend": "nccl", "rank": 5, "world_size": 32},
    )
    assert distributed_info(p) == {"rank": 5, "world_size": 32}


def test_no_distributed_info_in_the_head_is_none(tmp_path):
    events = [{"ph": "X", "name": "k", "ts": 1, "dur": 1}]
    assert distributed_info(write_trace(tmp_path / "a.json", events)) == {}
    # after the events (the full read finds it; the head does not): not guessed
    late = tmp_path / "late.json"
    late.write_text('{"traceEvents": [], "distributedInfo": {"rank": 3, "world_size": 4}}')
    assert distributed_info(late) == {}
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"schemaVersion": 1, "distributedInfo": {"rank": 1')[:30])
    assert distributed_info(bad) == {}  # damaged: the reduction says what is wrong, not the peek
    assert distributed_info(tmp_path / "absent.json") == {}


# --------------------------------------------------------------------------- a run on disk


def _write(root: Path, ranks, world_size=None, names=None, n=4):
    root.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        ev, _ = _run_events(r, offset_us=0.0, ranks=n, bs_by_step=((8, 8, 8, 32), (8, 16, 8, 8)))
        name = names(r) if names else f"prof-TP-{r}-DP-{r}-EP-{r}.trace.json"
        top = {"hostFile": name}
        if world_size is not None:
            top["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": world_size}
        write_trace(root / name, ev, **top)
    return root


def test_load_run_from_tags_from_distributed_info_and_given(tmp_path):
    run = load_run(_write(tmp_path / "tags", [0, 1, 3]))
    assert (run.world_size, run.world_size_from, run.missing_ranks) == (4, "file names", [2])
    run = load_run(_write(tmp_path / "dist", [0, 1, 2], world_size=4))
    assert (run.world_size, run.world_size_from, run.missing_ranks) == (4, "distributedInfo", [3])
    run = load_run(tmp_path / "tags", world_size=6)
    assert (run.world_size, run.world_size_from, run.missing_ranks) == (6, "--world-size", [2, 4, 5])
    # names that carry no rank: each rank from its trace's head, before any file is reduced
    opaque = _write(tmp_path / "opaque", [0, 2, 3], world_size=4, names=lambda r: f"host_{100 + 7 * r}.json")
    run = load_run(opaque)
    assert [rf.rank for rf in run.ranks] == [0, 2, 3] and run.missing_ranks == [1]
    assert run.world_size_from == "distributedInfo"


@pytest.mark.slow  # four small runs analysed (3 s)
def test_imbalance_names_the_missing_rank_and_says_lower_bound(tmp_path):
    full = imbalance(_write(tmp_path / "full", [0, 1, 2, 3], world_size=4), jobs=1, cache=False)
    s = full.summary
    assert (s["world_size"], s["missing_ranks"], s["imbalance_is_lower_bound"]) == (4, [], False)
    assert not [w for w in full.warnings if "lower bound" in w]
    # rank 3 (bs 32 in step 0: that step's straggler) has no file
    part = imbalance(_write(tmp_path / "part", [0, 1, 2], world_size=4), jobs=1, cache=False)
    s = part.summary
    assert s["ranks"] == 3 and s["world_size"] == 4 and s["world_size_from"] == "distributedInfo"
    assert s["missing_ranks"] == [3] and s["imbalance_is_lower_bound"] is True
    (w,) = [w for w in part.warnings if "lower bound" in w]
    assert w.startswith("rank 3 of the world of 4 (distributedInfo) has no readable trace") and "record every" in w
    full_by = full.tables["by_step"].set_index("step")["imbalance_ns"]
    part_by = part.tables["by_step"].set_index("step")["imbalance_ns"]
    assert part_by[0] < full_by[0]  # the straggler of step 0 unseen: its imbalance is a lower bound
    # without distributedInfo the names cannot see a missing last rank; --world-size can
    named = _write(tmp_path / "named", [0, 1, 2])
    assert imbalance(named, jobs=1, cache=False).summary["missing_ranks"] == []
    given = imbalance(named, jobs=1, cache=False, world_size=4).summary
    assert given["missing_ranks"] == [3] and given["world_size_from"] == "--world-size"


@pytest.mark.slow  # a run analysed and three commands refused (2.7 s)
def test_the_cli_world_size_and_its_errors(tmp_path, cli):
    run = _write(tmp_path / "named", [0, 1, 2])
    code, out, err = cli("imbalance", run, "--world-size", "5", "-f", "json")
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert (s["world_size"], s["world_size_from"], s["missing_ranks"]) == (5, "--world-size", [3, 4])
    code, out, err = cli("imbalance", run, "--world-size", "2")
    assert code == 2 and "--world-size 2 is less than the ranks the files hold (rank 2); pass at least 3" in err
    two = _write(tmp_path / "two", [0, 1], world_size=2)
    ev, _ = _run_events(2, offset_us=0.0, ranks=4)
    write_trace(two / "prof-TP-2-DP-2-EP-2.trace.json", ev, distributedInfo={"rank": 2, "world_size": 16})
    for command in ("imbalance", "report", "findings"):
        code, out, err = cli(command, two)
        assert code == 3, (command, err)
        assert "says distributedInfo.world_size 2 and" in err and "says 16: the files of two runs" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    trace = next(iter(sorted(run.iterdir())))
    code, out, err = cli("report", trace, "--world-size", "4")
    assert code == 2 and "--world-size goes with the ranks of one run" in err
