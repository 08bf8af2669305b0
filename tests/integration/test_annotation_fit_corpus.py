"""Which shipped annotation fits the real traces of the shared corpus (../shared/corpus, read in place).

The sglang Qwen3-8B decode trace (TraceLens, MI300X) is the one the Qwen3 annotation was written against; every
other corpus trace is of a model no shipped annotation covers (CNN and BERT training and forward passes, toys, a
vLLM MoE decode, a vLLM B200 prefill), so none fits. Skipped where the corpus is absent (a user's clone)."""

from __future__ import annotations

import pytest

import tracekit
from tests.conftest import CORPUS
from tracekit.analyses.structure.fit import annotation_fit, best_fit, fits_above
from tracekit.analyses.steps.resolve import find_steps
from tracekit.errors import MissingDataError

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

CORPUS_DIRS = (CORPUS / "hta" / "tests" / "data", CORPUS / "tracelens" / "tests" / "traces")
NO_CORPUS = (
    f"the ../shared corpus is not present ({CORPUS} holds no *.json.gz under hta/tests/data or"
    " tracelens/tests/traces); these tests need the shared trace corpus next to the repository"
)
QWEN3 = "tracelens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
NO_GPU_WORK = "hta/tests/data/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"  # counters only


def _files() -> list:
    return sorted(p for d in CORPUS_DIRS if d.is_dir() for p in d.rglob("*.json.gz"))


def _params():
    files = _files()
    if not files:
        return [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason=NO_CORPUS))]
    return [pytest.param(p, id=p.relative_to(CORPUS).as_posix()) for p in files]


def _named(rel: str):
    p = CORPUS / rel
    if not p.is_file():
        pytest.skip(f"{rel} is not in the ../shared corpus ({CORPUS})" if CORPUS.is_dir() else NO_CORPUS)
    return p


def test_the_sglang_qwen3_8b_decode_trace_picks_the_qwen3_annotation():
    tr = tracekit.load(_named(QWEN3), cache=False)
    res = annotation_fit(tr)
    t = res.tables["annotations"]
    assert res.summary["best"] == "qwen3_dense_sglang_rocm" and res.summary["best_score"] > fits_above()
    top = t.iloc[0]
    assert top["marker"] == 1 and top["tags"] == 1 and top["expect"] == 1 and top["layers"] == 1
    assert top["typed"] > 0.9 and top["hardware"] == 1 and top["framework"] == 1
    assert top["body_blocks_per_step"] == 72 and top["auto_layers_per_step"] == 36
    assert t["fits"].sum() == 1  # the NVIDIA annotations do not
    assert best_fit(tr, find_steps(tr))[0] == "qwen3_dense_sglang_rocm"


@pytest.mark.parametrize("path", _params())
def test_no_annotation_fits_a_model_none_covers(path):
    rel = path.relative_to(CORPUS).as_posix()
    if rel == QWEN3:
        pytest.skip("the Qwen3 trace is covered by qwen3_dense_sglang_rocm (the test above)")
    tr = tracekit.load(path, cache=False)
    if rel == NO_GPU_WORK:
        with pytest.raises(MissingDataError, match="no GPU activity"):
            annotation_fit(tr)
        return
    res = annotation_fit(tr)
    best = res.summary["best_score"]  # null when no annotation could be scored at all (unscored is null, not 0)
    assert res.summary["best"] is None and (best is None or best < fits_above()), res.tables["annotations"]
    assert not res.tables["annotations"]["fits"].any()
    assert any("no annotation fits" in w for w in res.warnings)
    assert best_fit(tr, find_steps(tr)) is None
