"""``waves`` leaves communication kernels out of its ranking and totals and lists them apart (issue 42's review: an
RCCL kernel of 104 CTAs, one per channel by design, was "lost 90 %" of the MI350X file's kernel time). The rule is
the waves analysis's own, and findings read its per_kernel table: one rule for both."""

from __future__ import annotations

import json

import pytest

import tracekit

from tests.conftest import kernel, write_trace

NCCL = "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"


def _trace(tmp_path):
    ev = [kernel(NCCL, 10 + i * 2000, 1500, stream=5, corr=i, grid=[104, 1, 1], block=[256, 1, 1]) for i in range(4)]
    ev += [
        kernel("elementwise_kernel", 20 + i * 100, 50, stream=7, corr=100 + i, grid=[300, 1, 1], block=[256, 1, 1])
        for i in range(20)
    ]
    return tracekit.load(write_trace(tmp_path / "t.json", ev), cache=False)


def test_collectives_are_listed_apart_not_counted(tmp_path):
    w = tracekit.kernel_waves(_trace(tmp_path), sms=256, ctas_per_sm=1)
    s = w.summary
    assert s["top_name"] == "elementwise_kernel"
    assert s["kernels"] == 20 and s["names"] == 1
    assert s["total_ns"] == 20 * 50_000  # the compute kernels' time only
    assert s["communication_kernels"] == 4 and s["communication_names"] == 1 and s["communication_ns"] == 4 * 1_500_000
    assert NCCL not in set(w.tables["per_kernel"]["name"]) and NCCL not in set(w.tables["per_grid"]["name"])
    comm = w.tables["communication"]
    assert list(comm["name"]) == [NCCL] and int(comm["count"].iloc[0]) == 4  # still there, in json and --all
    doc = json.loads(w.to_json())
    assert doc["tables"]["communication"][0]["name"] == NCCL


@pytest.mark.slow
def test_findings_file_no_tail_wave_of_a_collective(tmp_path):
    f = tracekit.findings(_trace(tmp_path), sms=256)
    waves = f.tables["findings"]
    assert not waves["title"].astype(str).str.contains("nccl", case=False).any()


@pytest.mark.slow
def test_the_cli_shows_them_with_all(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = write_trace(
        tmp_path / "t.json",
        [kernel(NCCL, 10, 1500, stream=5, grid=[104, 1, 1], block=[256, 1, 1])]
        + [
            kernel("elementwise_kernel", 20 + i * 100, 50, corr=9 + i, grid=[300, 1, 1], block=[256, 1, 1])
            for i in range(3)
        ],
    )
    code, out, _ = cli("waves", path, "--sms", "256", "--all")
    assert code == 0 and "communication" in out and "ncclDevKernel_Generic_1" in out
