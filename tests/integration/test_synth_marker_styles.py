"""The generator's step-marker styles (fixtures/synth.py): each writes exactly the markers it describes.

Only the generator and plain json/gzip parsing are used here (no tracekit): the written trace is read
back as JSON and its markers, launches and GPU events are checked against the style's description and
against the truth. The expected marker names are spelled out below from the description, not taken
from the generator.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures.synth import STEP_MARKERS, build, write_trace  # noqa: E402
from fixtures.synthlib.cli import main as synth_main  # noqa: E402

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

NEW_STYLES = ("sglang_modes", "vllm", "vllm_native", "profilerstep_rocm", "none")
PRESET, BS, STEPS, Q_LEN, KV = "dsv3", 8, 4, 1, 8192
UNDER = 1  # the under-recorded step
MARKER_CATS = ("user_annotation", "gpu_user_annotation")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def ns(us: float) -> int:
    return int(round(us * 1000))


def expected(style: str, i: int) -> dict:
    """The marker name, phase, tokens and bs of step i, from the styles' description."""
    gen = BS * Q_LEN
    if style == "sglang_modes":
        mode = ("DECODE", "EXTEND", "TARGET_VERIFY")[i % 3]
        toks = BS * 1024 if mode == "EXTEND" else gen
        phase = {"DECODE": "decode", "EXTEND": "prefill", "TARGET_VERIFY": "verify"}[mode]
        return {"name": f"step[{mode} bs={BS} toks={toks}]", "phase": phase, "tokens": toks, "bs": BS}
    if style == "vllm":
        k = BS * KV + i
        return {
            "name": f"execute_{gen}_context_0(sq0sk0sqsq0sqsk0)_generation_{BS}(sq{BS}sk{k}sqsq{BS}sqsk{k})",
            "phase": "decode",
            "tokens": gen,
            "bs": BS,
        }
    if style == "vllm_native":
        if i % 2 == 0:
            return {"name": f"execute_context_0(0)_generation_{BS}({gen})", "phase": "decode", "tokens": gen, "bs": BS}
        return {
            "name": f"execute_context_2(2048)_generation_{BS}({gen})",
            "phase": "mixed",
            "tokens": 2048 + gen,
            "bs": BS + 2,
        }
    if style == "profilerstep_rocm":
        return {"name": f"ProfilerStep#{100 + i}", "phase": "decode", "tokens": None, "bs": BS}
    return {"name": None, "phase": "decode", "tokens": None, "bs": BS}


_CACHE: dict = {}


def written(style: str, tmp_dir: Path, under_recorded=None, noise: bool = False) -> tuple[list, dict]:
    """Build, write (gzip) and read back: (traceEvents, truth)."""
    key = (style, under_recorded, noise)
    if key not in _CACHE:
        trace, truth = build(PRESET, BS, steps=STEPS, step_marker=style, under_recorded=under_recorded, noise=noise)
        path = write_trace(tmp_dir / f"{style}_{under_recorded}_{noise}.trace.json.gz", trace)
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        _CACHE[key] = (doc["traceEvents"], truth)
    return _CACHE[key]


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("marker_styles")


def markers(events: list, cat: str) -> list:
    return sorted((e for e in events if e.get("cat") == cat), key=lambda e: e["ts"])


def gpu_events(events: list) -> list:
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS]


def step_of(truth: dict, t_ns: int):
    for row in truth["steps"]:
        if row["start_ns"] <= t_ns < row["end_ns"]:
            return row["step"]
    return None


def launches_by_step(events: list, truth: dict) -> dict:
    """step -> the cuda_runtime events whose correlation has a GPU activity inside that step's window."""
    corr_step = {}
    for e in gpu_events(events):
        corr_step.setdefault(e["args"]["correlation"], step_of(truth, ns(e["ts"])))
    out: dict = {}
    for e in events:
        if e.get("cat") == "cuda_runtime" and e["args"]["correlation"] in corr_step:
            out.setdefault(corr_step[e["args"]["correlation"]], []).append(e)
    return out


def contains(outer: dict, inner: dict) -> bool:
    s, e = ns(outer["ts"]), ns(outer["ts"]) + ns(outer["dur"])
    return s <= ns(inner["ts"]) and ns(inner["ts"]) + ns(inner["dur"]) <= e


def test_styles_are_registered():
    assert set(NEW_STYLES) <= set(STEP_MARKERS)
    assert {"run_batch", "decode", "both"} <= set(STEP_MARKERS)


@pytest.mark.parametrize("style", NEW_STYLES)
@pytest.mark.parametrize("under", (None, UNDER))
def test_markers_are_exactly_the_described_ones(style, under, tmp_dir):
    events, truth = written(style, tmp_dir, under)
    cpu, gpu = markers(events, "user_annotation"), markers(events, "gpu_user_annotation")
    exp = [expected(style, i) for i in range(STEPS)]
    names = [x["name"] for x in exp]
    steps_cpu = [e for e in cpu if e["name"] != "scheduler.run_batch"]
    run_batch = [e for e in cpu if e["name"] == "scheduler.run_batch"]
    if style == "none":
        assert cpu == [] and gpu == []
        assert not [e for e in events if e.get("cat") in MARKER_CATS or "run_batch" in str(e.get("name"))]
        return
    assert [e["name"] for e in steps_cpu] == names  # one CPU marker per step, in step order
    assert all(e["ph"] == "X" and e["tid"] == e["pid"] for e in steps_cpu)
    if style == "sglang_modes":
        assert [n.split()[0] for n in names] == ["step[DECODE", "step[EXTEND", "step[TARGET_VERIFY", "step[DECODE"]
        assert names[0] == "step[DECODE bs=8 toks=8]" and names[1] == "step[EXTEND bs=8 toks=8192]"
        assert gpu == []
        # the empty CPU run_batch spans: one after each step, between the step markers, ~0 ms
        assert len(run_batch) == STEPS
        for k, rb in enumerate(run_batch):
            assert ns(rb["dur"]) < 100_000
            assert ns(rb["ts"]) >= ns(steps_cpu[k]["ts"]) + ns(steps_cpu[k]["dur"])
            assert ns(rb["ts"]) >= truth["steps"][k]["end_ns"]
            if k + 1 < STEPS:
                assert ns(rb["ts"]) + ns(rb["dur"]) <= ns(steps_cpu[k + 1]["ts"])
    else:
        assert run_batch == []
    if style == "vllm":
        assert len(set(names)) == STEPS  # the kv count differs per step
        assert [e["name"] for e in gpu] == names
        for e, row in zip(gpu, truth["steps"]):
            assert ns(e["ts"]) == row["start_ns"] and ns(e["ts"]) + ns(e["dur"]) == row["end_ns"]
    elif style == "profilerstep_rocm":
        assert names == ["ProfilerStep#100", "ProfilerStep#101", "ProfilerStep#102", "ProfilerStep#103"]
        assert [e["name"] for e in gpu] == names
        for e, row in zip(gpu, truth["steps"]):
            assert ns(e["ts"]) == row["start_ns"] and 15_000 <= ns(e["dur"]) <= 20_000
    elif style in ("vllm_native", "sglang_modes"):
        assert gpu == []
    streams = {e["tid"] for e in gpu}
    assert streams <= {truth["streams"]["main"]}
    # GPU markers share the External id of their CPU marker
    cpu_ext = {e["name"]: e["args"]["External id"] for e in steps_cpu}
    assert all(e["args"]["External id"] == cpu_ext[e["name"]] for e in gpu)


@pytest.mark.parametrize("style", NEW_STYLES)
@pytest.mark.parametrize("under", (None, UNDER))
def test_truth_rows(style, under, tmp_dir):
    events, truth = written(style, tmp_dir, under)
    assert truth["step_marker"] == style and truth["under_recorded"] == under
    assert [r["step"] for r in truth["steps"]] == list(range(STEPS))
    gpu = gpu_events(events)
    assert truth["gpu_events"] == len(gpu)
    for i, row in enumerate(truth["steps"]):
        exp = expected(style, i)
        assert (row["marker_name"], row["phase"], row["tokens"], row["bs"]) == (
            exp["name"],
            exp["phase"],
            exp["tokens"],
            exp["bs"],
        )
        mine = [e for e in gpu if row["start_ns"] <= ns(e["ts"]) < row["end_ns"]]
        assert row["gpu_events"] == len(mine) > 0
        assert row["start_ns"] == min(ns(e["ts"]) for e in mine)
        assert row["end_ns"] == max(ns(e["ts"]) + ns(e["dur"]) for e in mine)
        assert row["wall_ns"] == row["end_ns"] - row["start_ns"]
    if style == "none":
        assert truth["whole_trace_window"] == {
            "start_ns": min(ns(e["ts"]) for e in gpu),
            "end_ns": max(ns(e["ts"]) + ns(e["dur"]) for e in gpu),
        }
    else:
        assert "whole_trace_window" not in truth


@pytest.mark.parametrize("style", [s for s in NEW_STYLES if s != "none"])
@pytest.mark.parametrize("under", (None, UNDER))
def test_cpu_marker_spans_every_launch_of_its_step(style, under, tmp_dir):
    events, truth = written(style, tmp_dir, under)
    steps_cpu = [e for e in markers(events, "user_annotation") if e["name"] != "scheduler.run_batch"]
    by_step = launches_by_step(events, truth)
    assert sorted(by_step) == list(range(STEPS))
    for i, marker in enumerate(steps_cpu):
        assert by_step[i] and all(contains(marker, c) for c in by_step[i]), (style, i)
        # and no launch of another step
        others = [c for k, cs in by_step.items() if k != i for c in cs]
        assert not any(contains(marker, c) for c in others)
    graph_launches = [e for e in events if e.get("name") == "cudaGraphLaunch"]
    assert len(graph_launches) == STEPS  # dsv3: one target-graph replay per step
    recorded = {e["args"]["correlation"] for e in gpu_events(events)}
    orphans = [e for e in graph_launches if e["args"]["correlation"] not in recorded]
    if under is None:
        assert orphans == []
    else:  # the under-recorded replay's launch has no GPU event but still lies in its step's marker
        assert len(orphans) == 1 and contains(steps_cpu[under], orphans[0])


@pytest.mark.parametrize("style", NEW_STYLES + ("run_batch",))
def test_under_recorded_step_loses_its_replay_only(style, tmp_dir):
    full, full_truth = written(style, tmp_dir, None)
    events, truth = written(style, tmp_dir, UNDER)
    row = full_truth["steps"][UNDER]
    graphs = {e["args"]["correlation"]: e for e in full if e.get("name") == "cudaGraphLaunch"}
    replay = [
        e
        for e in gpu_events(full)
        if e["args"]["correlation"] in graphs and row["start_ns"] <= ns(e["ts"]) < row["end_ns"]
    ]
    corr = {e["args"]["correlation"] for e in replay}
    assert len(corr) == 1 and len(replay) > 1000  # the whole target model is one replay
    corr = corr.pop()
    assert not [e for e in gpu_events(events) if e["args"]["correlation"] == corr]
    launch = [e for e in events if e.get("cat") == "cuda_runtime" and e["args"]["correlation"] == corr]
    assert [e["name"] for e in launch] == ["cudaGraphLaunch"]
    # nothing else changed: the CPU side is identical, the GPU side lost exactly the replay
    assert [e for e in full if e.get("ph") == "X" and e.get("cat") not in GPU_CATS + MARKER_CATS] == [
        e for e in events if e.get("ph") == "X" and e.get("cat") not in GPU_CATS + MARKER_CATS
    ]
    assert len(gpu_events(full)) - len(gpu_events(events)) == len(replay)
    assert truth["gpu_events"] == full_truth["gpu_events"] - len(replay)
    in_window = [e for e in gpu_events(full) if row["start_ns"] <= ns(e["ts"]) < row["end_ns"]]
    assert truth["steps"][UNDER]["gpu_events"] == len(in_window) - len(replay) > 0
    assert truth["under_recorded"] == UNDER
    for k in range(STEPS):
        if k != UNDER:  # the other steps' truth is untouched
            drop = ("phase", "tokens", "marker_name", "gpu_events")
            assert {a: b for a, b in truth["steps"][k].items() if a not in drop} == {
                a: b for a, b in full_truth["steps"][k].items() if a not in drop
            }


def test_legacy_styles_keep_their_truth_keys(tmp_dir):
    _, truth = written("run_batch", tmp_dir, None)
    assert "under_recorded" not in truth and "phase" not in truth["steps"][0]
    _, ur = written("run_batch", tmp_dir, UNDER)
    assert ur["steps"][0]["marker_name"] == "scheduler.run_batch" and ur["under_recorded"] == UNDER


@pytest.mark.parametrize("style", NEW_STYLES)
def test_noise_adds_no_markers(style, tmp_dir):
    quiet, _ = written(style, tmp_dir, None)
    noisy, _ = written(style, tmp_dir, None, noise=True)
    names = lambda ev: [(e["cat"], e["name"]) for e in ev if e.get("cat") in MARKER_CATS]  # noqa: E731
    assert names(noisy) == names(quiet)
    assert any(e.get("cat") == "cpu_op" for e in noisy)


def test_bad_under_recorded_step_is_refused():
    with pytest.raises(ValueError):
        build(PRESET, BS, steps=2, under_recorded=2)


def test_cli_writes_a_new_style(tmp_path):
    rc = synth_main(
        [
            "write",
            "--preset",
            PRESET,
            "--bs",
            "4",
            "--steps",
            "2",
            "--step-marker",
            "vllm_native",
            "--under-recorded",
            "0",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    truth = json.loads((tmp_path / "dsv3_bs4.truth.json").read_text())
    assert truth["step_marker"] == "vllm_native" and truth["under_recorded"] == 0
    assert [r["marker_name"] for r in truth["steps"]] == [
        "execute_context_0(0)_generation_4(4)",
        "execute_context_2(2048)_generation_4(4)",
    ]
    with gzip.open(tmp_path / "dsv3_bs4.trace.json.gz", "rt") as f:
        doc = json.load(f)
    assert [e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"] == [
        r["marker_name"] for r in truth["steps"]
    ]


def test_under_recorded_replay_takes_its_allgather_copies_along():
    """DP16: the target replay also carries the weight-AllGather copies (same correlation): they go too,
    and the truth's AllGathers, copies and exposure are computed from what remains."""
    trace, truth = build("dp16", 4, steps=2, step_marker="vllm", under_recorded=1)
    _, full = build("dp16", 4, steps=2, step_marker="vllm")
    ev = trace["traceEvents"]
    graph_corrs = {e["args"]["correlation"] for e in ev if e.get("name") == "cudaGraphLaunch"}
    by_corr: dict = {}
    for e in gpu_events(ev):
        by_corr.setdefault(e["args"]["correlation"], []).append(e)
    missing = graph_corrs - set(by_corr)
    assert len(missing) == 1  # one replay (step 1's target graph) left no GPU event, copies included
    assert [g["layer"] for g in truth["allgathers"] if g["step"] == 1] == [f"draft{d}" for d in range(5)]
    assert len([g for g in full["allgathers"] if g["step"] == 1]) == 92 + 5
    ptop = [e for e in gpu_events(ev) if e["name"] == "Memcpy PtoP (Device -> Device)"]
    assert len(ptop) == len(truth["copies"]["rows"]) == 7 * len(truth["allgathers"])
    assert all(truth["allgathers"][r[1]]["step"] == r[0] for r in truth["copies"]["rows"])
    for row in truth["steps"]:
        assert sum(row["exposure_ns"].values()) == row["ptop+local"]["ag_only_ns"]
        parts = row["ptop"]
        assert parts["busy_ns"] + parts["ag_only_ns"] + parts["idle_ns"] == row["wall_ns"]
    assert truth["steps"][0]["allgather"] == full["steps"][0]["allgather"]
