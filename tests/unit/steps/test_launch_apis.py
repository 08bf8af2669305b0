"""One list of launch APIs (tracekit/data/launch_apis.json, issue 39) for launch health, kernel linking and graph
attribution: HIP and CUDA runtime and driver launches are launches (hipExtModuleLaunchKernel was not, so the GEMMs
hipBLASLt and Tensile launch with it went unchecked); the list holds every launch name the corpus's traces carry."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.analyses import find_steps
from tracekit.analyses.hardware.linking import launching_ops
from tracekit.analyses.hardware.replay_attribution import graph_kernels
from tracekit.analyses.steps.model import step_rules
from tracekit.launch_apis import is_graph_launch, is_kernel_launch, is_launch, launch_apis, launch_mask
from tests.conftest import CORPUS, cpu_ann, kernel, launch, load_events

KERNEL = [
    "hipExtModuleLaunchKernel",
    "hipModuleLaunchKernel",
    "hipLaunchKernel",
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "cudaLaunchKernel_ptsz",
]
GRAPH = ["hipGraphLaunch", "cudaGraphLaunch", "cuGraphLaunch"]
NOT = ["cudaLaunchHostFunc", "hipStreamSynchronize", "cudaGraphInstantiate", "cudaMemsetAsync", "hipLaunchKernelX"]


def test_the_named_apis_are_launches_and_others_are_not():
    assert all(is_kernel_launch(n) and is_launch(n) and not is_graph_launch(n) for n in KERNEL)
    assert all(is_graph_launch(n) and is_launch(n) and not is_kernel_launch(n) for n in GRAPH)
    assert not any(is_launch(n) for n in NOT)
    rules = step_rules()  # launch health reads the same list
    assert all(rules.gpu_launch.match(n) for n in KERNEL + ["hipMemcpyAsync", "cudaMemcpyAsync"])
    assert not any(rules.gpu_launch.match(n) for n in GRAPH + NOT)
    assert all(rules.graph_launch.search(n) for n in GRAPH)
    steps_doc = json.loads(resources.files("tracekit.data").joinpath("steps.json").read_text(encoding="utf-8"))
    assert "gpu_launch" not in steps_doc and "graph_launch" not in steps_doc  # one list, not two
    assert set(KERNEL[:-1]) <= set(launch_apis()["kernel"])


@pytest.mark.slow
def test_health_checks_hip_ext_module_launches(tmp_path):
    # a Tensile GEMM launched by hipExtModuleLaunchKernel whose kernel left no GPU record, beside one that did and a
    # hipLaunchKernel: 3 kernel launches checked, 1 unrecorded (before issue 39: 1 launch checked, none missing)
    ev = [
        cpu_ann("ProfilerStep#0", 0.0, 1_000.0),
        launch("hipExtModuleLaunchKernel", 10.0, 1),
        kernel("Cijk_gemm", 20.0, 50.0, corr=1),
        launch("hipExtModuleLaunchKernel", 11.0, 2),
        launch("hipLaunchKernel", 12.0, 3),
        kernel("reduce", 80.0, 5.0, corr=3),
    ]
    st = find_steps(load_events(tmp_path, ev))
    h = st.health
    (detail,) = h.loc[(h["step"] == -1) & (h["check"] == "launches_recorded"), "detail"]
    assert detail.startswith("1 of 3 kernel/copy launches")


def test_linking_and_graph_attribution_read_the_list(tmp_path):
    ev = [
        launch("hipExtModuleLaunchKernel", 10.0, 1),
        kernel("Cijk_gemm", 20.0, 50.0, corr=1),
        launch("hipGraphLaunch", 100.0, 2),
        kernel("replayed", 110.0, 5.0, corr=2),
        launch("hipStreamSynchronize", 200.0, 3),  # not a launch: a kernel with its id is linked to nothing
        kernel("orphan", 210.0, 5.0, corr=3),
    ]
    t = load_events(tmp_path, ev)
    krow, lrow, _ = launching_ops(t)
    names = t.events["name"].astype(str).to_numpy()
    got = {names[k]: (names[r] if r >= 0 else None) for k, r in zip(krow, lrow)}
    assert got == {"Cijk_gemm": "hipExtModuleLaunchKernel", "replayed": "hipGraphLaunch", "orphan": None}
    replayed = graph_kernels(t.events, lrow)
    assert [names[k] for k in krow[replayed]] == ["replayed"]
    m = launch_mask(pd.Series(["hipGraphLaunch", "hipMemcpyAsync", None, "hipStreamSynchronize"], dtype="category"))
    assert m.tolist() == [True, True, False, False]


def _corpus_traces():
    return sorted(p for p in CORPUS.rglob("*.json.gz") if "rocprof" not in p.parts) if CORPUS.is_dir() else []


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"{CORPUS} is absent (the real traces of ../shared/corpus)")
def test_every_launch_name_of_the_corpus_is_in_the_list():
    """Every runtime/driver record of the corpus's traces whose name says Launch is in the list, or is a call that
    launches no GPU work; every kernel's correlated runtime record is a launch of the list. Prints the names."""
    seen: dict[str, int] = {}
    linked: dict[str, int] = {}
    unlinked_before = unlinked_after = 0
    for path in _corpus_traces():
        try:
            t = tracekit.load(path, cache=False)
        except tracekit.TracekitError:
            continue
        ev = t.events
        rt = ev[ev["kind"] == "runtime"]
        for n, c in rt["name"].astype(str).value_counts().items():
            if "Launch" in n:
                seen[n] = seen.get(n, 0) + int(c)
        krow, lrow, _ = launching_ops(t)
        names = ev["name"].astype(str).to_numpy()
        for n in names[lrow[lrow >= 0]]:
            linked[n] = linked.get(n, 0) + 1
        unlinked_after += int((lrow < 0).sum())
        # a kernel with a correlated runtime record of any name: what linking found before the list
        corr = ev["correlation"].to_numpy()
        rcorr = set(corr[(ev["kind"] == "runtime").to_numpy() & (corr >= 0)].tolist())
        unlinked_before += int(sum(1 for c in corr[krow] if c not in rcorr))
    print(f"launch names in the corpus: {seen}; kernels linked per launch name: {linked}")
    no_work = {"cudaLaunchHostFunc", "hipLaunchHostFunc"}  # host callbacks: no kernel
    assert {n for n in seen if not is_launch(n)} <= no_work
    assert all(is_launch(n) for n in linked)
    for n in ("hipExtModuleLaunchKernel", "hipLaunchKernel", "cudaLaunchKernel", "cuLaunchKernelEx", "hipGraphLaunch"):
        assert n in linked, n
    assert unlinked_after == unlinked_before  # the list drops no link the corpus has


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"{CORPUS} is absent (the real traces of ../shared/corpus)")
def test_mi210_gemm_launches_are_checked_by_launch_health():
    # TraceLens's MI210 trace: 339 hipExtModuleLaunchKernel (hipBLASLt / Tensile GEMMs, MIOpen) and 223
    # hipLaunchKernel; launch health checked only the 223 before issue 39
    path = CORPUS / "tracelens" / "tests" / "traces" / "mi210" / "gpu_only_trace" / "gpu_only_trace.json.gz"
    t = tracekit.load(path, cache=False)
    names = t.events.loc[t.events["kind"] == "runtime", "name"].astype(str)
    assert int((names == "hipExtModuleLaunchKernel").sum()) == 339 and int((names == "hipLaunchKernel").sum()) == 223
    h = find_steps(t).health
    (detail,) = h.loc[(h["step"] == -1) & (h["check"] == "launches_recorded"), "detail"]
    assert detail == "every one of the 562 kernel/copy launches has a GPU record"
    assert np.isin(["hipExtModuleLaunchKernel"], names.unique()).all()
