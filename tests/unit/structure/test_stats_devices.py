"""`stats` on a trace of two GPUs follows the one rule of `kernels`, `temporal` and `report`
(steps.finder.one_device): refused with ``--device N`` named (exit 4), never pooled; on one device, that GPU's
events alone (issue 39's closing note: "`stats` still pools devices")."""

from __future__ import annotations

import json
import sqlite3

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
def test_cli_refuses_then_reads_each_device(tmp_path, cli):
    """Exit 4 and the one sentence (no table, no traceback); with --device, that GPU's kernel alone."""
    path = _two_gpus(tmp_path).path
    refused = cli("stats", path)
    assert refused[0] == 4 and refused[1] == "" and "--device N" in refused[2] and "Traceback" not in refused[2]
    totals = [json.loads(cli("--device", d, "stats", path, "-f", "json")[1])["summary"]["total_ns"] for d in (0, 1)]
    assert totals == [100_000, 60_000]


@pytest.mark.slow
@pytest.mark.skipif(not TWO_GPU.exists(), reason="the nsys-ai 2-GPU export is not in ../shared/corpus")
def test_real_two_gpu_nsys_export():
    """The nsys-ai 2-GPU export: refused whole; per device, its kernels as an independent sqlite3 count gives them."""
    trace = tracekit.load(TWO_GPU)
    with pytest.raises(MissingDataError, match=r"2 devices \(0, 1\)"):
        tracekit.kernel_selection_stats(trace)
    with sqlite3.connect(f"file:{TWO_GPU}?mode=ro&immutable=1", uri=True) as db:
        want = dict(db.execute("SELECT deviceId, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY deviceId"))
    got = {d: tracekit.kernel_selection_stats(trace.on_device(d)).summary["events"] for d in (0, 1)}
    assert got == want
