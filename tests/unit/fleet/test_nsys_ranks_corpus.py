"""The corpus's two nsys exports (nsys-ai's 2-GPU H100 windows, `nsys profile` around `torchrun`) as runs of two
ranks: each export holds two python processes, one per GPU, so each is a run; every rank's wait at every NCCL
SendRecv equals an independent sqlite3 reading of the kernel starts (one host clock: the later start minus its
own), and `report` / `findings` answer for both ranks. Skipped where the corpus is absent."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import tracekit

FIXTURES = Path(__file__).resolve().parents[4] / "shared" / "corpus" / "nsys-ai" / "tests" / "fixtures"
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/corpus/nsys-ai/tests/fixtures")
EXPORTS = [FIXTURES / "mfu_2gpu_before.sqlite", FIXTURES / "mfu_2gpu_after.sqlite"]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not EXPORTS[0].is_file(), reason=f"the nsys corpus ({FIXTURES}) is absent"),
]


def nccl_starts(path: Path) -> dict[int, tuple[int, list[int]]]:
    """Per device: (the process that ran its NCCL kernels, their starts in time order), by plain sqlite3."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        rows = con.execute(
            "SELECT k.deviceId, (k.globalPid >> 24) & 16777215, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k"
            " JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'ncclDevKernel%' ORDER BY 1, 3"
        ).fetchall()
    finally:
        con.close()
    out: dict[int, tuple[int, list[int]]] = {}
    for dev, pid, start in rows:
        out.setdefault(dev, (pid, []))[1].append(start)
    return out


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.stem)
def test_each_export_is_a_run_of_two_ranks_whose_waits_are_the_kernel_starts(export):
    truth = nccl_starts(export)
    assert sorted(truth) == [0, 1] and truth[0][0] != truth[1][0]  # two processes, one GPU each
    run = tracekit.load_run(export)
    assert [rf.rank for rf in run.ranks] == [0, 1] and run.nodes_from == "one export"
    assert [str(rf.files[0]) for rf in run.ranks] == [f"{export}::process={truth[d][0]}" for d in (0, 1)]
    r = tracekit.imbalance(run, jobs=1)
    assert r.summary["ranks"] == 2 and r.summary["unmatched"] == 0
    assert r.tables["ranks"]["clock_offset_ns"].tolist() == [0, 0]  # one export: one clock, no fit
    s0, s1 = truth[0][1], truth[1][1]
    assert r.summary["collectives"] == len(s0) == len(s1)
    c = r.tables["collectives"]
    for rank, own in ((0, s0), (1, s1)):
        got = c[c["rank"] == rank].sort_values("seq")["wait_ns"].tolist()
        assert got == [max(a, b) - o for a, b, o in zip(s0, s1, own)]


def test_report_and_findings_of_one_export_answer_for_its_two_ranks(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli("report", EXPORTS[1], "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["summary"]["ranks"]["ranks"] == 2 and doc["summary"]["ranks"]["reference_rank"] == 0
    assert doc["summary"]["kernels"] == 1793  # rank 0's GPU only (device 0: 1,793 kernels; the export: 3,587)
    code, out, err = cli("report", EXPORTS[1])
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80
    code, out, err = cli("findings", EXPORTS[1], "-f", "json")
    assert code == 0, err
    assert json.loads(out)["command"] == "findings"
