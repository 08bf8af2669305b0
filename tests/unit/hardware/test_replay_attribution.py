"""Attribution of graph-replayed kernels to the ops of a capture trace (tracekit/analyses/hardware/replay_attribution.py,
issue 38), on hand-built replay + capture pairs whose answer is known by construction."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tracekit
from tracekit.analyses.hardware.kernel_ops import kernel_ops
from tracekit.analyses.hardware.replay_attribution import use_replay_sources
from tracekit.analyses.hardware.shapes import kernel_shapes
from tracekit.errors import InputError, MissingDataError

from conftest import kernel, write_trace

M, N, K = 4, 128, 64


def _op(name, ts, dur, dims, types):
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": dur,
        "args": {"Input Dims": dims, "Input type": types},
    }


def _rt(name, ts, corr, **args):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": 1.0,
            "args": {"correlation": corr, **args}}  # fmt: skip


def capture_events(grid=2) -> list:
    """One captured graph: aten::mm launches gemm_k, aten::relu launches relu_k (and a launch outside the capture)."""
    return [
        _rt("cudaLaunchKernel", 1, 1, kernel="warmup_k", grid=[1, 1, 1], block=[64, 1, 1]),
        _rt("cudaStreamBeginCapture", 5, 2),
        _op("aten::mm", 10, 10, [[M, K], [K, N]], ["float", "float"]),
        _rt("cudaLaunchKernel", 12, 3, kernel="gemm_k", grid=[grid, 1, 1], block=[128, 1, 1]),
        _op("aten::relu", 30, 5, [[M, N]], ["float"]),
        _rt("cudaLaunchKernel", 31, 4, kernel="relu_k", grid=[grid, 1, 1], block=[128, 1, 1]),
        _rt("cudaStreamEndCapture", 40, 5),
    ]


def replay_events(steps=2, names=("gemm_k", "relu_k"), marker=None, grid=None) -> list:
    ev = []
    for s in range(steps):
        t0 = 100 + 100 * s
        if marker:
            ev.append({"ph": "X", "cat": "user_annotation", "name": marker, "pid": 100, "tid": 100, "ts": t0 - 1,
                       "dur": 90})  # fmt: skip
        ev.append(_rt("cudaGraphLaunch", t0, 900 + s))
        for i, n in enumerate(names):
            extra = {"grid": [grid, 1, 1]} if grid else {}
            ev.append(kernel(n, t0 + 1 + 25 * i, 20 if n == "gemm_k" else 5, corr=900 + s, **extra))
    return ev


def write_pair(d: Path, replay=None, captures=((4, None),)) -> Path:
    """A replay trace at ``d/replay.json`` and ``capture_traces/`` beside it: one capture per (batch size, grid)."""
    cap = d / "capture_traces"
    cap.mkdir(parents=True, exist_ok=True)
    det = []
    for bs, grid in captures:
        write_trace(cap / f"cap_bs{bs}.json", capture_events(grid or 2))
        det.append({"file": f"cap_bs{bs}.json", "batch_size": bs, "mode": "FULL"})
    (cap / "execution_details.json").write_text(json.dumps(det))
    return write_trace(d / "replay.json", replay if replay is not None else replay_events())


def _load(p):
    return tracekit.load(p, cache=False)


def test_every_replayed_kernel_gets_its_captured_op_and_shapes(tmp_path):
    t = _load(write_pair(tmp_path))
    ko = kernel_ops(t)
    r = ko.replay
    assert r.pos.size == 4 and r.attributed.all()
    assert list(r.by) == ["capture"] * 4
    cev = r.captures[0].trace.events
    assert cev["name"].astype(str).to_numpy()[r.op_row].tolist() == ["aten::mm", "aten::relu"] * 2
    tbl = kernel_shapes(t).table
    gemm = tbl[tbl["op"] == "aten::mm"]
    assert gemm["flops"].tolist() == [2.0 * M * N * K] * 2  # each replay's GEMM carries its own call
    assert (gemm[["m", "n", "k"]].to_numpy() == [M, N, K]).all()
    assert set(tbl["attributed_by"]) == {"capture"}


def test_a_dropped_kernel_still_aligns_and_is_named(tmp_path):
    ev = [e for e in replay_events(steps=2) if not (e["name"] == "relu_k" and e["args"]["correlation"] == 901)]
    t = _load(write_pair(tmp_path, ev))
    r = kernel_ops(t).replay
    assert r.attributed.all() and r.pos.size == 3
    assert np.nanmin(r.score) == 1.0  # the replay's kernels all align; the capture's extra launch is skipped


def test_a_weak_alignment_is_refused_with_a_sentence(tmp_path):
    names = ("gemm_k", "other_a", "other_b", "other_c")
    t = _load(write_pair(tmp_path, replay_events(steps=1, names=names)))
    r = kernel_ops(t).replay
    assert not r.attributed.any()
    assert "aligns only 25 %" in r.why[0]


def test_the_wrong_batch_size_is_never_used(tmp_path):
    t = _load(write_pair(tmp_path, replay_events(marker="execute_8_decode")))
    r = kernel_ops(t).replay
    assert not r.attributed.any()
    assert r.why[0] == "no capture of batch size 8 (captures: 4)"
    res = tracekit.replay_summary(t)
    assert res.summary["attributed_kernels"] == 0 and res.summary["replays_refused"] == 2


def test_equal_captures_of_two_batch_sizes_are_refused_unless_grids_or_the_marker_decide(tmp_path):
    pair = ((4, 2), (8, 3))
    t = _load(write_pair(tmp_path / "a", captures=pair))
    assert "align equally" in kernel_ops(t).replay.why[0]
    t = _load(write_pair(tmp_path / "b", replay_events(grid=3), captures=pair))
    r = kernel_ops(t).replay
    assert r.attributed.all() and {r.captures[c].ref.batch_size for c in r.capture} == {8}
    t = _load(write_pair(tmp_path / "c", replay_events(marker="execute_4_x"), captures=pair))
    r = kernel_ops(t).replay
    assert r.attributed.all() and {r.captures[c].ref.batch_size for c in r.capture} == {4}


def test_without_captures_the_sentence_says_what_to_record(tmp_path):
    t = _load(write_trace(tmp_path / "replay.json", replay_events()))
    ks = kernel_shapes(t)
    assert any("--enable-profile-cuda-graph" in w and "capture_torch_profiler" in w for w in ks.warnings)
    with pytest.raises(MissingDataError, match="SGLANG_GRAPH_BATCH_CAPTURE=1"):
        tracekit.replay_summary(t)


def test_capture_given_by_path_and_a_missing_eager_map_refused(tmp_path):
    write_pair(tmp_path / "elsewhere")
    t = _load(write_trace(tmp_path / "replay.json", replay_events()))
    res = tracekit.replay_summary(t, capture=[tmp_path / "elsewhere" / "capture_traces"])
    s = res.summary
    assert s["attributed_kernels"] == 4 and s["attributed_pct"] == 100.0 and s["by_source"]["capture"] == 4
    assert res.tables["captures"]["batch_size"].tolist() == [4]
    assert set(res.tables["by_op"]["op"]) == {"aten::mm", "aten::relu"}
    with pytest.raises(InputError, match="--eager-map .*eager.json: no such file"):
        use_replay_sources(t, eager_map=tmp_path / "eager.json")


# ------------------------------------------------------------------------------------------------ the alignment


def test_align_tolerates_lost_and_swapped_launches_and_keeps_identical_layers_apart():
    from tracekit.analyses.hardware.replay_attribution import align

    replay = np.array([0, 1, 2, 3, 4, 5, 6, 2, 7, 8, 9, 2, 7, 2, 3, 4, 5, 6, 2, 7, 8, 9, 2, 7, 8])
    lost = np.delete(replay, [3, 18, 21])  # the capture lost three launch records
    to = align(replay, lost)
    assert to.tolist() == [0, 1, 2, -1, *range(3, 17), -1, 17, 18, -1, 19, 20, 21]
    swapped = np.array([2, 4, 6, 5, 2, 4, 5])  # two launches recorded out of order
    assert align(np.array([2, 4, 5, 6, 2, 4, 5]), swapped).tolist() == [0, 1, 3, 2, 4, 5, 6]
    assert align(np.array([7, 7]), np.array([8, 9])).tolist() == [-1, -1]


REAL_STEP = "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk5"  # vllm_decode_full's step annotation


def test_batch_patterns_read_the_real_and_the_generated_names():
    from tracekit.analyses.hardware.replay_attribution import batch_size_of, replay_rules

    rules = replay_rules()
    assert batch_size_of(REAL_STEP, rules.replay_batch) == 32
    assert batch_size_of("execute_context_0(0)_generation_16(16)", rules.replay_batch) == 16
    assert batch_size_of("execute_context_3(40)_generation_16(16)", rules.replay_batch) == -1  # mixed: not a bs
    assert batch_size_of("capture_32_FULL", rules.capture_batch) == 32
    assert batch_size_of("capture_8_PIECEWISE", rules.capture_batch) == 8
    assert 0 < rules.min_score <= 1 and 0 < rules.grid_agree <= 1


@pytest.mark.slow
def test_batch_patterns_match_the_corpus_vllm_pair():
    import gzip

    from tracekit.analyses.hardware.replay_attribution import batch_size_of, replay_rules

    pair = Path(__file__).resolve().parents[3] / ".." / "shared" / "corpus" / "tracelens/tests/traces/inference"
    pair = pair / "vllm_decode_full"
    if not pair.is_dir():
        pytest.skip(f"the real corpus is absent ({pair})")
    rules = replay_rules()
    cap = next((pair / "capture_traces").glob("*.pt.trace.json.gz"))
    names = {e.get("name", "") for e in json.loads(gzip.decompress(cap.read_bytes()))["traceEvents"]
             if e.get("cat") == "user_annotation"}  # fmt: skip
    assert {batch_size_of(n, rules.capture_batch) for n in names} - {-1} == {32}
