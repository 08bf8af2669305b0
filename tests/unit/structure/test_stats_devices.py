"""`stats` on a trace of two GPUs follows the one rule of `kernels`, `temporal` and `report`
(steps.finder.one_device): refused with ``--device N`` named (exit 4), never pooled; on one device, that GPU's
events alone (issue 39's closing note: "`stats` still pools devices")."""

from __future__ import annotations

import pytest

import tracekit
from tracekit.analyses.steps.finder import one_device
from tracekit.errors import MissingDataError
from tests.conftest import CORPUS, kernel, load_events

TWO_GPU = CORPUS / "nsys-ai" / "tests" / "fixtures" / "mfu_2gpu_before.sqlite"


def _two_gpus(tmp_path):
    # the same kernel name on both GPUs at once: pooled, 2 calls and 160 µs, and each "overlaps" the other GPU's
    return load_events(tmp_path, [kernel("a_kernel", 0, 100, device=0), kernel("a_kernel", 0, 60, device=1)])


def test_two_devices_refused_with_the_one_rule(tmp_path):
    trace = _two_gpus(tmp_path)
    with pytest.raises(MissingDataError) as rule:
        one_device(trace)
    with pytest.raises(MissingDataError) as got:
        tracekit.kernel_selection_stats(trace)
    assert str(got.value) == str(rule.value)
    assert "2 devices (0, 1)" in str(got.value) and "--device N" in str(got.value)


def test_one_device_counts_its_own_events(tmp_path):
    r = tracekit.kernel_selection_stats(_two_gpus(tmp_path).on_device(1), overlap_with="kind:kernel")
    assert r.summary["events"] == 1 and r.summary["total_ns"] == 60_000
    assert r.tables["stats"]["count"].tolist() == [1]


@pytest.mark.slow
def test_cli_exit_4_names_device(tmp_path, cli):
    _two_gpus(tmp_path)
    code, out, err = cli("stats", tmp_path / "t.json")
    assert code == 4 and "--device N" in err and out == "" and "Traceback" not in err
    code, out, _ = cli("--device", "0", "stats", tmp_path / "t.json", "-f", "json")
    assert code == 0 and '"total_ns": 100000' in out


@pytest.mark.slow
@pytest.mark.skipif(not TWO_GPU.exists(), reason="the nsys-ai 2-GPU export is not in ../shared/corpus")
def test_real_two_gpu_nsys_export(cli):
    code, _, err = cli("stats", TWO_GPU)
    assert code == 4 and "2 devices (0, 1)" in err
    trace = tracekit.load(TWO_GPU)
    per_device = [tracekit.kernel_selection_stats(trace.on_device(d)).summary["events"] for d in (0, 1)]
    assert sum(per_device) == int((trace.events["kind"] == "kernel").sum()) and min(per_device) > 0
