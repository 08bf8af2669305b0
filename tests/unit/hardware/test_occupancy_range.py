"""CTAs per SM as a range where the trace lacks registers or shared memory (issue 39, ROCm Kineto traces):
tracekit.gpu_specs.ctas_per_sm_range against counts worked out here by hand from each architecture's published
limits (gfx90a, gfx942, gfx950; sm80, sm90, sm100), the wave numbers' range against a brute force over every count,
and the tail-wave finding filed only when it holds over the whole range."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit
from tracekit.analyses.hardware.waves import efficiency_range, kernel_waves
from tracekit.gpu_specs import ctas_per_sm, ctas_per_sm_range, load_profile, sm_limits

from tests.conftest import kernel, launch, write_trace

GFX90A = {  # MI210's deviceProperties as Kineto writes them (the corpus's mi210 trace)
    "device_properties": [{"id": 0, "name": "AMD Instinct MI210", "computeMajor": 9, "computeMinor": 0, "warpSize": 64}]
}
NO_REGS, NO_LDS = -1, -1


def _lim(arch: str):
    if arch == "gfx90a":
        return sm_limits(GFX90A)
    return sm_limits({}, load_profile({"gfx942": "mi300x", "gfx950": "mi355x", "sm80": "a100"}.get(arch, arch)))


def _one(arch, threads, regs, lds):
    lo, hi = ctas_per_sm_range([threads], [regs], [lds], _lim(arch))
    return int(lo[0]), int(hi[0])


# AMD CDNA2-4: a CU holds 2048 work-items (32 wavefronts of 64); each of its 4 SIMDs has 512 VGPRs per lane, a
# wavefront may allocate all 512 (arch + accumulation VGPRs); a workgroup may take the CU's whole LDS (64 KiB on
# gfx90a/gfx942, 160 KiB on gfx950). Counted by hand:
#   256 work-items = 4 wavefronts: threads alone 32 // 4 = 8 workgroups (the upper bound);
#   worst LDS (the whole CU's) = 1 workgroup (the lower bound whenever LDS is unknown);
#   64 work-items = 1 wavefront, LDS 0 known, VGPRs unknown: at 512 VGPRs one wavefront per SIMD, 4 per CU = 4;
#   1024 work-items = 16 wavefronts: threads alone 2, worst case 1.
@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950"])
def test_amd_ranges_by_hand(arch):
    assert _one(arch, 256, NO_REGS, NO_LDS) == (1, 8)
    assert _one(arch, 64, NO_REGS, 0) == (4, 32)
    assert _one(arch, 1024, NO_REGS, NO_LDS) == (1, 2)
    assert _one(arch, 128, NO_REGS, 0) == (2, 16)  # 2 wavefronts: 4 SIMDs x 1 wavefront at 512 VGPRs = 2
    assert _lim(arch).max_registers_per_thread == 512


def test_gfx950_lds_and_known_launch_is_exact():
    # gfx950: 160 KiB LDS per CU in 1280-byte granules; 40 KiB per workgroup = 4 per CU; 128 VGPRs for 4 wavefronts:
    # 512 // 128 = 4 wavefronts per SIMD, 16 per CU, 4 workgroups; threads alone 8: the exact count is 4
    assert _one("gfx950", 256, 128, 40960) == (4, 4)
    assert _one("gfx950", 256, NO_REGS, 40960) == (1, 4)  # VGPRs unknown: at 512, 1 wavefront per SIMD = 1
    assert _one("gfx942", 256, NO_REGS, 40960) == (1, 1)  # 64 KiB LDS holds one 40 KiB workgroup


# NVIDIA sm80/sm90/sm100: 2048 threads and 32 blocks per SM, 64 K registers in 4 sub-partitions allocated per warp in
# units of 256, at most 255 registers per thread; the most shared memory a block may opt into plus the 1 KiB reserved
# per block is the SM's whole shared memory. 128 threads = 4 warps: threads alone 64 // 4 = 16 blocks; at 255
# registers a warp takes 255 x 32 = 8160 -> 8192 registers, 16384 // 8192 = 2 warps per sub-partition, 8 per SM:
# 2 blocks of 4 warps (shared memory 0 known); shared memory unknown: 1.
@pytest.mark.parametrize("arch", ["sm80", "h100", "b200"])
def test_nvidia_ranges_by_hand(arch):
    lim = _lim(arch)
    assert lim.compute_capability == {"sm80": "8.0", "h100": "9.0", "b200": "10.0"}[arch]
    assert _one(arch, 128, NO_REGS, 0) == (2, 16)
    assert _one(arch, 128, NO_REGS, NO_LDS) == (1, 16)
    # known registers and shared memory: the exact count, lo = hi = the calculator's
    for t, r, s in ((128, 64, 0), (256, 128, 49152), (1024, 32, 0)):
        want = int(ctas_per_sm([t], [r], [s], lim)[0][0])
        assert _one(arch, t, r, s) == (want, want)


def test_efficiency_range_is_the_brute_force_over_every_count():
    rng = np.random.default_rng(39)
    sms = 304
    ctas = rng.integers(1, 20000, 400)
    lo = rng.integers(1, 9, 400)
    hi = lo + rng.integers(0, 9, 400)
    e_lo, e_hi, w_hi = efficiency_range(ctas, sms, lo, hi)
    for i in range(400):
        effs = [ctas[i] / (-(-ctas[i] // (sms * c)) * sms * c) for c in range(lo[i], hi[i] + 1)]
        assert e_lo[i] == min(effs) and e_hi[i] == max(effs)
        assert w_hi[i] == -(-ctas[i] // (sms * lo[i]))


MI300X = {
    "id": 0,
    "name": "AMD Instinct MI300X",
    "computeMajor": 9,
    "computeMinor": 4,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "warpSize": 64,
    "numSms": 304,
    "maxSharedMemoryPerMultiProcessor": 65536,
}


@pytest.mark.slow
def test_rocm_waves_carry_the_range_and_old_keys_are_null(tmp_path):
    # 4,864 workgroups of 256 on 304 CUs: at 8 per CU (threads alone) 2 full waves (no tail); at 1 per CU 16 full
    # waves; between them tails (3 per CU: 5.33 waves). The old single numbers are unknown (null); the range is given.
    ev = [
        launch("hipLaunchKernel", 5.0, 11),
        kernel("Cijk_gemm", 10.0, 100.0, corr=11, grid=[4864, 1, 1], block=[256, 1, 1]),
    ]
    t = tracekit.load(write_trace(tmp_path / "amd.json", ev, deviceProperties=[MI300X]), cache=False)
    r = kernel_waves(t)
    row = r.to_dict()["tables"]["per_kernel"][0]
    assert (row["ctas_per_sm_lo"], row["ctas_per_sm_hi"]) == (1, 8)
    assert (row["waves_lo"], row["waves_hi"]) == (2, 16)
    assert row["lost_lo_ns"] == 0  # some count in the range fills whole waves
    worst = min(4864 / (-(-4864 // (304 * c)) * 304 * c) for c in range(1, 9))
    assert worst < 4864 / (6 * 304 * 3)  # worse than 3 per CU's 6 waves of 912
    assert row["lost_hi_ns"] == 100_000 - round(100_000 * worst)
    for k in ("ctas_per_sm", "waves", "capacity", "wave_efficiency", "lost_ns", "lost_pct"):
        assert row[k] is None, k
    s = r.summary
    assert s["lost_ns"] is None and s["ctas_per_sm_exact"] is False and s["lost_lo_ns"] == 0
    assert s["occupancy"]["launches_with_ctas_per_sm_range"] == 1


@pytest.mark.slow
def test_no_tail_wave_finding_unless_it_holds_over_the_range(tmp_path):
    # the same kernel with 2,432 workgroups (one full wave at 8 per CU, 8 full waves at 1 per CU) loses nothing at
    # some counts: no finding; 5,000 workgroups lose at every count from 1 to 8: a finding that gives the range
    def findings_of(grid):
        ev = [
            launch("hipLaunchKernel", 5.0, 11),
            kernel("Cijk_gemm", 10.0, 1000.0, corr=11, grid=[grid, 1, 1], block=[256, 1, 1]),
        ]
        t = tracekit.load(write_trace(tmp_path / f"g{grid}.json", ev, deviceProperties=[MI300X]), cache=False)
        return [f for f in tracekit.findings(t).to_dict()["tables"]["findings"] if f["kind"] == "wave_quantization"]

    assert findings_of(2432) == []
    effs = [5000 / (-(-5000 // (304 * c)) * 304 * c) for c in range(1, 9)]
    assert max(effs) < 0.99 and min(effs) < max(effs)
    got = findings_of(5000)
    assert len(got) == 1
    f = got[0]
    assert "1–8 CTAs per SM" in f["how"] and "a range" in f["how"]
    assert f["gain_ms_per_step"] == pytest.approx((1_000_000 - round(1_000_000 * max(effs))) / 1e6)
