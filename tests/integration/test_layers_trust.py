"""Layers you can trust or none (issue 25): the automatic layers survive kernels that repeat inside a layer, a trace
without a decoder stack says so, communication kernels and draft runs keep their types, and `suggest` says how it
was checked.

* ``eager_norm`` (fixtures/synthlib/eager.py): an HF eager decoder shaped like the MI300 Qwen1.5-0.5B trace, 24
  layers whose RMSNorm is unfused and whose bf16 multiply runs six times per layer. The truth is the generator's
  schedule (units ``L0`` ... ``L23``), independent of the finder. The old finder cut at that multiply: 72 layers of
  three types.
* ``cnn_train``: a ResNet-style training step with a dense tower; it repeats but has no attention: no decoder stack
  (exit 4), no invented layer names.
* The real traces (TraceLens Qwen1.5-0.5B on MI300 and H100, HTA trace_diff control/test and negative_queue_length
  rank 0) when the shared corpus holds them (or a directory named by TRACEKIT_CORPUS, laid out like it); skipped
  with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import tracekit
from tracekit.analyses.structure.layers import find_layers, layers
from tracekit.analyses.structure.suggest import suggest
from tracekit.errors import MissingDataError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from fixtures.synthlib import build_trace, get_preset, simulate, write_trace  # noqa: E402

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

SYN = ROOT / "fixtures" / "synthetic"
CORPORA = [ROOT.parent / "shared" / "corpus"] + [Path(p) for p in os.environ.get("TRACEKIT_CORPUS", "").split(":") if p]
MI300_QWEN = "tracelens/tests/traces/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
H100_QWEN = "tracelens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
NO_STACK = [
    "hta/tests/data/trace_diff/control/control.json.gz",
    "hta/tests/data/trace_diff/test/test.json.gz",
    "hta/tests/data/negative_queue_length_values_check/rank0.json.gz",
]


def _synthetic(tmp_path_factory, preset: str, bs: int = 1, steps: int = 2):
    sch = simulate(get_preset(preset, bs), steps=steps, seed=0)
    path = tmp_path_factory.mktemp(preset) / f"{preset}_bs{bs}.trace.json.gz"
    write_trace(path, build_trace(sch, noise=False, step_marker="run_batch"))
    return tracekit.load(path, cache=False), sch


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    return _synthetic(tmp_path_factory, "eager_norm")


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return _synthetic(tmp_path_factory, "cnn_train")


def _truth_units(sch) -> dict[int, list[tuple[str, int]]]:
    """Per step: (unit, first kernel start) of every decoder layer (unit L<i>) of the schedule."""
    first: dict[tuple[int, str], int] = {}
    for b in sch.blocks:
        if b.unit.startswith("L"):
            key = (b.step, b.unit)
            first[key] = min(first.get(key, b.start), b.start)
    out: dict[int, list] = defaultdict(list)
    for (step, unit), start in sorted(first.items(), key=lambda kv: kv[1]):
        out[step].append((unit, start))
    return out


def test_a_kernel_repeating_inside_a_layer_does_not_cut_it(eager):
    trace, sch = eager
    truth = _truth_units(sch)
    res = layers(trace)
    lay = res.tables["layers"]
    for step, units in truth.items():
        mine = lay[lay["step"] == step]
        assert len(units) == 24 and len(mine) == 24, (step, len(mine))
        assert mine["start_ns"].tolist() == [s for _, s in units]  # each layer opens with its input norm
    assert res.summary["types"] == {"attn+mlp": 24}
    check = res.summary["check"]
    assert check["agrees"] and check["transitions_per_step"] == 24 == check["layers_per_step"]
    # the boundary is the norm's first kernel (the fp32 copy), not the bf16 multiply that runs six times a layer
    assert "direct_copy_kernel_cuda" in res.summary["boundary_kernel"]


def test_suggest_on_the_eager_shape_is_verified_by_the_structure(eager):
    trace, _ = eager
    _, res = suggest(trace)
    c = res.summary["check"]
    assert c["reproduces_layers"] and c["structure_agrees"] and res.summary["verified"]
    assert c["layers_per_step"] == c["transitions_per_step"] == 24


def test_a_training_step_without_attention_has_no_decoder_stack(cnn, cli, tmp_path):
    trace, sch = cnn
    with pytest.raises(MissingDataError, match="no decoder stack") as exc:
        layers(trace)
    assert "\n" not in str(exc.value)
    res = layers(trace, missing_ok=True)
    assert res.tables["layers"].empty and res.summary["types"] == {}
    assert any("no decoder stack" in w for w in res.warnings)
    with pytest.raises(MissingDataError, match="no decoder stack"):
        suggest(trace)
    code, out, err = cli("layers", trace.path)
    assert code == 4 and "no decoder stack" in err and "draft" not in out + err and "mlp" not in out + err


def test_unverified_when_the_structure_disagrees(tmp_path):
    """Layers with no FFN kernel the categories know (a fused activation): the engine may reproduce the cut, but
    nothing independent confirms it, so verified is false and says why."""
    names = (
        ["embed_kernel_indexSelect"]
        + [
            "rms_norm_kernel",
            "nvjet_qkv_TNT",
            "flash_fwd_kernel",
            "nvjet_o_TNT",
            "rms_norm_kernel",
            "nvjet_gateup_TNT",
            "nvjet_down_TNT",
        ]
        * 6
        + ["rms_norm_kernel", "nvjet_lm_head_TNN"]
    )
    evs = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": n,
            "pid": 0,
            "tid": 7,
            "ts": 100.0 + 5 * i,
            "dur": 4.0,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
        for i, n in enumerate(names)
    ]
    evs.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "step[DECODE bs=4]",
            "pid": 0,
            "tid": 7,
            "ts": 99.0,
            "dur": 5.0 * len(names) + 2,
            "args": {},
        }
    )
    p = tmp_path / "fused.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": evs}))
    trace = tracekit.load(p, cache=False)
    res = layers(trace)
    assert res.summary["layers_per_step"] == 6 and not res.summary["check"]["agrees"]
    assert any("not confirmed by the structure" in w for w in res.warnings)
    _, sres = suggest(trace)
    assert sres.summary["check"]["reproduces_layers"] and not sres.summary["verified"]
    assert any("not verified" in w for w in sres.warnings)


NORM, QKV, ATTN, O, UP, ACT, DOWN = (
    "void flashinfer::norm::FusedAddRMSNormKernel<8u>(x)",
    "nvjet_qkv_TNT",
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<x>(p)",
    "nvjet_o_TNT",
    "nvjet_up_TNT",
    "void flashinfer::activation::act_and_mul_kernel<x>(y)",
    "nvjet_down_TNT",
)
AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def test_a_layer_ending_with_a_collective_keeps_its_type(tmp_path):
    layer = [NORM, QKV, ATTN, O, NORM, UP, ACT, DOWN]
    body = []
    for i in range(8):
        body += layer + ([AG] if i in (3, 7) else [])  # two layers end with an AllGather (the last: the logits')
    names = ["_compute_position_kernel"] + body + [NORM, "nvjet_lm_head_TNN"]
    evs = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": n,
            "pid": 0,
            "tid": 7,
            "ts": 100.0 + 5 * i,
            "dur": 4.0,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
        for i, n in enumerate(names)
    ]
    evs.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "step[DECODE bs=4]",
            "pid": 0,
            "tid": 7,
            "ts": 99.0,
            "dur": 5.0 * len(names) + 2,
            "args": {},
        }
    )
    p = tmp_path / "ag.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": evs}))
    trace = tracekit.load(p, cache=False)
    lay = find_layers(trace).layers
    assert len(lay) == 8 and set(lay["layer_type"]) == {"attn+mlp"}
    assert lay["end_ns"].iloc[3] == lay["start_ns"].iloc[4]  # the AllGather stays in the layer it ends
    _, res = suggest(trace)
    assert res.summary["verified"] and res.summary["block_types"] == ["attn+mlp"]


@pytest.fixture(scope="module")
def dp16():
    trace = tracekit.load(SYN / "dp16_bs4.trace.json.gz", cache=False)
    truth = json.loads((SYN / "dp16_bs4.truth.json").read_text())
    return trace, truth


def test_dp16_last_mla_layer_and_the_draft_layers(dp16):
    trace, truth = dp16
    lay = find_layers(trace).layers
    sch = simulate(get_preset("dp16", 4), steps=3, seed=0)
    mla_units = {b.unit for b in sch.blocks if b.type == "MLA"}
    for step in sorted(set(lay["step"])):
        mine = lay[lay["step"] == step].reset_index(drop=True)
        units = [
            u
            for u, _ in sorted(
                (
                    (b.unit, b.start)
                    for b in sch.blocks
                    if b.step == step and (b.unit.startswith("L") or b.unit.startswith("draft"))
                ),
                key=lambda x: x[1],
            )
        ]
        units = list(dict.fromkeys(units))
        assert len(units) == len(mine) == 98
        mla = [t for u, t in zip(units, mine["layer_type"]) if u in mla_units]
        assert units[92] == "L92" and "L92" in mla_units  # the last target layer is an MLA layer
        assert set(mla) == {"mla+moe"} and len(mla) == 24
        drafts = [t for u, t in zip(units, mine["layer_type"]) if u.startswith("draft")]
        assert len(drafts) == 5 and all(t.startswith("draft:") for t in drafts)
    assert {r["step"]: r["blocks"]["draft"]["blocks"] for r in truth["steps"]} == {0: 5, 1: 5, 2: 5}


def test_draft_layers_stay_draft_in_a_step_whose_target_replay_went_unrecorded(tmp_path):
    from fixtures.synth import build

    trace_doc, _ = build("dp16", 4, steps=3, seed=0, noise=False, step_marker="run_batch", under_recorded=0)
    path = tmp_path / "ur.trace.json.gz"
    write_trace(path, trace_doc)
    lay = find_layers(tracekit.load(path, cache=False)).layers
    first = lay[lay["step"] == 0]
    assert len(first) == 5 and all(t.startswith("draft:") for t in first["layer_type"])
    assert set(lay["layer_type"]) == {"kda+mlp", "kda+moe", "mla+moe", "draft:attn+mlp"}


# --------------------------------------------------------------------------------------------------
# the real traces
# --------------------------------------------------------------------------------------------------


def _real(rel: str) -> Path:
    for root in CORPORA:
        if (root / rel).is_file():
            return root / rel
    pytest.skip(
        f"{rel} is in none of {', '.join(map(str, CORPORA))} (the shared corpus, or TRACEKIT_CORPUS);"
        " this test needs that real trace"
    )


@pytest.mark.parametrize("rel", [MI300_QWEN, H100_QWEN], ids=["mi300", "h100"])
def test_qwen15_has_24_layers_per_step_on_both_gpus(rel):
    trace = tracekit.load(_real(rel), cache=False)
    res = layers(trace)
    assert res.summary["layers_per_step"] == 24 and res.summary["types"] == {"attn+mlp": 24}
    assert res.summary["check"]["agrees"] and res.summary["check"]["transitions_per_step"] == 24
    _, sres = suggest(trace)
    assert sres.summary["verified"] and sres.summary["layers_per_step"] == 24


@pytest.mark.parametrize("rel", NO_STACK, ids=["trace_diff_control", "trace_diff_test", "negative_queue_length"])
def test_hta_training_traces_have_no_decoder_stack(rel, cli):
    path = _real(rel)
    with pytest.raises(MissingDataError, match="no decoder stack"):
        layers(tracekit.load(path, cache=False))
    code, out, err = cli("layers", path)
    assert code == 4 and "no decoder stack" in err and "draft" not in err
