"""Step dialects (tracekit/data/steps.json): every framework's marker name → phase, bs, tokens; and the finder's
rules on small hand-built traces — exact vs regex names, phase selection, GPU span vs launch window, graph
kernels after the marker, under-recorded replays, user dialect files, the options' one resolution."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tracekit
from tracekit.analyses.steps.resolve import (
    Steps,
    StepOptions,
    scan,
    find_steps,
    step_options,
    step_rules,
)
from tracekit.errors import DataFileError, MissingDataError, UsageError
from tests.conftest import cpu_ann, gpu_ann, kernel, launch
from tests.conftest import load_events as load


def _fields(name):
    """(dialect name, phase, bs, tokens) of the first shipped dialect matching the whole name."""
    for d in step_rules().dialects:
        m = d.pattern.fullmatch(name)
        if m:
            return (d.name, *d.fields(m))
    return None


@pytest.mark.parametrize(
    "name, expected",
    [
        ("step[DECODE bs=64]", ("sglang_step", "decode", 64, None)),
        ("step[EXTEND bs=15 toks=15360]", ("sglang_step", "prefill", 15, 15360)),
        ("step[TARGET_VERIFY bs=32]", ("sglang_step", "verify", 32, None)),
        ("step[DRAFT_EXTEND_V2 bs=8]", ("sglang_step", "draft", 8, None)),
        ("step[DRAFT_EXTEND bs=8 toks=40]", ("sglang_step", "draft", 8, 40)),
        ("step[MIXED bs=9 toks=700 c=1 g=8 c_sq=692]", ("sglang_step", "mixed", 9, 700)),
        ("step[IDLE bs=0]", ("sglang_step", "idle", 0, None)),
        ("step[SOME_NEW_MODE bs=3]", ("sglang_step", "unknown", 3, None)),
        ("step[DECODE bs=64 g_sq=64 g_sqsq=64 g_sqsk=524288 g_sk=524288]", ("sglang_step", "decode", 64, None)),
        ("scheduler.run_batch", ("sglang_run_batch", "unknown", None, None)),
        ("execute_context_0(0)_generation_64(64)", ("vllm_native", "decode", 64, 64)),
        ("execute_context_1(888_788544)_generation_0(0)", ("vllm_native", "prefill", 1, 888)),
        ("execute_context_2(2048)_generation_30(30)", ("vllm_native", "mixed", 32, 2078)),
        ("execute_context_0(512_0)_generation_0(0)", ("vllm_native", "idle", 0, 512)),
        (
            "execute_64_context_0(sq0sk0sqsq0sqsk0)_generation_64(sq64sk131072sqsq64sqsk131072)",
            ("vllm_detailed", "decode", 64, 64),
        ),
        (
            "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)",
            ("vllm_detailed", "decode", 32, 32),
        ),
        (
            "execute_4100_context_2(sq4096sk4096sqsq8388608sqsk8388608)_generation_4(sq4sk9000sqsq4sqsk9000)",
            ("vllm_detailed", "mixed", 6, 4100),
        ),
        ("execute_new_4_cached_0", ("vllm_legacy", "prefill", 4, None)),
        ("execute_new_0_cached_12", ("vllm_legacy", "decode", 12, None)),
        ("decode[bs=117/128 tok=117 d=117]", ("atom", "decode", 117, 117)),
        ("prefill[bs=2 tok=14721 ctx=[7000, 7721]]", ("atom", "prefill", 2, 14721)),
        ("[Executor] _forward_step 42: 0 ctx reqs, 16 gen reqs", ("trtllm", "decode", 16, None)),
        ("[Executor] _forward_step 7: 2 ctx reqs, 4096 ctx tokens, 1 gen reqs", ("trtllm", "mixed", 3, 4096)),
        ("gpu_model_runner: forward", ("vllm_forward", "unknown", None, None)),
        ("ProfilerStep#12", ("profiler_step", "unknown", None, None)),
    ],
)
def test_every_dialect_reads_phase_bs_and_tokens(name, expected):
    assert _fields(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "forward",
        "## Call CompiledFxGraph abc ##",
        "nccl:_all_gather_base",
        "Optimizer.step#SGD.step",
        "step[DECODE]",
        "execute_model",
        "ProfilerStep",
    ],
)
def test_names_that_are_not_steps(name):
    assert _fields(name) is None


@pytest.mark.slow
@given(
    mode=st.from_regex(r"[A-Z][A-Z0-9_]{0,15}", fullmatch=True),
    bs=st.integers(0, 10**6),
    toks=st.one_of(st.none(), st.integers(0, 10**9)),
)
def test_sglang_any_mode_parses(mode, bs, toks):
    name = f"step[{mode} bs={bs}" + (f" toks={toks}" if toks is not None else "") + "]"
    d, phase, got_bs, got_toks = _fields(name)
    modes = dict(next(x for x in step_rules().dialects if x.name == "sglang_step").modes)
    assert (d, phase, got_bs, got_toks) == ("sglang_step", modes.get(mode, "unknown"), bs, toks)


@given(ctx=st.integers(0, 4096), gen=st.integers(0, 4096), ctok=st.integers(0, 10**7), gtok=st.integers(0, 10**7))
def test_vllm_native_phase_follows_the_counts(ctx, gen, ctok, gtok):
    d, phase, bs, tokens = _fields(f"execute_context_{ctx}({ctok})_generation_{gen}({gtok})")
    assert d == "vllm_native" and bs == ctx + gen and tokens == ctok + gtok
    assert phase == ("mixed" if ctx and gen else "prefill" if ctx else "decode" if gen else "idle")


# --------------------------------------------------------------------------- the finder on hand-built traces


def _mixed_sglang(tmp_path):
    """Three CPU-marked steps: DECODE, EXTEND, DECODE, each one eager kernel of 100 µs."""
    evs = []
    for i, mode in enumerate(["DECODE bs=4", "EXTEND bs=4 toks=4096", "DECODE bs=4"]):
        t0 = 1000.0 * i
        evs += [
            cpu_ann(f"step[{mode}]", t0, 50.0),
            launch("cudaLaunchKernel", t0 + 10, 10 + i),
            kernel("k", t0 + 100, 100.0, corr=10 + i),
        ]
    return load(tmp_path, evs)


def test_phase_auto_takes_decode_and_says_what_it_left_out(tmp_path):
    t = _mixed_sglang(tmp_path)
    st = find_steps(t)
    assert st.table["phase"].tolist() == ["decode", "decode"] and st.table["step"].tolist() == [0, 1]
    assert st.phases == {"decode": 2, "prefill": 1}
    assert any("1 prefill" in w and "--phase all" in w for w in st.warnings)
    every = find_steps(t, step_options(phase="all"))
    assert every.table["phase"].tolist() == ["decode", "prefill", "decode"]
    assert every.table["tokens"].tolist()[1] == 4096
    pre = find_steps(t, step_options(phase="prefill"))
    assert pre.table["start_ns"].tolist() == [1_100_000] and pre.table["dur_ns"].tolist() == [100_000]
    with pytest.raises(MissingDataError, match="no verify step"):
        find_steps(t, step_options(phase="verify"))


def test_step_name_exact_then_regex(tmp_path):
    evs = [
        cpu_ann("execute_context_0(0)_generation_8(8)", 0.0, 50.0),
        launch("cudaLaunchKernel", 10.0, 1),
        kernel("k", 100.0, 100.0, corr=1),
        cpu_ann("execute_context_0(0)_generation_9(9)", 1000.0, 50.0),
        launch("cudaLaunchKernel", 1010.0, 2),
        kernel("k", 1100.0, 100.0, corr=2),
    ]
    t = load(tmp_path, evs)
    exact = find_steps(t, step_options(step_name="execute_context_0(0)_generation_9(9)"))
    assert exact.match == "exact" and exact.table["bs"].tolist() == [9] and exact.table["phase"].tolist() == ["decode"]
    rx = find_steps(t, step_options(step_name=r"execute_context_0\(0\)_generation_\d+\(\d+\)"))
    assert rx.match == "regex" and rx.table["bs"].tolist() == [8, 9]
    # by default the vLLM dialect finds both, each with its own name
    st = find_steps(t)
    assert st.match == "vllm_native" and st.table["name"].nunique() == 2
    with pytest.raises(UsageError):
        find_steps(t, step_options(step_name="execute_(("))


def _rocm_like(tmp_path, gpu_dur=17.0):
    """A CPU ProfilerStep span launching 3 kernels over 9 ms, and its GPU span covering only the first 17 µs."""
    evs = [cpu_ann("ProfilerStep#1", 0.0, 9_500.0, ext=1), gpu_ann("ProfilerStep#1", 500.0, gpu_dur, ext=1, stream=0)]
    for i, ts in enumerate([500.0, 4_000.0, 8_000.0]):
        evs += [launch("hipLaunchKernel", 10.0 + i, 20 + i), kernel(f"k{i}", ts, 900.0, corr=20 + i, stream=0)]
    return load(tmp_path, evs)


@pytest.mark.slow
def test_tiny_gpu_span_gives_way_to_the_launch_window(tmp_path):
    t = _rocm_like(tmp_path)
    auto = find_steps(t)
    row = auto.table.iloc[0]
    assert (row["source"], row["start_ns"], row["end_ns"]) == ("cpu_launch_window", 500_000, 8_900_000)
    assert any("launch window" in w for w in auto.warnings) and auto.trustworthy
    gpu = find_steps(t, step_options(source="gpu"))
    assert (gpu.table["source"].iloc[0], gpu.table["dur_ns"].iloc[0]) == ("gpu_annotation", 17_000)
    assert not gpu.trustworthy and any("window_covers_launched_work" in r for r in gpu.reasons)
    cpu = find_steps(t, step_options(source="cpu"))
    assert cpu.table[["start_ns", "end_ns"]].values.tolist() == [[500_000, 8_900_000]]


def test_graph_kernels_after_the_gpu_marker_belong_to_its_step(tmp_path):
    # the GPU span covers most of the work; a burst of the step's graph kernels lands after it (sglang #31545)
    evs = [
        cpu_ann("step[DECODE bs=8]", 0.0, 100.0, ext=5),
        gpu_ann("step[DECODE bs=8]", 200.0, 1_000.0, ext=5),
        launch("cudaGraphLaunch", 50.0, 9),
    ]
    evs += [kernel(f"k{i}", 200.0 + 100 * i, 90.0, corr=9) for i in range(10)]  # 200 .. 1190, inside
    evs += [kernel("late", 1_300.0, 50.0, corr=9)]  # after the GPU span
    st = find_steps(load(tmp_path, evs))
    row = st.table.iloc[0]
    assert (row["source"], row["start_ns"], row["end_ns"], row["kernels"]) == ("gpu_annotation", 200_000, 1_350_000, 11)
    assert st.step_of([1_320_000]).tolist() == [0]
    assert any("widened" in w for w in st.warnings)


def test_under_recorded_replay_is_flagged_not_called_idle(tmp_path):
    evs = []
    for i in range(3):
        t0 = 10_000.0 * i
        evs += [
            cpu_ann("step[DECODE bs=8]", t0, 100.0),
            launch("cudaLaunchKernel", t0 + 10, 100 + i),
            launch("cudaGraphLaunch", t0 + 20, 200 + i),
            kernel("prep", t0 + 200, 10.0, corr=100 + i),
        ]
        if i != 1:  # step 1's replay left no GPU events
            evs += [kernel("layer", t0 + 300, 5_000.0, corr=200 + i)]
    st = find_steps(load(tmp_path, evs))
    assert len(st.table) == 3 and not st.trustworthy
    bad = st.health[~st.health["ok"]]
    assert bad[["step", "check"]].values.tolist() == [[1, "graph_replays"]]
    assert "not real idle" in bad["detail"].iloc[0]
    res = tracekit.decompose(load(tmp_path, evs, "t2.json"))
    assert res.summary["trustworthy"] is False and any("not trustworthy" in w for w in res.warnings)


def test_user_dialect_file_is_tried_first(tmp_path):
    f = tmp_path / "mine.json"
    f.write_text(
        json.dumps(
            {
                "dialects": [
                    {
                        "name": "mine",
                        "label": "iter N",
                        "pattern": r"iter (?P<bs>\d+)",
                        "kinds": ["cpu_annotation"],
                        "phase": "decode",
                    }
                ]
            }
        )
    )
    evs = [
        cpu_ann("iter 3", 0.0, 50.0),
        launch("cudaLaunchKernel", 10.0, 1),
        kernel("k", 100.0, 100.0, corr=1),
        cpu_ann("ProfilerStep#1", 0.0, 60.0),
    ]
    t = load(tmp_path, evs)
    assert find_steps(t).match == "profiler_step"
    st = find_steps(t, step_options(steps_file=f))
    assert st.match == "mine" and st.table[["phase", "bs"]].values.tolist() == [["decode", 3]]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"dialects": [{"name": "x", "pattern": "(", "kinds": ["cpu_annotation"]}]}))
    with pytest.raises(DataFileError, match=r"bad.json: \$.dialects\[0\]"):
        find_steps(t, step_options(steps_file=bad))


def test_options_resolve_once_flags_over_annotation_over_defaults():
    from tracekit.annotation import load_annotation

    k3 = load_annotation("k3_dp16")
    assert step_options(k3) == StepOptions(name="scheduler.run_batch", min_step_ns=10_000_000, strict=False)
    assert step_options(k3, step_name="x", min_step_ns=0) == StepOptions(name="x", min_step_ns=0, strict=True)
    assert step_options() == StepOptions(strict=False)
    for bad in ({"phase": "prefil"}, {"source": "both"}, {"min_step_ns": -1}):
        with pytest.raises(UsageError):
            step_options(**bad)


def test_an_annotations_marker_absent_falls_back_to_the_dialects(tmp_path):
    from tracekit.annotation import load_annotation

    t = _mixed_sglang(tmp_path)
    st = find_steps(t, ann=load_annotation("k3_dp16"), min_step_ms=0)  # names scheduler.run_batch, absent here
    assert st.match == "sglang_step" and len(st.table) == 2
    assert "scheduler.run_batch" in st.warnings[0] and "not in the trace" in st.warnings[0]


def test_steps_are_found_once_per_trace_and_options(tmp_path, monkeypatch):
    import tracekit.analyses.steps.resolve as steps_mod

    calls = []
    real = steps_mod.scan
    monkeypatch.setattr(steps_mod, "scan", lambda tr, o: calls.append(o) or real(tr, o))
    t = _mixed_sglang(tmp_path)
    a = find_steps(t)
    assert find_steps(t) is a and find_steps(t) is a and len(calls) == 1
    find_steps(t, step_options(phase="all"))
    assert len(calls) == 2


def test_user_steps_table(tmp_path):
    import pandas as pd

    t = _mixed_sglang(tmp_path)
    mine = pd.DataFrame({"start_ns": [1_100_000, 0], "end_ns": [1_200_000, 200_000]})
    res = tracekit.decompose(t, steps=mine)
    assert res.tables["per_step"][["start_ns", "wall_ns", "busy_ns"]].values.tolist() == [
        [0, 200_000, 100_000],
        [1_100_000, 100_000, 100_000],
    ]
    assert isinstance(find_steps(t, mine), Steps)
    with pytest.raises(UsageError):
        find_steps(t, pd.DataFrame({"t": [1]}))


def test_compute_is_exported_for_the_count():
    assert callable(scan)


def test_cpu_markers_without_any_runtime_launch_event(tmp_path):
    """Step markers and kernels with correlation ids but no cuda_runtime events (a sampled trace) once raised
    IndexError; the GPU spans are used and the CPU spans find no launch window."""
    evs = [
        cpu_ann("step[DECODE bs=4]", 0.0, 100.0, ext=3),
        gpu_ann("step[DECODE bs=4]", 10.0, 200.0, ext=3),
        kernel("k", 20.0, 100.0, corr=5),
    ]
    st = find_steps(load(tmp_path, evs))
    assert st.table[["source", "start_ns", "end_ns"]].values.tolist() == [["gpu_annotation", 10_000, 210_000]]
