"""The Qwen3 annotation on its targets (issue 39): the real sglang Qwen3-8B decode trace (TraceLens, MI300X, read in
place from ../shared/corpus) and a prefill+decode trace made from it: the same trace with an extend step in front,
whose attention is CK's FMHA batch prefill (no ll4mi paged attention, no reduce kernel), marked as sglang marks an
extend step. Judged on the decode steps (the default phase) and on every step (phase all), the annotation fits with
no warning; no K3 annotation fits either. Skipped where the corpus is absent."""

from __future__ import annotations

import copy
import gzip
import json

import pytest

import tracekit
from tests.conftest import CORPUS
from tracekit.analyses.steps.model import StepOptions
from tracekit.analyses.structure.fit import annotation_fit, fits_above

pytestmark = pytest.mark.slow

QWEN3 = CORPUS / "tracelens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
PREFILL_ATTN = (
    "void ck_tile::kentry<256, 1, ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<ck_tile::"
    "BlockFmhaBatchPrefillPipelineQRKSVSAsync<ck_tile::BlockFmhaBatchPrefillPipelineProblem<__hip_bfloat16,"
    " __hip_bfloat16, __hip_bfloat16, float, float, __hip_bfloat16, float, __hip_bfloat16> >,"
    " ck_tile::Default2DEpilogue<ck_tile::Default2DEpilogueProblem<float, __hip_bfloat16, true, true> > > >"
    "(ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<>::Kargs)"
)
GPU_AND_LAUNCH = ("kernel", "cuda_runtime", "gpu_memcpy", "user_annotation", "cpu_op")


def _decode():
    if not QWEN3.is_file():
        pytest.skip(f"the sglang Qwen3-8B decode trace is not in the ../shared corpus ({QWEN3})")
    return QWEN3


def _prefill_decode(tmp_path):
    """The decode trace with an extend step in front: its GPU work and launches again, earlier, under
    ``step[EXTEND bs=4]``, with prefill attention in place of the paged decode attention and its reduce."""
    doc = json.loads(gzip.open(_decode()).read())
    events = doc["traceEvents"]
    ts = [e["ts"] for e in events if "ts" in e]
    shift = max(ts) - min(ts) + 2000.0
    front = []
    for e in events:
        name = str(e.get("name"))
        if e.get("cat") not in GPU_AND_LAUNCH or "paged_attention_ll4mi_reduce" in name:
            continue
        c = copy.deepcopy(e)
        c["ts"] = e["ts"] - shift
        if name.startswith("step[DECODE"):
            c["name"] = "step[EXTEND bs=4]"
        elif "paged_attention_ll4mi_QKV" in name:
            c["name"] = PREFILL_ATTN
        for k in ("External id", "correlation"):  # its own launches: correlations of its own
            if k in c.get("args", {}):
                c["args"][k] += 10_000_000
        front.append(c)
    doc["traceEvents"] = front + events
    path = tmp_path / "sglang_Qwen3-8B_prefill_decode.json"
    path.write_text(json.dumps(doc))
    return path


def _check(res, steps: int):
    table = res.tables["annotations"].set_index("name")
    row = table.loc["qwen3_dense_sglang_rocm"]
    assert res.summary["best"] == "qwen3_dense_sglang_rocm" and res.warnings == []
    assert row["score"] > fits_above() and row["reason"] in ("", None) and row["expect"] == 1.0
    assert row["steps"] == steps
    assert not table.loc[["k3_dp16", "k3_dp2_dcp8"], "fits"].any()


def test_the_qwen3_annotation_fits_the_decode_trace_it_names():
    _check(annotation_fit(tracekit.load(_decode(), cache=False)), 1)


def test_the_qwen3_annotation_fits_a_prefill_and_decode_trace(tmp_path):
    trace = tracekit.load(_prefill_decode(tmp_path), cache=False)
    phases = annotation_fit(trace, steps=StepOptions(phase="all"))
    _check(phases, 2)  # the extend step judged too: its attention blocks are attention
    _check(annotation_fit(trace), 1)  # the default: the decode step, the phase left out said by `tracekit steps`
