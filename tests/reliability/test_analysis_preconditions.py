"""Analyses check their preconditions and say when a number cannot be trusted (issue 20): several GPUs in one
file, nested or overlapping step markers, duplicate correlation ids, copies without bytes, impossible values,
a --hw that names a file."""

from __future__ import annotations

import json

import pytest

import tracekit
from tracekit.analyses.steps.resolve import find_steps
from tracekit.errors import MissingDataError
from tests.conftest import cpu_ann, gpu_ann, kernel, launch, write_trace
from tests.conftest import load_events as load


@pytest.mark.slow
def test_two_gpus_in_one_file_are_analysed_one_at_a_time(tmp_path, cli):
    """Device 0 busy 5 ms, device 1 busy 15 ms in one 20 ms step: pooled, 'busy' was 15 ms for a GPU busy 5."""
    evs = [
        gpu_ann("scheduler.run_batch", 0.0, 20_000.0),
        gpu_ann("scheduler.run_batch", 0.0, 20_000.0, device=1),
        kernel("a", 10.0, 5_000.0),
        kernel("b", 10.0, 15_000.0, device=1),
    ]
    t = load(tmp_path, evs)
    with pytest.raises(MissingDataError, match=r"2 devices \(0, 1\).*--device"):
        find_steps(t)
    assert tracekit.decompose(t.on_device(0)).tables["per_step"]["busy_ns"].tolist() == [5_000_000]
    assert tracekit.decompose(t.on_device(1)).tables["per_step"]["busy_ns"].tolist() == [15_000_000]
    path = tmp_path / "t.json"
    code, out, err = cli("wall", path, "--format", "json")
    assert code == 4 and out == "" and "--device" in err
    for args in (("--device", "1", "wall", path), ("wall", path, "--device", "1"), ("wall", path, "--device=1")):
        code, out, err = cli(*args, "--format", "json")
        assert code == 0, err
        assert json.loads(out)["tables"]["per_step"][0]["busy_ns"] == 15_000_000
    code, _, err = cli("--device", "3", "wall", path)
    assert code == 4 and "no GPU activity on device 3" in err
    assert cli("info", path)[0] == 0  # what is in the file needs no one device


def test_nested_and_overlapping_markers_are_resolved_by_one_rule(tmp_path):
    """A marker inside another of its dialect is not a step of its own; overlapping ones are cut where the next
    starts — and both are said, so that wall and blocks never count a nanosecond twice."""
    evs = [
        gpu_ann("scheduler.run_batch", 0.0, 20_000.0, ext=1),
        gpu_ann("scheduler.run_batch", 5_000.0, 5_000.0, ext=2),
        gpu_ann("scheduler.run_batch", 30_000.0, 20_000.0, ext=3),
        gpu_ann("scheduler.run_batch", 45_000.0, 20_000.0, ext=4),
    ]
    evs += [kernel("k", float(t), 1_000.0) for t in (1_000, 6_000, 31_000, 46_000, 60_000)]
    st = find_steps(load(tmp_path, evs))
    assert st.table[["start_ns", "end_ns"]].values.tolist() == [
        [0, 20_000_000],
        [30_000_000, 45_000_000],
        [45_000_000, 65_000_000],
    ]
    assert any("inside another" in w for w in st.warnings) and any("overlap" in w for w in st.warnings)
    wall = tracekit.decompose(load(tmp_path, evs, "t2.json"))
    assert wall.tables["per_step"]["wall_ns"].sum() == 20_000_000 + 15_000_000 + 20_000_000


def test_duplicate_correlation_ids_do_not_merge_steps(tmp_path):
    """Two 17 ms steps whose launches reuse one correlation id became one 66 ms step."""
    evs = []
    for i, t0 in enumerate((0.0, 50_000.0)):
        evs += [
            cpu_ann("step[DECODE bs=8]", t0, 100.0),
            launch("cudaGraphLaunch", t0 + 10.0, 77),
            kernel("k", t0 + 1_000.0, 17_000.0, corr=77),
        ]
    st = find_steps(load(tmp_path, evs))
    assert st.table[["start_ns", "dur_ns"]].values.tolist() == [[1_000_000, 17_000_000], [51_000_000, 17_000_000]]
    assert any("correlation id" in w and "reused" in w for w in st.warnings)


def test_hw_names_a_file_first(tmp_path, cli):
    """`--hw b200.json` read the shipped b200 profile, not the user's file of that name."""
    from tracekit.gpu_specs import load_profile

    doc = json.loads(load_profile("b200").path and open(load_profile("b200").path).read())
    doc["name"], doc["hbm_gbps"] = "my_b200", 1234.0
    (tmp_path / "b200.json").write_text(json.dumps(doc))
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert load_profile("b200.json").hbm_gbps == 1234.0
        assert load_profile("b200").hbm_gbps != 1234.0
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize(
    "expr, says",
    [
        ("9**9**9", "out of range"),
        ("1e308*10", "outside"),
        ("bs/0", "divides by zero"),
        ("(" * 300 + "1" + ")" * 300, "not a formula"),
        ("x" * 2000, "longer than"),
        ("2**200", "out of range"),
    ],
)
def test_formulas_are_bounded(expr, says):
    """A formula `9**9**9` hung `roofline`; `1e308`-sized results were 'a tracekit bug'."""
    import time

    from tracekit.analyses.hardware.roofline import eval_formula
    from tracekit.errors import DataFileError

    t0 = time.perf_counter()
    with pytest.raises(DataFileError, match=says):
        eval_formula(expr, {"bs": 4.0}, "ann.json: $.op_shapes.x.m")
    assert time.perf_counter() - t0 < 1.0
    assert eval_formula("ceil(bs * 5 / 2) ** 2", {"bs": 4.0}, "w") == 100


@pytest.mark.parametrize("bad", ["context=nan", "context=inf", "context=-inf"])
def test_non_finite_variables_are_refused(bad, cli):
    code, out, err = cli("hbm", "-a", "k3_dp16", "--hw", "b200", "--var", bad)
    assert code == 3 and out == "" and "finite" in err and "Traceback" not in err


@pytest.mark.slow
def test_impossible_values_are_refused_or_flagged(tmp_path, cli):
    """A negative KV size, 10^30 tokens and a bench row of -8 x -80 ms were accepted and turned into numbers."""
    code, _, err = cli("capacity", "--pool-gib", "0", "--layers", "61", "--kv-lora-rank", "512", "--rope-dim", "64")
    assert code == 3 and "which no GPU has" in err
    log = tmp_path / "x.log"
    log.write_text(
        "[2026-05-01 10:00:00 TP0] KV Cache is allocated. #tokens: 1000000000000000000000000000000, KV size: 10.00 GB\n"
    )
    code, _, err = cli("capacity", "--log", log)
    assert code == 3 and "#tokens" in err and "Traceback" not in err
    (tmp_path / "b.csv").write_text("deployment,context,concurrency,generation_time_ms\na,100,-8,-80\nb,100,8,80\n")
    code, out, err = cli("bench", tmp_path / "b.csv", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["summary"]["invalid"] == 1 and "not positive" in err
    rows = {r["deployment"]: r for r in doc["tables"]["results"]}
    assert rows["a"]["valid"] is False and rows["a"]["est_throughput_tok_s"] is None
    assert rows["b"]["est_throughput_tok_s"] == pytest.approx(8 * 3.5 / 0.08)
    code, _, err = cli("bench", "fixtures/synthetic/dsv3_bs32.trace.json.gz")
    assert code == 3 and "not a benchmark result" in err


@pytest.mark.slow
def test_a_sweep_names_every_point_it_skipped(tmp_path, cli):
    """A point behind a symlink or in an unreadable directory was skipped with exit 0 and no word."""
    import os
    import shutil

    from fixtures.synth import build, write_trace as write_synth

    tr, _ = build("dsv3", 4, steps=2, step_marker="decode")
    root = tmp_path / "sweep"
    write_synth(root / "d_bs4_8k" / "run-TP-0.trace.json.gz", tr)
    elsewhere = tmp_path / "elsewhere" / "d_bs8_8k"
    write_synth(elsewhere / "run-TP-0.trace.json.gz", tr)
    os.symlink(elsewhere, root / "d_bs8_8k")  # a point behind a link: followed
    locked = root / "d_bs16_8k"
    write_synth(locked / "run-TP-0.trace.json.gz", tr)
    (root / "d_bs4_8k" / "analyze.json").write_text('{"tracekit": "0.1.0", "schema": "tracekit.analyze/1"}')
    os.chmod(locked, 0)
    try:
        code, out, err = cli("analyze", root, "--format", "json", "-j", "1")
    finally:
        os.chmod(locked, 0o755)
    doc = json.loads(out)
    assert code == 0 and [p["bs"] for p in doc["tables"]["sweep"]] == ([4, 8, 16] if os.geteuid() == 0 else [4, 8])
    reasons = {r["path"]: r["reason"] for r in doc["tables"]["skipped"]}
    if os.geteuid() != 0:  # root reads a directory of mode 0 all the same
        assert any("cannot be read" in r for r in reasons.values())
    assert any("tracekit output" in r for r in reasons.values()) and doc["summary"]["skipped"] >= 1
    assert "skipped" in err
    shutil.rmtree(tmp_path / "elsewhere")
    code, out, err = cli("analyze", root, "--format", "json", "-j", "1")
    assert code == 0 and any("broken link" in r["reason"] for r in json.loads(out)["tables"]["skipped"])


@pytest.mark.slow
def test_the_same_point_twice_is_said_and_compare_works(tmp_path, cli):
    from fixtures.synth import build, write_trace as write_synth

    tr, _ = build("dsv3", 4, steps=2, step_marker="decode")
    for side in ("a", "b"):
        for run in ("r1", "r2"):
            write_synth(tmp_path / side / run / "d_bs4_8k" / "x-TP-0.trace.json.gz", tr)
    code, out, err = cli("analyze", tmp_path / "a", "--format", "json", "-j", "1")
    assert code == 0 and "2 traces for the point bs 4" in err
    code, out, err = cli("compare", tmp_path / "a", tmp_path / "b", "--format", "json", "-j", "1")
    assert code == 0, err
    assert len(json.loads(out)["tables"]["steps"]) == 2  # one row per side for the one point


EVIL = "(a+)+$"


@pytest.mark.slow
def test_user_regexes_are_time_bounded(tmp_path, cli):
    """A user regex `(a+)+$` in a boundary rule or a selector never returned."""
    import time

    name = "a" * 5000 + "!"  # the regex package gives up on this after its timeout; re would run for ever
    evs = [
        gpu_ann("scheduler.run_batch", 0.0, 20_000.0),
        kernel(name, 10.0, 5.0),
        kernel("k", 20.0, 5.0),
        gpu_ann(name, 0.0, 10.0, ext=9),
    ]
    path = write_trace(tmp_path / "t.json", evs)
    ann = json.loads(open("annotations/decode_sample.json").read())
    ann["blocks"]["boundary"] = [EVIL]
    (tmp_path / "evil.json").write_text(json.dumps(ann))
    steps = tmp_path / "steps.json"
    whole = "(a|aa)+"  # --step-name and dialects match whole names: this one backtracks there
    steps.write_text(json.dumps({"dialects": [{"name": "x", "pattern": whole, "kinds": ["gpu_annotation"]}]}))
    cases = [
        (("blocks", path, "-a", tmp_path / "evil.json"), 2),
        (("stats", path, "-s", f"name:{EVIL}"), 2),
        (("steps", path, "--step-name", whole), 2),
        (("steps", path, "--steps-file", steps), 3),
    ]
    for args, want in cases:
        t0 = time.perf_counter()
        code, out, err = cli(*args)
        assert code == want and out == "" and "backtracks" in err, (args, code, err)
        assert time.perf_counter() - t0 < 10


@pytest.mark.slow
def test_shipped_patterns_are_linear_in_name_length():
    """A 1 MB kernel name against a shipped pattern once took 129 s."""
    import glob
    import re
    import time

    pats = []

    def collect(obj):
        if isinstance(obj, dict):
            for v in obj.values():
                collect(v)
        elif isinstance(obj, list):
            for v in obj:
                collect(v)
        elif isinstance(obj, str) and any(c in obj for c in "\\[(|^$*+?"):
            try:
                pats.append(re.compile(obj))
            except re.error:
                pass

    for f in glob.glob("tracekit/data/*.json") + glob.glob("annotations/*.json"):
        collect(json.load(open(f)))
    assert len(pats) > 100
    names = ["a" * 1_000_000, "_" * 1_000_000, "a_:<" * 250_000, "0" * 1_000_000]
    t0 = time.perf_counter()
    for rx in pats:
        for n in names:
            rx.search(n)
    assert time.perf_counter() - t0 < 120  # ~40 s here: about 0.05 s per pattern and MB, linear


@pytest.mark.slow
def test_a_log_with_two_launches_is_two_ledgers(tmp_path, cli):
    """A log holding a restart gave weights_resident 49.8 instead of 97.5 GiB and doubled pools."""
    one = open("fixtures/synthetic/dp16.launch.log").read()
    log = tmp_path / "two.log"
    log.write_text(one + one)
    want = {
        r["row"]: r["value"]
        for r in json.loads(cli("ledger", "fixtures/synthetic/dp16.launch.log", "--format", "json")[1])["tables"][
            "rows"
        ]
    }
    for extra in ([], ["--launch", "1"], ["--launch", "2"]):
        code, out, err = cli("ledger", log, *extra, "--format", "json")
        rows = {r["row"]: r["value"] for r in json.loads(out)["tables"]["rows"]}
        assert code == 0 and rows["weights_resident_gib"] == want["weights_resident_gib"] == 97.5
        assert rows["kv_gib"] == want["kv_gib"] and "2 launches" in err
    code, _, err = cli("ledger", log, "--launch", "3")
    assert code == 2 and "holds 2 launch" in err
    code, out, _ = cli("capacity", "--log", log, "--format", "json")
    assert (
        code == 0
        and json.loads(out)["summary"]["tokens_per_rank"]
        == json.loads(cli("capacity", "--log", "fixtures/synthetic/dp16.launch.log", "--format", "json")[1])["summary"][
            "tokens_per_rank"
        ]
    )


def test_a_fifo_is_refused_not_waited_on(tmp_path, cli):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (("ledger", fifo), ("info", fifo)):
        code, out, err = cli(*args)
        assert code == 3 and "not a regular file" in err, (args, err)


def test_the_api_refuses_a_fifo_too(tmp_path):
    import os

    import tracekit
    from tracekit.errors import InputError

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        tracekit.load(fifo)  # was: blocked forever waiting for a writer
