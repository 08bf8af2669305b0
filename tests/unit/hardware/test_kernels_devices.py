"""`kernels` and `temporal` on a trace of two GPUs follow the one rule `report` follows (steps.finder.one_device):
refused with ``--device N`` named, and on one device the shares are of that GPU's busy time (issue 42 review)."""

from __future__ import annotations

import pytest

import tracekit
from tracekit.analyses.steps.finder import one_device
from tracekit.errors import MissingDataError
from tests.conftest import CORPUS, kernel, load_events

TWO_GPU = CORPUS / "nsys-ai" / "tests" / "fixtures" / "mfu_2gpu_after.sqlite"


def _two_gpus(tmp_path):
    # GPU 0: a 100 µs kernel; GPU 1: the same window, 60 µs; pooled, the 160 µs of kernels over 100 µs of "busy"
    return load_events(tmp_path, [kernel("a_kernel", 0, 100, device=0), kernel("b_kernel", 0, 60, device=1)])


@pytest.mark.parametrize("command", ["kernel_stats", "temporal"])
def test_two_devices_refused_like_report(tmp_path, command):
    trace = _two_gpus(tmp_path)
    with pytest.raises(MissingDataError) as rule:
        one_device(trace)
    with pytest.raises(MissingDataError) as got:
        getattr(tracekit, command)(trace)
    assert str(got.value) == str(rule.value)
    assert "2 devices (0, 1)" in str(got.value) and "--device N" in str(got.value)


def test_one_device_shares_are_of_its_own_busy(tmp_path):
    r = tracekit.kernel_stats(_two_gpus(tmp_path).on_device(1))
    assert r.summary["gpu_busy_ns"] == 60_000 and r.summary["matched_total_ns"] == 60_000
    assert r.tables["kernels"]["share_of_busy_pct"].tolist() == [100.0]


@pytest.mark.slow
def test_cli_exit_4_names_device(tmp_path, cli):
    _two_gpus(tmp_path)
    code, out, err = cli("kernels", tmp_path / "t.json")
    assert code == 4 and "--device N" in err and out == ""
    code, out, _ = cli("--device", "0", "kernels", tmp_path / "t.json")
    assert code == 0 and "a_kernel" in out and "b_kernel" not in out


@pytest.mark.slow
@pytest.mark.skipif(not TWO_GPU.exists(), reason="the nsys-ai 2-GPU export is not in ../shared/corpus")
def test_real_two_gpu_nsys_export(cli):
    code, _, err = cli("kernels", TWO_GPU)
    assert code == 4 and "2 devices (0, 1)" in err
    trace = tracekit.load(TWO_GPU)
    for dev in (0, 1):
        r = tracekit.kernel_stats(trace.on_device(dev))
        s = r.summary
        assert s["matched_total_ns"] <= s["gpu_busy_ns"]  # one GPU: its kernels are inside its busy time
        assert r.tables["kernels"]["share_of_busy_pct"].sum() <= 100.0 + 1e-9
