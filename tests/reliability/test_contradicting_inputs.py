"""Issue 41: inputs that contradict themselves are named, and numbers have a floor. Each case once gave a number that
belonged to no input (two servers mixed, one rank given twice, a clock outlier) or took a value that means nothing
(``--hbm-gbps nan``); now it is refused with one sentence, or the number is the input's own and says what it left
out. Hand-built inputs in tmp_path; the CLI run in-process (exit code, message and numbers asserted)."""

from __future__ import annotations

import gzip
import json
import os
from itertools import zip_longest
from pathlib import Path

import pytest

import tracekit

from tests.conftest import cpu_ann, gpu_ann, kernel, write_trace
from tests.reliability.test_silent_numbers import launch, line

ROOT = Path(__file__).resolve().parents[2]
SYN = ROOT / "fixtures" / "synthetic"


def _doc(out: str) -> dict:
    return json.loads(out)


# --------------------------------------------------------------------------- two servers in one log


@pytest.mark.slow
def test_two_servers_interleaved_in_one_log_are_refused(cli, tmp_path):
    """dp16's and dp2dcp8's launch logs interleaved line by line (both DP0 TP0 EP0) gave a ledger of neither."""
    a = (SYN / "dp16.launch.log").read_text().splitlines()
    b = (SYN / "dp2dcp8.launch.log").read_text().splitlines()
    mixed = tmp_path / "mixed.log"
    mixed.write_text("\n".join(x for pair in zip_longest(a, b) for x in pair if x is not None) + "\n")
    code, out, err = cli("ledger", mixed)
    assert code == 3 and out == ""
    assert "two servers' lines interleaved" in err and "rank DP0 TP0 EP0" in err and "line 5" in err
    assert len(err.strip().splitlines()) == 1
    # each alone is one server: read, and its draft weights are its own
    for log, draft in ((SYN / "dp16.launch.log", 2.11), (SYN / "dp2dcp8.launch.log", 1.23)):
        code, out, _ = cli("ledger", log, "-f", "json")
        assert code == 0 and _doc(out)["summary"]["draft_weights_gib"] == pytest.approx(draft)


def test_a_restart_in_one_log_is_two_launches_not_two_servers(cli, tmp_path):
    """A restart appends a whole new launch after a server_args line: not a contradiction."""
    log = tmp_path / "restart.log"
    log.write_text("\n".join(launch() + launch()) + "\n")
    code, out, err = cli("ledger", log, "-f", "json")
    assert code == 0, err
    assert "interleaved" not in err


def test_a_rank_loading_weights_twice_at_once_is_two_servers(cli, tmp_path):
    """Two 'Load weight begin' of one rank with no end between: one server never does that (begin_end rule)."""
    lines = launch()
    lines.insert(3, line("Load weight begin. avail mem=98.00 GB", " TP0"))
    log = tmp_path / "two.log"
    log.write_text("\n".join(lines) + "\n")
    code, _, err = cli("ledger", log)
    assert code == 3 and "weight_begin at line 3 and again at line 4" in err


# --------------------------------------------------------------------------- one rank given twice


def test_the_same_trace_given_as_two_ranks_is_refused(cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    body = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": [kernel("k", 1e6, 10.0)]})
    for r in (0, 1):
        (run / f"p-TP-{r}.trace.json").write_text(body)
    code, out, err = cli("imbalance", run)
    assert code == 3 and out == ""
    assert "p-TP-0.trace.json and" in err and "hold the same bytes" in err and "pass each rank's own trace once" in err


def _tiny_rank(path: Path, i: int, rank: int | None = None) -> Path:
    """A small trace of its own bytes; ``rank`` its ``distributedInfo.rank``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    top = {"distributedInfo": {"rank": rank, "world_size": 2}} if rank is not None else {}
    return write_trace(path, [kernel("k", 1e6 + i, 10.0)], hostFile=str(i), **top)


def _refused_by_imbalance_and_report(cli, run: Path, *needles: str) -> str:
    """`imbalance RUN` and `report RUN` both refuse: exit 3, nothing on stdout, one sentence holding ``needles``."""
    sentences = []
    for cmd in ("imbalance", "report"):
        code, out, err = cli(cmd, run, "--no-cache")
        assert code == 3 and out == "", (cmd, code, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
        for n in needles:
            assert n in err, (cmd, n, err)
        assert "tracekit bug" not in err and "pass one of them" not in err
        sentences.append(err)
    assert sentences[0] == sentences[1]  # one rule, one sentence, whichever command meets it
    return sentences[0]


@pytest.mark.parametrize(
    "files, pair, what",
    [
        (
            ("a/p-TP-0.trace.json", "b/p-TP-0.trace.json", "b/p-TP-1.trace.json"),
            ("a/p-TP-0.trace.json", "b/p-TP-0.trace.json"),
            "both name rank 0 (both by sglang tags TP-0) and are not two stages of one recording: the same name in"
            " two folders",
        ),
        (
            (
                "1758612345.12-TP-0.trace.json",
                "1758612345.12-TP-1.trace.json",
                "1758619999.55-TP-0.trace.json",
                "1758619999.55-TP-1.trace.json",
            ),
            ("1758612345.12-TP-0.trace.json", "1758619999.55-TP-0.trace.json"),
            "both name rank 0 (both by sglang tags TP-0) and are not two stages of one recording: two recordings of"
            " it (the names differ in '1758612345.12' and '1758619999.55')",
        ),
        (
            (
                "rank-0.Apr_03_18_51_38.1102.pt.trace.json",
                "rank-1.Apr_03_18_51_38.1107.pt.trace.json",
                "rank-0.Apr_03_19_02_11.2204.pt.trace.json",
            ),
            ("rank-0.Apr_03_18_51_38.1102.pt.trace.json", "rank-0.Apr_03_19_02_11.2204.pt.trace.json"),
            "both name rank 0 (both by rank-0 in the name) and are not two stages of one recording: two recordings of"
            " it (the names differ in '18_51_38.1102' and '19_02_11.2204')",
        ),
        (
            ("rank-1.json", "rank_1/trace.json", "rank-0.json"),
            ("rank-1.json", "rank_1/trace.json"),
            "both name rank 1 (rank-1 in the name; folder rank_1)",
        ),
        (
            ("t1-TP-0-DECODE.trace.json", "t2-TP-0-EXTEND.trace.json", "t1-TP-1-DECODE.trace.json"),
            ("t1-TP-0-DECODE.trace.json", "t2-TP-0-EXTEND.trace.json"),
            "both name rank 0 (both by sglang tags TP-0) and are not two stages of one recording",
        ),
    ],
    ids=["two-folders", "restart-sglang", "restart-timestamped", "name-and-folder", "stages-of-two-recordings"],
)
def test_two_files_that_name_one_rank_are_refused(cli, tmp_path, files, pair, what):
    """Two different files whose names give one rank (a sweep's points, a restart's second recording of every rank,
    a rank-N file beside a rank_N folder, one rank's DECODE and EXTEND stages of two recordings) were refused with
    exit 4, or merged as one rank's stages; in `report RUN_DIR` a restart's files were 'pass one of them'. Now: one
    sentence naming both files and what to pass, exit 3, from `imbalance` and `report` alike (docs/multirank.md)."""
    run = tmp_path / "run"
    for i, f in enumerate(files):
        _tiny_rank(run / f, i)
    err = _refused_by_imbalance_and_report(cli, run, what, "pass the files of one run, one trace per rank")
    assert err.startswith(f"error: {run / pair[0]} and {run / pair[1]} both name rank "), err


def test_one_recording_of_one_rank_in_stages_is_one_rank(tmp_path):
    """The rule keeps what is right: a rank's DECODE and EXTEND files of one recording are one rank."""
    from tracekit.analyses.fleet.multirank.discover import find_ranks

    for i, f in enumerate(("t1-TP-0-DECODE.trace.json", "t1-TP-0-EXTEND.trace.json", "t1-TP-1-DECODE.trace.json")):
        _tiny_rank(tmp_path / f, i)
    ranks, _ = find_ranks(tmp_path)
    assert [(r.rank, sorted(p.name for p in r.files)) for r in ranks] == [
        (0, ["t1-TP-0-DECODE.trace.json", "t1-TP-0-EXTEND.trace.json"]),
        (1, ["t1-TP-1-DECODE.trace.json"]),
    ]


@pytest.mark.parametrize(
    "files, needles",
    [
        (
            (("h_101.1.pt.trace.json", 0), ("h_202.2.pt.trace.json", 0)),
            ("h_101.1.pt.trace.json and", "h_202.2.pt.trace.json are both rank 0 (both by distributedInfo.rank)"),
        ),
        (
            (("rank-0.json", 0), ("h_202.2.pt.trace.json", 0)),
            ("rank-0.json and", "are both rank 0 (rank-0 in the name; distributedInfo.rank)"),
        ),
        (
            (("rank-0.json", 0), ("rank-1.json", 0)),
            ("rank-0.json and", "rank-1.json both say distributedInfo.rank 0", "named ranks 0 (name) and 1 (name)"),
        ),
        (
            (("p-TP-0.trace.json", 3), ("p-TP-1.trace.json", 3)),
            ("both say distributedInfo.rank 3", "named ranks 0 (sglang tags) and 1 (sglang tags)"),
        ),
    ],
    ids=["both-unnamed", "name-and-unnamed", "two-names-one-process", "tags-one-process"],
)
@pytest.mark.slow
def test_two_traces_of_one_distributed_rank_are_refused(cli, tmp_path, files, needles):
    """Two files of distinct bytes whose traces say one `distributedInfo.rank`: two PyTorch files of one rank, a
    rank-0 file beside an unnamed file of rank 0, or rank-0 and rank-1 that both say rank 0 (was a warning, 'the
    name is used', and a run of one process's two halves). Refused after the files are read: exit 3, both named."""
    run = tmp_path / "run"
    for i, (f, r) in enumerate(files):
        _tiny_rank(run / f, i, rank=r)
    _refused_by_imbalance_and_report(cli, run, *needles, "pass one trace per rank of one run")


@pytest.fixture(scope="module")
def train4(tmp_path_factory) -> Path:
    """Four small ranks of a training run (the generator's nccl_train4): ``rank-0.json.gz`` … ``rank-3.json.gz``,
    each trace's ``distributedInfo.rank`` its own."""
    import sys

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from fixtures.synthlib.multirank import write_run

    d = tmp_path_factory.mktemp("train4")
    write_run("nccl_train4", d / "run", truth_path=d / "truth.json")
    return d / "run"


def _set_distributed_rank(path: Path, rank: int) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["distributedInfo"]["rank"] = rank
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.mark.slow
def test_names_and_distributed_info_that_disagree_without_a_collision_are_a_warning(cli, train4, tmp_path):
    """rank-0 and rank-1 whose traces say 1 and 0: no two files share an identity either way, so the names are
    used and each disagreement is a warning naming its file; the run is analysed (exit 0)."""
    run = tmp_path / "run"
    run.mkdir()
    for f in train4.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    _set_distributed_rank(run / "rank-0.json.gz", 1)
    _set_distributed_rank(run / "rank-1.json.gz", 0)
    code, out, err = cli("imbalance", run, "-f", "json", "--no-cache")
    assert code == 0, err
    warned = [w for w in _doc(out)["warnings"] if "its distributedInfo says" in w]
    assert warned == [
        f"{run / 'rank-0.json.gz'}: its name says rank 0 (name) and its distributedInfo says [1]; the name is used",
        f"{run / 'rank-1.json.gz'}: its name says rank 1 (name) and its distributedInfo says [0]; the name is used",
    ]
    assert _doc(out)["summary"]["ranks"] == 4
    _set_distributed_rank(run / "rank-2.json.gz", 1)  # now rank-0's and rank-2's traces both say 1: refused
    code, out, err = cli("imbalance", run, "--no-cache")
    assert code == 3 and out == "" and "rank-0.json.gz and" in err and "both say distributedInfo.rank 1" in err


# --------------------------------------------------------------------------- empty steps and clock outliers


def _steps_trace(path: Path, empty: int | None) -> Path:
    ev = []
    for i in range(3):
        t = i * 20000.0
        ev += [
            gpu_ann("scheduler.run_batch", t, 20000.0, ext=i + 1),
            cpu_ann("scheduler.run_batch", t, 20000.0, ext=i + 1),
        ]
        if i != empty:
            ev.append(kernel("gemm", t + 100, 5000.0, corr=i + 10))
    return write_trace(path, ev)


def _wall(cli, trace: Path) -> dict:
    code, out, err = cli("wall", trace, "-f", "json")
    assert code == 0, err
    return _doc(out)


@pytest.mark.slow
def test_an_empty_step_is_a_step_of_idle_time(cli, tmp_path):
    """A 20 ms step marker with no GPU work had no row: it is a step of 0 busy and 20 ms idle, marked, and the step
    table and the one-step table have it too; the markers that are no step (a few µs) stay out (docs/steps.md)."""
    trace = _steps_trace(tmp_path / "e.json", empty=1)
    doc = _wall(cli, trace)
    assert doc["summary"]["steps"] == 3 and doc["summary"]["empty_steps"] == 1 and doc["summary"]["empty_markers"] == 0
    rows = doc["tables"]["per_step"]
    assert [(r["busy_ns"], r["idle_ns"], r["empty"]) for r in rows] == [
        (5_000_000, 15_000_000, False),
        (0, 20_000_000, True),
        (5_000_000, 15_000_000, False),
    ]
    assert all(r["busy_ns"] + r["ag_only_ns"] + r["idle_ns"] == r["wall_ns"] == 20_000_000 for r in rows)
    # marked as empty (the `empty` column, the health table's note), and no reason to distrust the other steps
    assert doc["summary"]["trustworthy"] is True
    t0 = tracekit.load(trace, cache=False)
    health = tracekit.steps(t0).tables["health"]
    note = health[(health["step"] == 1) & (health["check"] == "kernels")]
    assert note["ok"].tolist() == [True] and "an empty step" in note["detail"].iloc[0]
    t = tracekit.load(trace, cache=False)
    st = tracekit.find_steps(t)
    assert st.table["kernels"].tolist() == [1, 0, 1]
    one = tracekit.one_step_table(t.events, st)
    assert one[one["step"] == 1][["name", "wall_ns", "wall_pct"]].values.tolist() == [["idle", 20_000_000, 100.0]]
    # every marker holds work: nothing changes, nothing is empty
    doc = _wall(cli, _steps_trace(tmp_path / "full.json", empty=None))
    assert doc["summary"]["empty_markers"] == 0 and doc["summary"]["empty_steps"] == 0 and doc["summary"]["steps"] == 3


def test_a_marker_of_a_few_us_with_nothing_in_it_is_no_step(cli, tmp_path):
    """sglang's idle scheduler iterations: run_batch markers of a few µs between the steps, no GPU work. They are no
    step (counted in empty_markers), however many there are."""
    ev = []
    for i in range(3):
        t = i * 20000.0
        ev += [
            gpu_ann("scheduler.run_batch", t, 19000.0, ext=i + 1),
            cpu_ann("scheduler.run_batch", t, 19000.0, ext=i + 1),
        ]
        ev.append(kernel("gemm", t + 100, 5000.0, corr=i + 10))
        ev += [
            gpu_ann("scheduler.run_batch", t + 19500, 4.0, ext=i + 11),
            cpu_ann("scheduler.run_batch", t + 19500, 4.0, ext=i + 11),
        ]
    doc = _wall(cli, write_trace(tmp_path / "idle.json", ev))
    assert doc["summary"]["steps"] == 3 and doc["summary"]["empty_markers"] == 3 and doc["summary"]["empty_steps"] == 0
    assert [r["wall_ns"] for r in doc["tables"]["per_step"]] == [19_000_000] * 3


@pytest.mark.slow
def test_a_clock_outlier_is_named_and_kept_out_of_the_span(cli, tmp_path):
    """One kernel 5,000 s before a 19.5 ms trace made it 99.9998 % idle without a word. One rule, at ingest: it is set
    aside when the trace is read, counted as dropped, named in a warning of every command; temporal counts it."""
    ev = [kernel("k", i * 1000.0, 500.0, corr=i) for i in range(20)]
    trace = write_trace(tmp_path / "o.json", ev + [kernel("early", -5000e6, 10.0, corr=99)])
    code, out, err = cli("temporal", trace, "-f", "json")
    assert code == 0
    doc = _doc(out)
    s = doc["summary"]
    assert s["clock_outliers"] == 1
    assert (s["span_ns"], s["busy_ns"], s["idle_ns"]) == (19_500_000, 10_000_000, 9_500_000)
    assert "clock jump: isolated 5,000.0 s from the rest" in err and "'early'" in err
    assert any("clock jump" in w and "'early'" in w for w in doc["warnings"])
    for command in ("info", "kernels", "wall"):  # every command says it, from the one place that decided it
        code, _, err = cli(command, trace)
        assert code == 0 and "clock jump" in err and "'early'" in err, command
    t = tracekit.load(trace, cache=False)
    assert len(t.events) == 20 and sum(t.report.dropped.values()) == 1
    # the same kernels without it: the same numbers, nothing said
    code, out, err = cli("temporal", write_trace(tmp_path / "n.json", ev), "-f", "json")
    s = _doc(out)["summary"]
    assert (s["span_ns"], s["idle_ns"], s["clock_outliers"]) == (19_500_000, 9_500_000, 0) and "clock" not in err


def test_two_sessions_of_like_size_are_no_outlier(cli, tmp_path):
    """A long silence between two halves of one recording is idle time, not an outlier: neither side is small."""
    ev = [kernel("k", i * 1000.0, 500.0, corr=i) for i in range(10)]
    ev += [kernel("k", 10e6 + i * 1000.0, 500.0, corr=20 + i) for i in range(10)]
    code, out, err = cli("temporal", write_trace(tmp_path / "two.json", ev), "-f", "json")
    s = _doc(out)["summary"]
    assert code == 0 and s["clock_outliers"] == 0 and s["span_ns"] == 10_009_500_000
    assert "clock" not in err


def test_a_trace_too_small_to_judge_keeps_its_far_event(tmp_path):
    """Below 9 events there is no timeline to judge a far event by: it stays (and temporal shows its idle)."""
    ev = [kernel("k", i * 1000.0, 500.0, corr=i) for i in range(7)] + [kernel("far", 5000e6, 10.0, corr=99)]
    t = tracekit.load(write_trace(tmp_path / "small.json", ev), cache=False)
    assert len(t.events) == 8 and t.report.dropped == {}
    assert tracekit.temporal(t).summary["clock_outliers"] == 0


# --------------------------------------------------------------------------- option values


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-3", "0", "fast"])
def test_hbm_gbps_is_a_finite_positive_number_or_bus(cli, value):
    code, out, err = cli("hbm", "--hbm-gbps", value)
    assert code == 2 and out == ""
    assert "--hbm-gbps" in err and repr(value) in err


@pytest.mark.parametrize("option", [("compare", "a", "b", "--accept-len"), ("capacity", "--pool-gib")])
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_number_options_refuse_what_means_nothing(cli, option, value):
    code, out, err = cli(*option, value)
    assert code == 2 and out == "" and option[-1] in err


# --------------------------------------------------------------------------- negative sizes


def test_a_negative_kv_size_or_pool_is_refused(cli, tmp_path):
    log = tmp_path / "neg.log"
    log.write_text("\n".join(launch(kv="KV size: -41.10 GB")) + "\n")
    code, out, err = cli("ledger", log, "-f", "json")
    assert code == 0
    assert "line 5: kv_gib = -41.1 is a negative size" in err
    s = _doc(out)["summary"]
    assert "kv_gib" not in s and "kv_gib" in s["missing_rows"]
    code, out, err = cli("capacity", "--log", log)
    assert code == 3 and "line 5" in err
    pool = tmp_path / "pool.log"
    pool.write_text(
        "\n".join([*launch(), line("SWAKVPool mem usage: -60.12 GB, swa size: 2048, full size: 4096", " TP0")])
    )
    code, out, err = cli("ledger", pool, "-f", "json")
    assert code == 0 and "usage_gib = -60.12 is a negative size" in err


# --------------------------------------------------------------------------- sweeps


def _sample_copy(dst: Path, mtime: int) -> None:
    from tracekit.cli.common import bundled_sample

    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(gzip.compress(gzip.decompress(bundled_sample().read_bytes()), mtime=mtime))


@pytest.mark.slow
def test_an_unreadable_sweep_point_is_counted_and_named(cli, tmp_path, monkeypatch):
    _sample_copy(tmp_path / "sweep" / "d_bs4_100k" / "1-TP-0.trace.json.gz", 1)
    hidden = tmp_path / "sweep" / "d_bs8_100k" / "1-TP-0.trace.json.gz"
    _sample_copy(hidden, 2)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False if Path(p) == hidden else real(p, mode, *a, **k))
    code, out, err = cli("analyze", tmp_path / "sweep", "-f", "json")
    assert code == 0, err
    doc = _doc(out)
    assert doc["summary"]["skipped"] == 1 and len(doc["tables"]["sweep"]) == 1
    assert any("d_bs8_100k" in w and "cannot be read" in w for w in doc["warnings"])
    assert "d_bs8_100k" in err


@pytest.mark.slow
def test_two_runs_of_one_point_in_compare_are_kept_and_said(cli, tmp_path):
    _sample_copy(tmp_path / "a" / "d_bs4_100k" / "1-TP-0.trace.json.gz", 1)
    _sample_copy(tmp_path / "a" / "d_bs4_100k" / "2-TP-0.trace.json.gz", 2)
    _sample_copy(tmp_path / "b" / "d_bs4_100k" / "1-TP-0.trace.json.gz", 3)
    code, out, err = cli("compare", tmp_path / "a", tmp_path / "b", "-f", "json")
    assert code == 0, err
    doc = _doc(out)
    assert "2 traces for the point bs 4, context 100000" in err and "compare uses the first" in err
    assert doc["summary"]["matched_concurrencies"] == [4]
    assert len(doc["tables"]["matched"]) == 1 and doc["tables"]["matched"][0]["wall_ratio_b_over_a"] == 1.0


@pytest.mark.slow
def test_compare_of_points_without_a_context_or_a_bs(cli, tmp_path):
    """Folders named `d_bs4` (no context) crashed compare with IndexError, exit 1, one run or two: the pair's findings
    looked their point up with context == NaN. A point whose folder gives no bs (`run1`) crashed it with ValueError:
    it has no instance concurrency, so it is left out of the matching and said."""
    _sample_copy(tmp_path / "a" / "d_bs4" / "1-TP-0.trace.json.gz", 1)
    _sample_copy(tmp_path / "a" / "d_bs4" / "2-TP-0.trace.json.gz", 2)
    _sample_copy(tmp_path / "b" / "d_bs4" / "1-TP-0.trace.json.gz", 3)
    code, out, err = cli("compare", tmp_path / "a", tmp_path / "b", "-f", "json")
    assert code == 0, err
    doc = _doc(out)
    assert doc["summary"]["matched_concurrencies"] == [4] and doc["summary"]["findings_at_concurrency"] == 4
    assert [r["context"] for r in doc["tables"]["matched"]] == [None]
    assert "2 traces for the point bs 4" in err and "compare uses the first" in err
    _sample_copy(tmp_path / "c" / "run1" / "1-TP-0.trace.json.gz", 4)
    _sample_copy(tmp_path / "d" / "run1" / "1-TP-0.trace.json.gz", 5)
    _sample_copy(tmp_path / "d" / "d_bs4" / "1-TP-0.trace.json.gz", 6)
    code, out, err = cli("compare", tmp_path / "c", tmp_path / "d", "-f", "json")
    assert code == 0, err
    doc = _doc(out)
    assert doc["summary"]["matched_concurrencies"] == [] and doc["tables"]["matched"] == []
    assert "c: 1 point(s) with no batch size" in err and "run1" in err and "left out of the matching" in err
    assert len(doc["tables"]["steps"]) == 3  # every point is still a row of its side
