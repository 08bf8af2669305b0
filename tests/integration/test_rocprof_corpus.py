"""The real rocprofv3 JSON (MI350X, ~44 k dispatches): counts and busy time against an independent reading of its
JSON (plain ``json``), occupancy against AMD's rule computed here, and the commands at 80 columns."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import tracekit
from tracekit.gpu_specs import ctas_per_sm, sm_limits

FILE = Path(__file__).resolve().parents[2] / "../shared/corpus/tracelens/tests/rocprof/908_results.json.gz"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not FILE.exists(), reason="the corpus (../shared/corpus/tracelens) is not here"),
]


@pytest.fixture(scope="module")
def doc():
    return json.load(gzip.open(FILE))["rocprofiler-sdk-tool"][0]


@pytest.fixture(scope="module")
def trace():
    return tracekit.load(FILE, cache=False)


def _busy(intervals):
    """Union length of [start, end) intervals, by a plain sweep."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0)


def test_dispatch_count_and_busy_per_agent(doc, trace):
    by_agent: dict[int, list] = {}
    for r in doc["buffer_records"]["kernel_dispatch"]:
        by_agent.setdefault(r["dispatch_info"]["agent_id"]["handle"], []).append(
            (r["start_timestamp"], r["end_timestamp"])
        )
    gpus = {a["id"]["handle"]: a["logical_node_type_id"] for a in doc["agents"] if a["type"] == 2}
    k = trace.events[trace.events["kind"] == "kernel"]
    assert len(k) == len(doc["buffer_records"]["kernel_dispatch"]) == 43915
    assert trace.report.records_read == trace.report.events_kept == 43915
    for handle, iv in by_agent.items():
        mine = k[k["device"] == gpus[handle]]
        assert len(mine) == len(iv)
        s, e = mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy()
        assert _busy(list(zip(s.tolist(), e.tolist()))) == _busy(iv)  # exact ns
    info = tracekit.info(trace)
    assert info.summary["profiler"] == "rocprofv3"
    assert info.summary["gpu_busy_ns"] == sum(_busy(iv) for iv in by_agent.values())


def _amd_workgroups_per_cu(vgprs, lds, threads, agent):
    """AMD's occupancy rule (CDNA3/4 ISA and AMDGPUUsage): a CU has simd_per_cu SIMDs of 512 VGPRs per lane,
    allocated to a wave in granules of 8; at most max_waves_per_simd waves per SIMD; LDS lds_size_in_kb per CU,
    allocated in 1280-byte granules on gfx950 (320 dwords); a workgroup's waves spread over the CU's SIMDs."""
    waves_per_wg = -(-threads // agent["wave_front_size"])
    vgpr_alloc = -(-vgprs // 8) * 8
    waves_per_simd = min(agent["max_waves_per_simd"], 512 // vgpr_alloc)
    by_vgpr = waves_per_simd * agent["simd_per_cu"] // waves_per_wg
    by_waves = agent["max_waves_per_simd"] * agent["simd_per_cu"] // waves_per_wg
    granule = 1280 if agent["gfx_target_version"] == 90500 else 512
    by_lds = (agent["lds_size_in_kb"] * 1024) // (-(-lds // granule) * granule) if lds > 0 else by_waves
    return min(by_vgpr, by_waves, by_lds)


def test_occupancy_from_kernel_symbols(doc, trace):
    agent = next(a for a in doc["agents"] if a["type"] == 2)
    syms = {s["kernel_id"]: s for s in doc["kernel_symbols"]}
    seen, cases = set(), []
    for r in doc["buffer_records"]["kernel_dispatch"]:
        d = r["dispatch_info"]
        s = syms[d["kernel_id"]]
        key = (s["arch_vgpr_count"] + s["accum_vgpr_count"], d["group_segment_size"], d["workgroup_size"]["x"])
        if key not in seen and key[0] > 0:
            seen.add(key)
            cases.append(key)
    assert len(cases) >= 5
    lim = sm_limits(trace.meta)
    vg, lds, thr = (np.array(c, dtype=np.int64) for c in zip(*cases))
    got, _, status = ctas_per_sm(thr, vg, lds, lim)
    want = [_amd_workgroups_per_cu(int(a), int(b), int(c), agent) for a, b, c in cases]
    assert got.tolist() == want
    assert set(status.tolist()) == {"ok"}
    assert len(set(want)) > 1  # the cases bind differently, not one number everywhere


@pytest.mark.parametrize("command", ["report", "kernels", "waves"])
def test_commands_at_80_columns(cli, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli(command, FILE)
    assert code == 0, err
    assert "tracekit bug" not in out + err
    assert max(len(line) for line in out.splitlines()) <= 80
