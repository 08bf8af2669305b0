"""Findings with an annotation that has no op_shapes (issue 29's shapes, the `report -a qwen3_dense_sglang_rocm`
KeyError 'per_tag'): roofline() then answers from the recorded shapes, per kernel, and the annotation-based roofline
source must say it has nothing to do instead of reading a per-tag table that is not there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import tracekit
from tracekit.analyses.findings.trace_findings import findings
from tracekit.annotation.spec import parse_annotation

from conftest import gemm_trace

ROOT = Path(__file__).resolve().parents[3]
QWEN3 = "tracelens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"


def test_an_annotation_without_op_shapes_leaves_the_roofline_to_the_recorded_shapes(tmp_path):
    t = gemm_trace(tmp_path)
    ann = parse_annotation(
        json.dumps(
            {"name": "no_shapes", "step": {"name": "ProfilerStep#*"}, "blocks": {"boundary": ["gemm_kernel"]}}
        ).encode(),
        "no_shapes.json",
    )
    assert not ann.op_shapes and not ann.op_traffic
    res = findings(t, ann, hw="h100", min_ms=0)
    src = res.tables["sources"].set_index("source")
    assert not bool(src.loc["roofline", "ran"]) and "op_shapes" in src.loc["roofline", "reason"]
    assert bool(src.loc["shapes", "ran"])  # the recorded shapes still reach the findings


def test_report_of_the_corpus_qwen3_rocm_trace_with_its_annotation():
    corpora = [ROOT.parent / "shared" / "corpus"] + [
        Path(p) for p in os.environ.get("TRACEKIT_CORPUS", "").split(":") if p
    ]
    path = next((c / QWEN3 for c in corpora if (c / QWEN3).is_file()), None)
    if path is None:
        pytest.skip(f"{QWEN3} is in none of the corpora")
    t = tracekit.load(path, cache=False)
    res = findings(t, "qwen3_dense_sglang_rocm")
    src = res.tables["sources"].set_index("source")
    assert not bool(src.loc["roofline", "ran"]) and "op_shapes" in src.loc["roofline", "reason"]
    rep = tracekit.report(t, "qwen3_dense_sglang_rocm")
    assert len(rep.tables["findings"]) > 0
