"""roofline, findings and report at 80 columns on the real decode traces (issue 38): the vLLM FULL-graph pair with
its capture_traces/ beside it (found automatically) answers at op level; the sglang decode trace, which has no
capture, says in one sentence what to record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.ingest.captures import RECORD_HINT
from tracekit.render.terminal import to_text

INF = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "tracelens" / "tests" / "traces" / "inference"
INF = INF if INF.is_dir() else Path("/work/shared/corpus/tracelens/tests/traces/inference")
VLLM = INF / "vllm_decode_full" / "graph_execution.json.gz"
SGLANG = INF / "sglang_decode" / "sglang_Qwen3-8B_decode.json.gz"
pytestmark = pytest.mark.slow


def _text(res) -> str:
    """What the CLI prints at COLUMNS=80, then the warnings."""
    out = to_text(res, width=80)
    assert max(len(line) for line in out.splitlines()) <= 80
    return out + "\n".join(res.warnings)


def _cli_report(path) -> str:
    """``tracekit report PATH`` as printed at COLUMNS=80 (its one screen), every line within 80 cells."""
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run([str(Path(sys.executable).parent / "tracekit"), "report", str(path)], capture_output=True, text=True,
                         env=env, check=True).stdout  # fmt: skip
    assert max(len(line) for line in out.splitlines()) <= 80
    return out


@pytest.mark.skipif(not VLLM.is_file(), reason="the tracelens corpus (vllm_decode_full) is absent")
def test_vllm_pair_answers_at_op_level():
    t = tracekit.load(VLLM, cache=False)
    roof = tracekit.roofline(t)
    # the shaped share rose from 14.3 % with the aiter norms and Inductor pointwise kernels modelled; the fused MoE
    # and paged attention (74 %) are named as unknown, never priced at 0
    assert roof.summary["shaped_pct"] > 20.0
    assert roof.summary["unknown_work_pct"] == pytest.approx(74.0, abs=0.5)
    text = _text(roof)
    assert "moe_forward" in text and "FLOPs and bytes are unknown for vllm::moe_forward" in text
    fnd = tracekit.findings(t)
    titles = fnd.tables["findings"]["title"].tolist()
    assert any(x.startswith("`aten::addmm` in `GraphModule_0` runs at") for x in titles), titles
    assert "vllm::moe_forward" in _text(fnd)  # the dominant-GEMM finding names the op whose work is unknown
    rep = tracekit.report(t)
    assert rep.summary["capture_traces"] == 1
    assert rep.summary["shapes"].startswith("for 95.") and "from 1 capture trace" in rep.summary["shapes"]
    assert "from 1 capture trace" in " ".join(_cli_report(VLLM).split())


@pytest.mark.skipif(not SGLANG.is_file(), reason="the tracelens corpus (sglang_decode) is absent")
def test_sglang_without_captures_says_what_to_record():
    t = tracekit.load(SGLANG, cache=False)
    roof = tracekit.roofline(t)
    assert sum(RECORD_HINT in w for w in roof.warnings) == 1
    rep = tracekit.report(t)
    assert rep.summary["shapes"].endswith(RECORD_HINT)
    assert RECORD_HINT.split(":")[0] in " ".join(_cli_report(SGLANG).split())
    fnd = tracekit.findings(t)
    assert any(RECORD_HINT in str(h) for h in fnd.tables["findings"]["how"])
