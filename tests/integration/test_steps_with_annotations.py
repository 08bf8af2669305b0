"""Steps with an annotation are the steps without one (issue 25): every shipped annotation on every synthetic
deployment and marker style gives the step windows found without it, to the ns (less the ones its documented
``step.min_ms`` floor removes); and the study's DP16 and DP2×DCP8 deployments, with the empty run_batch markers
sglang leaves between steps launching a kernel or two while the GPU still runs the previous step, give the
truth's steps and median wall with ``-a``."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import tracekit
from tracekit.analyses import find_steps
from tracekit.analyses.steps.resolve import step_options
from tracekit.annotation import as_annotation
from tracekit.errors import MissingDataError

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures.synth import STEP_MARKERS, build, write_trace  # noqa: E402

ANNOTATIONS = ("k3_dp16", "k3_dp2_dcp8", "deepseek_v3", "qwen3_dense_sglang_rocm", "decode_sample")
PRESETS = ("dp16", "dp2dcp8", "dsv3")

pytestmark = pytest.mark.slow


def _windows(st) -> list:
    return st.table[["start_ns", "end_ns"]].values.tolist()


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("steps_ann")


@pytest.mark.parametrize("preset", PRESETS)
def test_every_annotation_gives_the_steps_found_without_it(preset, tmp_dir):
    for style in STEP_MARKERS:
        trace, _ = build(preset, 4, steps=3, step_marker=style)
        t = tracekit.load(write_trace(tmp_dir / f"{preset}_{style}.trace.json.gz", trace), cache=False)
        plain = find_steps(t)
        for name in ANNOTATIONS:
            spec = as_annotation(name).step
            floor = int(round(spec.min_ms * 1e6)) if spec else 0
            expect = [w for w in _windows(plain) if w[1] - w[0] > floor]
            try:
                got = _windows(find_steps(t, step_options(name)))
            except MissingDataError:
                got = []
            if not expect:  # the floor removes every step: the annotation finds none of its own
                assert all(w[1] - w[0] > floor for w in got) or got == [
                    [plain.table.start_ns.min(), plain.table.end_ns.max()]
                ]
                continue
            assert got == expect, (preset, style, name)


def _with_busy_empty_markers(path: Path, out: Path) -> None:
    """The empty CPU run_batch between steps, moved to 45 ms before the previous step ends on the GPU (the CPU
    runs ahead), launching two 3 µs kernels: one on a side stream at once, one queued behind the step."""
    doc = json.load(gzip.open(path, "rt"))
    ev = doc["traceEvents"]
    cpu = sorted(
        (e for e in ev if e.get("name") == "scheduler.run_batch" and e.get("cat") == "user_annotation"),
        key=lambda e: float(e["ts"]),
    )
    gpu = {
        e["args"]["External id"]: e
        for e in ev
        if e.get("name") == "scheduler.run_batch" and e.get("cat") == "gpu_user_annotation"
    }
    real = [gpu[c["args"]["External id"]] for c in cpu if c["dur"] > 1000]
    corr, new, moved = 10**7, [], set()
    for c in cpu:
        if c["dur"] > 1000:
            continue
        prev = [g for g in real if float(g["ts"]) < float(c["ts"])][-1]
        end = float(prev["ts"]) + float(prev["dur"])
        c["ts"] = end - 45_000.0
        moved.add(c["args"]["External id"])
        for k, (ts, stream) in enumerate([(end - 44_000.0, 99), (end + 10.0, 7)]):
            corr += 1
            new.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": c["pid"],
                    "tid": c["tid"],
                    "ts": c["ts"] + 2 + 3 * k,
                    "dur": 2,
                    "args": {"correlation": corr},
                }
            )
            new.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "fill_kernel",
                    "pid": 0,
                    "tid": stream,
                    "ts": ts,
                    "dur": 3,
                    "args": {"correlation": corr, "device": 0, "stream": stream},
                }
            )
    ev[:] = [
        e for e in ev if not (e.get("cat") == "gpu_user_annotation" and e["args"].get("External id") in moved)
    ] + new
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)


@pytest.mark.parametrize("fixture,ann", [("dp16_bs4", "k3_dp16"), ("dp2dcp8_bs64", "k3_dp2_dcp8")])
def test_study_deployments_with_their_annotation_give_the_truth(fixture, ann, tmp_dir):
    src = REPO / "fixtures" / "synthetic" / f"{fixture}.trace.json.gz"
    truth = json.loads((REPO / "fixtures" / "synthetic" / f"{fixture}.truth.json").read_text())
    out = tmp_dir / f"{fixture}_busy_empty.trace.json.gz"
    _with_busy_empty_markers(src, out)
    t = tracekit.load(out, cache=False)
    want = [[s["start_ns"], s["end_ns"]] for s in truth["steps"]]
    wall = float(np.median([s["wall_ns"] for s in truth["steps"]]))
    for opts in (step_options(ann), step_options(), step_options(ann, min_step_ns=10_000_000)):
        st = find_steps(t, opts)
        assert _windows(st) == want and float(np.median(st.table["dur_ns"])) == wall and st.trustworthy
    res = tracekit.decompose(t, steps=step_options(ann))  # `tracekit wall`
    assert res.summary["steps"] == len(want) and res.summary["median_wall_ns"] == wall


@pytest.mark.parametrize("fixture,ann", [("dp16_bs4", "k3_dp16"), ("dp2dcp8_bs64", "k3_dp2_dcp8")])
def test_study_annotation_fits_the_study_trace_with_busy_empty_markers(fixture, ann, tmp_dir):
    out = tmp_dir / f"{fixture}_fit.trace.json.gz"
    _with_busy_empty_markers(REPO / "fixtures" / "synthetic" / f"{fixture}.trace.json.gz", out)
    res = tracekit.annotation_fit(tracekit.load(out, cache=False))
    assert res.summary["best"] == ann and res.summary["best_score"] >= res.summary["fits_above"]
