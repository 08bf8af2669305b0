"""CTAs per SM from the launch configuration (tracekit.gpu_specs.ctas_per_sm, issue 25): one test per limit with the
value worked out by hand in the comments, the waves that follow, and on the corpus the count Kineto's own
'est. achieved occupancy %' implies, read from the raw JSON."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

import tracekit
from tracekit.analyses.hardware.waves import kernel_waves
from tracekit.annotation.spec import parse_annotation
from tracekit.errors import MissingDataError
from tracekit.gpu_specs import load_profile, sm_limits
from tracekit.gpu_specs import ctas_per_sm as cps_of
from tests.conftest import CORPUS, kernel, launch, write_trace

# deviceProperties as torch.profiler writes them for an H100 (corpus: tracelens/h100)
H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85018279936,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}


def h100():
    return sm_limits({"device_properties": [H100], "devices_used": [0]})


def one(threads, regs, smem, lim=None):
    got, why, status = cps_of([threads], [regs], [smem], lim or h100())
    return int(got[0]), str(why[0]), str(status[0])


def test_limits_come_from_the_trace_and_the_table():
    lim = h100()
    assert (lim.max_threads_per_sm, lim.registers_per_sm, lim.shared_memory_per_sm, lim.warp_size) == (
        2048,
        65536,
        233472,
        32,
    )
    assert lim.sources["shared_memory_per_sm"] == "trace deviceProperties"
    # what deviceProperties never carry comes from _occupancy.json's 9.0 row
    assert (
        lim.max_blocks_per_sm,
        lim.register_allocation_unit,
        lim.register_sub_partitions,
        lim.shared_memory_allocation_unit,
        lim.reserved_shared_memory_per_block,
    ) == (32, 256, 4, 128, 1024)
    assert lim.sources["max_blocks_per_sm"] == "_occupancy.json NVIDIA 9.0"
    # no deviceProperties: the profile's compute capability gives the row
    b200 = sm_limits({}, load_profile("b200"))
    assert (b200.compute_capability, b200.max_threads_per_sm, b200.shared_memory_per_sm) == ("10.0", 2048, 233472)
    with pytest.raises(MissingDataError, match="compute capability"):
        sm_limits({})


def test_threads_limit():
    # 1024 threads = 32 warps; 2048 / 32 = 64 warps per SM → 64 // 32 = 2 CTAs.
    # registers: 16 × 32 = 512 per warp; 65536 / 4 sub-partitions = 16384 → 32 warps each → 128 warps → 4 CTAs;
    # shared memory: 0 + 1024 reserved → 233472 // 1024 = 228; cap 32. Least: 2, by threads.
    assert one(1024, 16, 0) == (2, "threads", "ok")
    # 768 threads = 24 warps → 64 // 24 = 2 (not 2048 / 768 = 2.67 rounded up)
    assert one(768, 16, 0)[:2] == (2, "threads")
    # 100 threads round up to 4 warps: 64 // 4 = 16, not 2048 // 100 = 20
    assert one(100, 16, 0)[:2] == (16, "threads")


def test_registers_limit_with_allocation_unit_and_sub_partitions():
    # 128 threads (4 warps), 33 registers: 33 × 32 = 1056 per warp, allocated in units of 256 → 1280;
    # 16384 per sub-partition // 1280 = 12 warps, × 4 = 48 warps → 48 // 4 = 12 CTAs.
    # (Unrounded it would be 65536 // (1056 × 4) = 15.)  Threads allow 16, so registers bind.
    assert one(128, 33, 0) == (12, "registers", "ok")
    # 96 threads (3 warps), 40 registers: 1280 per warp (already a multiple of 256); per sub-partition
    # 16384 // 1280 = 12 warps → 48 warps → 48 // 3 = 16 CTAs. Without the sub-partitions the SM-wide count
    # 65536 // 1280 = 51 warps would give 17. Threads allow 64 // 3 = 21.
    assert one(96, 40, 0)[:2] == (16, "registers")
    # the reduce_kernel of the brief: 512 threads (16 warps), 32 registers → 1024 per warp → 16 warps per
    # sub-partition → 64 warps → 4 CTAs; threads also allow 64 // 16 = 4: both bind.
    assert one(512, 32, 0)[:2] == (4, "threads+registers")
    # 255 registers × 1024 threads: 8160 per warp → 8192; 16384 // 8192 = 2 warps per sub-partition = 8 per SM <
    # 32 warps of the block: the block does not fit (cudaOccupancy says 0); it ran, so 1 is used and flagged
    assert one(1024, 255, 0) == (1, "registers", "exceeds")


def test_shared_memory_limit_with_the_reserved_part_and_allocation_unit():
    # 128 threads, 16 registers (threads allow 16, registers 32), 45,576 B of shared memory per block:
    # + 1024 reserved per block (8.0 and later) = 46,600 → rounded up to 128 B = 46,720 → 233472 // 46720 = 4.
    # Unrounded 233472 // 46600 = 5; without the reserved KiB 45,576 → 45,696 → 5. Both parts matter.
    assert one(128, 16, 45_576) == (4, "shared_memory", "ok")
    # 98,304 B (the synthetic MLA kernel): 99,328 → 233472 // 99328 = 2
    assert one(256, 80, 98_304)[:2] == (2, "shared_memory")
    # more than the per-block opt-in maximum (232,448): cannot have run as recorded → flagged, 1 used
    assert one(128, 16, 232_449)[2] == "exceeds"


def test_the_resident_block_cap():
    # 32 threads (1 warp), 16 registers: threads allow 64, registers 128 warps → 128, shared memory 228;
    # the cap of 32 resident blocks per SM on 9.0 binds.
    assert one(32, 16, 0) == (32, "blocks_per_sm", "ok")
    # on 8.6 (16 blocks, 1536 threads per SM): 64 threads = 2 warps → 48 // 2 = 24 by threads; cap 16
    ga102 = sm_limits(
        {"device_properties": [{"id": 0, "computeMajor": 8, "computeMinor": 6, "warpSize": 32}], "devices_used": [0]}
    )
    assert (ga102.max_blocks_per_sm, ga102.max_threads_per_sm) == (16, 1536)
    assert one(64, 16, 0, ga102)[:2] == (16, "blocks_per_sm")


def test_unknown_inputs_are_said():
    assert one(-1, 32, 0) == (1, "unknown (no block size)", "no_block")
    # ROCm: no registers, no LDS in the trace → threads alone (256 threads = 4 wavefronts of 64 → 32 // 4 = 8)
    mi300 = sm_limits({}, load_profile("mi300x"))
    assert mi300.assumed and "upper bound" in mi300.assumed[0]
    assert one(256, -1, -1, mi300)[:2] == (8, "threads")


def test_vectorised_over_kernels():
    lim = h100()
    n = 100_000
    t = np.tile([1024, 128, 512, 32], n // 4)
    r = np.tile([16, 33, 32, 16], n // 4)
    s = np.tile([0, 0, 0, 0], n // 4)
    got, why, _ = cps_of(t, r, s, lim)
    assert got.shape == (n,) and list(got[:4]) == [2, 12, 4, 32] and why[3] == "blocks_per_sm"


# ------------------------------------------------------------------------------------------------ waves


def reduce_trace(tmp_path, props=H100, **kargs):
    ev = [
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "scheduler.run_batch",
            "pid": 0,
            "tid": 7,
            "ts": 0.0,
            "dur": 1000.0,
        }
    ]
    args = {"grid": [559, 1, 1], "block": [512, 1, 1], "registers per thread": 32, "shared memory": 16, **kargs}
    ev += [kernel("void at::native::reduce_kernel<512, 1>", 10.0 + 100 * i, 50.0, **args) for i in range(3)]
    top = {"deviceProperties": [props]} if props else {}
    return tracekit.load(write_trace(tmp_path / "r.json", ev, **top), cache=False)


def test_waves_of_the_reduce_kernel(tmp_path):
    r = kernel_waves(reduce_trace(tmp_path))
    row = r.tables["per_kernel"].iloc[0]
    # 4 CTAs per SM × 132 SMs = 528 slots: 559 CTAs run in 2 waves at 559 / 1056 = 52.9 % (was 5 waves at 85 %)
    assert (row["ctas_per_sm"], row["capacity"], row["waves"], row["limited_by"], row["ctas_per_sm_from"]) == (
        4,
        528,
        2,
        "threads+registers",
        "launch configuration",
    )
    assert row["wave_efficiency"] == pytest.approx(559 / 1056, abs=1e-4)
    assert r.summary["occupancy"]["assumed"] is False
    assert r.summary["occupancy"]["sm_limits"]["compute_capability"] == "9.0"
    # an annotation still overrides, and so does the option
    ann = parse_annotation(b'{"name": "x", "ctas_per_sm": [{"pattern": "reduce_kernel", "ctas_per_sm": 1}]}', "x.json")
    row = kernel_waves(reduce_trace(tmp_path), ann=ann).tables["per_kernel"].iloc[0]
    assert (row["ctas_per_sm"], row["waves"], row["ctas_per_sm_from"]) == (1, 5, "annotation")
    row = kernel_waves(reduce_trace(tmp_path), ctas_per_sm=2).tables["per_kernel"].iloc[0]
    assert (row["ctas_per_sm"], row["waves"], row["ctas_per_sm_from"]) == (2, 3, "option")


def test_waves_say_when_the_count_is_assumed(tmp_path):
    # no deviceProperties at all, SMs from --sms: the limits are unknown, 1 CTA per SM is assumed and said
    r = kernel_waves(reduce_trace(tmp_path, props=None), sms=132)
    row = r.tables["per_kernel"].iloc[0]
    assert (row["ctas_per_sm"], row["ctas_per_sm_from"]) == (1, "assumed")
    assert r.summary["occupancy"]["assumed"] is True and any("CTAs per SM" in w for w in r.warnings)
    # with --hw the profile's compute capability gives the limits
    r = kernel_waves(reduce_trace(tmp_path, props=None), hw=load_profile("h100"))
    assert r.tables["per_kernel"].iloc[0]["ctas_per_sm"] == 4


MI300X = {
    "id": 0,
    "name": "AMD Instinct MI300X",
    "computeMajor": 9,
    "computeMinor": 4,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 131072,
    "warpSize": 64,
    "sharedMemPerBlock": 65536,
    "numSms": 304,
    "maxSharedMemoryPerMultiProcessor": 65536,
}


def test_rocm_grids_in_work_items_and_the_assumed_count(tmp_path):
    # a hipBLASLt kernel launched by hipExtModuleLaunchKernel records its global size: 350,208 work-items of
    # 256 = 1,368 workgroups; a hipLaunchKernel one records workgroups (32). 256 threads = 4 wavefronts of 64:
    # 2048 / 64 = 32 wavefronts per CU → 8 workgroups per CU, from threads alone (no registers, no LDS in the trace)
    ev = [
        launch("hipExtModuleLaunchKernel", 5.0, 11),
        launch("hipLaunchKernel", 105.0, 12),
        kernel("Cijk_gemm", 10.0, 50.0, corr=11, grid=[350208, 1, 1], block=[256, 1, 1]),
        kernel("reduce", 110.0, 5.0, corr=12, grid=[32, 1, 1], block=[256, 1, 1]),
    ]
    t = tracekit.load(write_trace(tmp_path / "amd.json", ev, deviceProperties=[MI300X]), cache=False)
    r = kernel_waves(t)
    pk = r.tables["per_kernel"].set_index("name")
    assert (pk.loc["Cijk_gemm", "ctas"], pk.loc["reduce", "ctas"]) == (1368, 32)
    # the count is a range (issue 39): 8 from threads alone is its upper bound, 1 (the most VGPRs and LDS) its lower
    assert pk.loc["Cijk_gemm", "ctas_per_sm_hi"] == 8 and pk.loc["Cijk_gemm", "waves_lo"] == 1  # 1368 ≤ 304 × 8
    assert pk.loc["Cijk_gemm", "ctas_per_sm_from"] == "launch configuration (partial)"
    occ = r.summary["occupancy"]
    assert occ["assumed"] is True and any("upper bound" in w for w in occ["assumed_why"])
    assert occ["grid_units"]["work_items (divided by the block)"] == 1


def test_waves_without_an_sm_count_exit_4(tmp_path, cli):
    path = write_trace(tmp_path / "nosms.json", [kernel("k", 1.0, 2.0, grid=[4, 1, 1], block=[128, 1, 1])])
    code, _, err = cli("waves", path, "--no-cache")
    assert code == 4, err
    msg = err.strip().splitlines()[-1]
    assert "--sms" in msg and "--hw" in msg


# ------------------------------------------------------------------------------------------------ corpus


def _corpus_traces():
    if not CORPUS.is_dir():
        return []
    return sorted(CORPUS.rglob("*.json.gz"))


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"{CORPUS} is absent (the real traces of ../shared/corpus)")
def test_ctas_per_sm_match_kinetos_occupancy_on_the_corpus():
    """Kineto writes 'est. achieved occupancy %' = min(active CTAs per SM, grid / numSms) × block threads /
    maxThreadsPerMultiprocessor × 100, active CTAs from cudaOccMaxActiveBlocksPerMultiprocessor with the default
    shared-memory limit (sharedMemPerBlock: a block above 48 KiB gets 0 there, so those are left out). Where the
    grid fills the GPU (grid / numSms ≥ our count) the percentage implies the count: occupancy × maxThreads /
    (100 × threads). The events table keeps no occupancy, so the raw JSON is read here."""
    checked = filled = 0
    for path in _corpus_traces():
        with gzip.open(path) as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or not doc.get("deviceProperties"):
            continue
        props = {p.get("id"): p for p in doc["deviceProperties"]}
        rows = [
            e["args"]
            for e in doc.get("traceEvents", [])
            if e.get("cat") == "kernel" and "est. achieved occupancy %" in (e.get("args") or {})
        ]
        if not rows:
            continue
        p = props.get(rows[0].get("device"), doc["deviceProperties"][0])
        lim = sm_limits({"device_properties": [p], "devices_used": [p["id"]]})
        grid = np.array([np.prod(a["grid"]) for a in rows])
        threads = np.array([np.prod(a["block"]) for a in rows])
        regs = np.array([a["registers per thread"] for a in rows])
        smem = np.array([a["shared memory"] for a in rows])
        occ = np.array([a["est. achieved occupancy %"] for a in rows], dtype=float)
        got, _, status = cps_of(threads, regs, smem, lim)
        kineto_sees = smem <= p["sharedMemPerBlock"]
        per_sm = grid / p["numSms"]
        expect = np.minimum(got, per_sm) * threads / p["maxThreadsPerMultiprocessor"] * 100
        bad = kineto_sees & (np.abs(expect - occ) > 1.0)
        assert not bad.any(), (
            path.name,
            [
                (
                    rows[i]["grid"],
                    rows[i]["block"],
                    rows[i]["registers per thread"],
                    rows[i]["shared memory"],
                    occ[i],
                    int(got[i]),
                )
                for i in np.flatnonzero(bad)[:5]
            ],
        )
        fills = kineto_sees & (per_sm >= got)
        implied = occ[fills] * p["maxThreadsPerMultiprocessor"] / (100 * threads[fills])
        assert np.array_equal(np.rint(implied), got[fills]), path.name
        assert (status[kineto_sees] == "ok").all(), path.name
        checked += int(kineto_sees.sum())
        filled += int(fills.sum())
    if not checked:
        pytest.skip("no corpus trace carries Kineto's occupancy with deviceProperties")
    assert filled > 1000  # A100, V100 and B200 kernels whose grid fills the GPU
