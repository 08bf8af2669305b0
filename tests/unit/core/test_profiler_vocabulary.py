"""One vocabulary (issue 42): a sentence that says how to record what an input lacks, or where its devices are
described, is in the words of the profiler that wrote it (tracekit/data/record_hints.json); graph launches a trace
never recorded are unknown, not absent; files are told apart by content; the refusal of a JSON of another tool names
every input tracekit reads; ``info``'s device lines agree with the file, and a hardware profile that stands in for
another model says so."""

from __future__ import annotations

import json
import re

import pytest

import tracekit
from tests.conftest import kernel, launch, write_trace
from tracekit.analyses import trace_info
from tracekit.data import _record_hints, inputs_read, record_hint
from tracekit.errors import InputError, MissingDataError
from tracekit.gpu_specs import detect_profile, devices_phrase, profile_stand_in

# words only the PyTorch profiler (Kineto) uses; emit_nvtx(record_shapes=True) is PyTorch's NVTX option, which
# nsys records, so it is allowed where it stands whole
KINETO_ONLY = re.compile(r"ProfilerActivity|deviceProperties|with_stack|torch\.profiler\.profile|Input Dims|Kineto")


def kineto_only(text: str) -> list[str]:
    """The Kineto-only terms in ``text``: KINETO_ONLY's, and record_shapes outside emit_nvtx(record_shapes=True)."""
    found = KINETO_ONLY.findall(text)
    return found + re.findall(r"record_shapes", text.replace("emit_nvtx(record_shapes=True)", ""))


def test_every_profiler_has_words_for_every_need():
    hints = _record_hints()
    needs = set(hints["kineto"])
    assert needs >= {"ops", "shapes", "launches", "gpu", "devices"}
    for name in ("nsys", "rocprofv3"):
        assert set(hints[name]) == needs, name
        for need, words in hints[name].items():
            assert words and not kineto_only(words), (name, need, words)
    assert "--hip-trace" in hints["rocprofv3"]["launches"] and "--kernel-trace" in hints["rocprofv3"]["gpu"]
    assert "--trace=cuda" in hints["nsys"]["launches"] and hints["nsys"]["devices"] == "TARGET_INFO_GPU"


def test_record_hint_and_devices_phrase_follow_the_profiler():
    meta = {"profiler": {"name": "rocprofv3"}}
    assert record_hint(meta, "launches") == "rocprofv3 --hip-trace"
    assert devices_phrase(meta) == "rocprofv3 agents"
    assert devices_phrase({"profiler": {"name": "nsys"}}) == "TARGET_INFO_GPU"
    # a trace cached before meta.profiler existed, or an unknown profiler: Kineto's words
    assert devices_phrase({}) == "deviceProperties" and record_hint({}, "gpu") == "ProfilerActivity.CUDA"
    assert record_hint({"profiler": {"name": "other"}}, "shapes") == "record_shapes=True"


def test_findings_words_use_the_profiler_of_the_trace():
    from tracekit.analyses.findings.rules import finding_rules

    kinds = finding_rules()["kinds"]
    for kind in ("idle_unattributed", "dominant_gemm_unshaped"):
        assert not kineto_only(kinds[kind]["suggestion"]), kind
        assert "{hint_" in kinds[kind]["suggestion"], kind


def test_replay_without_any_launch_call_says_graph_launches_are_unknown(tmp_path):
    """No runtime launch at all: whether a kernel came from a graph is unknown (exit 4, what records launches)."""
    path = write_trace(tmp_path / "t.json", [kernel("k", 1.0, 2.0)])
    with pytest.raises(MissingDataError) as exc:
        tracekit.replay_summary(tracekit.load(path, cache=False))
    msg = str(exc.value)
    assert "unknown" in msg and "ProfilerActivity.CPU" in msg and "no cudaGraphLaunch" not in msg


def test_replay_with_kernel_launches_only_says_none_was_replayed(tmp_path):
    path = write_trace(tmp_path / "t.json", [launch("cudaLaunchKernel", 0.5, 1), kernel("k", 1.0, 2.0, corr=1)])
    with pytest.raises(MissingDataError, match="no cudaGraphLaunch/hipGraphLaunch launched a kernel"):
        tracekit.replay_summary(tracekit.load(path, cache=False))


def test_a_json_named_pftrace_is_read_as_json(tmp_path):
    """Chosen by content: a Kineto JSON renamed .pftrace (even one that starts with a newline) is a trace."""
    doc = {"traceEvents": [kernel("k", 1.0, 2.0)]}
    for i, text in enumerate((json.dumps(doc), "\n" + json.dumps(doc, indent=1))):
        p = tmp_path / f"kineto{i}.pftrace"
        p.write_text(text)
        assert int((tracekit.load(p, cache=False).events["kind"] == "kernel").sum()) == 1


def test_a_json_of_another_tool_names_every_input_read(tmp_path):
    p = tmp_path / "other.json"
    p.write_text('{"results": [{"a": 1}], "tool": "x"}')
    with pytest.raises(InputError) as exc:
        tracekit.load(p, cache=False)
    msg = str(exc.value)
    assert inputs_read() in msg and "\n" not in msg and str(p) in msg
    for words in ("Kineto", "rocprofv3 JSON", "rocpd", "nsys export --type sqlite"):
        assert words in msg, words


def test_info_devices_unknown_when_the_file_describes_none(tmp_path):
    """GPUs used but no device record: devices are unknown (null), their names missing, and a warning says which
    record the file lacks."""
    path = write_trace(tmp_path / "t.json", [kernel("k", 1.0, 2.0, device=0), kernel("k", 1.0, 2.0, device=1)])
    res = trace_info(tracekit.load(path, cache=False))
    s = res.summary
    assert s["devices"] is None and s["gpus_used"] == 2 and s["device_names_missing"] == 2
    assert any("no deviceProperties" in w and "unknown" in w for w in res.warnings)
    assert s["hw_profile"] is None and s["hw_stand_in"] is None


def test_an_mi350x_has_its_own_profile():
    meta = {"device_properties": [{"id": 0, "name": "AMD Instinct MI350X", "numSms": 256}], "devices_used": [0]}
    hw = detect_profile(meta)
    assert hw.name == "mi350x" and hw.peak_dense_tflops["bf16"] < 2400  # 2.2 GHz, not the MI355X's 2.4
    assert profile_stand_in(meta, hw) is None


def test_a_profile_that_stands_in_says_so(tmp_path):
    """An H800 (132 SMs, 80 GiB) matches no profile's name: h100 is chosen by its SMs and memory, and info says
    that it stands in (hw_stand_in), naming the device."""
    props = [{"id": 0, "name": "NVIDIA H800", "numSms": 132, "totalGlobalMem": 80 * 2**30}]
    path = write_trace(tmp_path / "t.json", [kernel("k", 1.0, 2.0)], deviceProperties=props)
    s = trace_info(tracekit.load(path, cache=False)).summary
    assert s["hw_profile"] == "h100"
    assert "NVIDIA H800" in s["hw_stand_in"] and "h100" in s["hw_stand_in"] and "stands in" in s["hw_stand_in"]
    assert "names no device" not in detect_profile({"device_properties": props, "devices_used": [0]}).source


def test_findings_warn_when_a_profile_stands_in(tmp_path):
    props = [{"id": 0, "name": "NVIDIA H800", "numSms": 132, "totalGlobalMem": 80 * 2**30}]
    path = write_trace(tmp_path / "t.json", [kernel("k", 1.0, 2.0)], deviceProperties=props)
    res = tracekit.findings(tracekit.load(path, cache=False))
    assert res.summary["hw"] == "h100"
    assert any("NVIDIA H800" in w and "h100" in w and "stands in" in w for w in res.warnings)
