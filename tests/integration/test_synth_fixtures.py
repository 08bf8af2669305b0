"""The committed synthetic deployments (fixtures/synthetic/): reproducible, self-consistent, near the study.

The fixtures are written by ``python fixtures/synth.py regen``; regenerating them must give the same
bytes. Their ground truth (``*.truth.json``) comes from the generator's own schedule; here we check that
it is internally consistent (parts sum to the wall, kernels per block add up) and that the emergent
numbers land near the study's anchors (../shared/seeds/000_f7cc2df0065878e9.txt), which they are
calibrated against but never painted in.
"""

from __future__ import annotations

import filecmp
import gzip
import json
import re
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from fixtures.synth import FIXTURE_DIR, FIXTURES, build, get_preset, regen, simulate  # noqa: E402
from fixtures.synthlib.cli import main as synth_main  # noqa: E402

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

TRACES = [fx.trace_name for fx in FIXTURES]
MS = 1_000_000


def truth_of(name: str) -> dict:
    return json.loads((FIXTURE_DIR / name.replace(".trace.json.gz", ".truth.json")).read_text())


@pytest.fixture(scope="module")
def truths() -> dict:
    return {fx.stem: truth_of(fx.trace_name) for fx in FIXTURES}


def med(truth: dict, fn) -> float:
    return statistics.median(fn(s) for s in truth["steps"])


def _content(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def test_regenerating_gives_identical_files(tmp_path):
    fresh = regen(tmp_path / "a")
    committed = sorted(p.name for p in FIXTURE_DIR.iterdir() if p.is_file())
    assert sorted(p.name for p in fresh) == committed, "fixtures/synthetic/ holds files regen does not write"
    # logs and truths byte for byte; traces by their decompressed text (the gzip bytes are deterministic
    # for one zlib build, checked just below, but another zlib may compress the same text differently)
    differ = [p.name for p in fresh if _content(p) != _content(FIXTURE_DIR / p.name)]
    assert not differ, (
        f"regenerated fixtures differ from the committed ones: {differ}; run python fixtures/synth.py regen"
    )
    again = regen(tmp_path / "b")
    assert all(filecmp.cmp(p, q, shallow=False) for p, q in zip(fresh, again)), "the writer is not byte-deterministic"


def test_committed_size_is_small():
    total = sum(p.stat().st_size for p in FIXTURE_DIR.iterdir())
    assert total < 4_000_000


@pytest.mark.parametrize("name", TRACES)
def test_parts_sum_to_the_wall_and_kernels_add_up(name):
    truth = truth_of(name)
    assert len(truth["steps"]) == 3
    for s in truth["steps"]:
        assert s["wall_ns"] == s["end_ns"] - s["start_ns"] > 10 * MS
        for d in ("ptop", "ptop+local"):
            p = s[d]
            assert p["busy_ns"] + p["ag_only_ns"] + p["idle_ns"] == s["wall_ns"]
            assert min(p.values()) >= 0
        # moving the local copies from "other" to "AllGather" can only shrink busy and grow ag_only
        assert s["ptop+local"]["busy_ns"] <= s["ptop"]["busy_ns"]
        assert s["ptop+local"]["idle_ns"] == s["ptop"]["idle_ns"]
        assert sum(s["exposure_ns"].values()) == s["ptop+local"]["ag_only_ns"]
        kernels = sum(b["kernels"] for b in s["blocks"].values())
        assert "unassigned" not in s["blocks"]
        ops_kernels = sum(
            o["count"]
            for t, o in s["ops"].items()
            if t not in ("batch_to_device", "next_tokens_to_host", "weight_ag_ptop")
        )
        assert kernels == ops_kernels
    ags = truth["allgathers"]
    for g in ags:
        assert g["received_bytes"] == g["full_bytes"] // 8 * 7 and g["copies"] == 7
        assert (g["local_copy_ns"] == 0) == g["hoisted"]
    rows = truth["copies"]["rows"]
    assert len(rows) == 7 * len(ags)


@pytest.mark.parametrize("name", TRACES)
def test_fixture_loads_with_nothing_dropped(name):
    trace = tracekit.load(FIXTURE_DIR / name, cache=False)
    truth = truth_of(name)
    assert trace.report.dropped == {} and not trace.report.salvaged and trace.report.warnings == []
    ev = trace.events
    gpu = ev[ev["kind"].isin(("kernel", "memcpy", "memset"))]
    assert len(gpu) == truth["gpu_events"]
    ptop = gpu[gpu["copy_kind"] == "PtoP"]
    assert len(ptop) == len(truth["copies"]["rows"])
    assert int(ptop["bytes"].sum()) == sum(s["allgather"]["received_bytes"] for s in truth["steps"])
    assert trace.meta["base_time_ns"] == truth["base_time_ns"] and trace.meta["num_sms"] == 148


def test_timestamps_are_exact_three_decimal_microseconds():
    import gzip

    head = gzip.open(FIXTURE_DIR / TRACES[0], "rt").read(400_000).splitlines()[:-1]  # drop the cut last line
    stamps = [m for line in head for m in re.findall(r'"(?:ts|dur)": ([0-9.]+)', line)]
    assert stamps and all(re.fullmatch(r"\d+\.\d{3}", s) for s in stamps)


def test_dp16_exposure_emerges_at_small_batch(truths):
    bs4, bs24 = truths["dp16_bs4"], truths["dp16_bs24"]
    not_busy = lambda t: med(t, lambda s: s["ptop"]["ag_only_ns"] + s["ptop"]["idle_ns"])  # noqa: E731
    # study: bs 4 only-AG 10.8 + idle 4.8 ms; bs >= 16: 4-5 ms
    assert not_busy(bs4) > 2.5 * not_busy(bs24)
    assert 13 * MS < not_busy(bs4) < 19 * MS and 3 * MS < not_busy(bs24) < 7 * MS
    assert 9 * MS < med(bs4, lambda s: s["ptop"]["ag_only_ns"]) < 12.5 * MS
    assert 61 * MS < med(bs4, lambda s: s["ptop"]["busy_ns"]) < 83 * MS  # study 71.9
    # exposure per layer type (study: KDA 8.5 vs 0.6 ms, MLA ~0.1, draft ~2.5 at every bs, hoisted ~0.04)
    assert 7 * MS < med(bs4, lambda s: s["exposure_ns"]["KDA"]) < 10 * MS
    assert med(bs24, lambda s: s["exposure_ns"]["KDA"]) < 1.2 * MS
    for t in (bs4, bs24):
        assert med(t, lambda s: s["exposure_ns"]["MLA"]) < 0.4 * MS
        assert 2.0 * MS < med(t, lambda s: s["exposure_ns"]["draft"]) < 3.0 * MS
        assert med(t, lambda s: s["exposure_hoisted_ns"]) < 0.15 * MS
    # step walls (study: bs 4 = 71.9 + 10.8 + 4.8 = 87.5 ms, bs 24 = 144.5 ms)
    assert 0.85 * 87.5 * MS < med(bs4, lambda s: s["wall_ns"]) < 1.15 * 87.5 * MS
    assert 0.85 * 144.5 * MS < med(bs24, lambda s: s["wall_ns"]) < 1.15 * 144.5 * MS


def test_dp2_hides_its_allgathers(truths):
    for key in ("dp2dcp8_bs64", "dp2dcp8_bs128"):
        t = truths[key]
        assert med(t, lambda s: s["ptop"]["ag_only_ns"] + s["ptop"]["idle_ns"]) < 2 * MS
        assert med(t, lambda s: sum(s["exposure_ns"].values())) < 0.6 * MS


@pytest.mark.parametrize(
    "key,gb", [("dp16_bs4", 48.41), ("dp16_bs24", 48.41), ("dp2dcp8_bs64", 14.77), ("dp2dcp8_bs128", 14.77)]
)
def test_received_bytes_per_step(truths, key, gb):
    for s in truths[key]["steps"]:
        assert s["allgather"]["received_bytes"] == pytest.approx(gb * 1e9, rel=0.02)
    largest = max(g["full_bytes"] for g in truths[key]["allgathers"] if g["type"] != "draft")
    assert largest == (627_048_448 if key.startswith("dp16") else 183_500_800)


def test_allgather_durations_and_bandwidth(truths):
    t = truths["dp16_bs4"]
    dur = {}
    for g in t["allgathers"]:
        dur.setdefault((g["type"], g["hoisted"]), []).append(g["end_ns"] - g["start_ns"])
    # study: one KDA AllGather ~800 µs, MLA ~525 µs, draft ~840 µs
    assert statistics.median(dur[("KDA", False)]) == pytest.approx(800_000, rel=0.06)
    assert statistics.median(dur[("MLA", False)]) == pytest.approx(525_000, rel=0.06)
    assert statistics.median(dur[("draft", False)]) == pytest.approx(840_000, rel=0.06)
    gbps = [r[5] for r in t["copies"]["rows"]]
    assert statistics.median(gbps) == pytest.approx(710, rel=0.03)  # ~80 % of NVLink5's 900 GB/s
    assert med(t, lambda s: s["allgather"]["ptop_busy_ns"]) == pytest.approx(69.5 * MS, rel=0.04)
    d2 = truths["dp2dcp8_bs64"]["copies"]["rows"]
    assert {r[2] for r in d2} == {22_937_600}  # 22.9 MB per copy
    assert statistics.median(r[4] for r in d2) == pytest.approx(37_000, rel=0.05)
    # contention (study A8): DP2 bs 128 563 vs 622 GB/s; bs 64 no difference
    rows = truths["dp2dcp8_bs128"]["copies"]["rows"]
    ovl = statistics.median(r[5] for r in rows if r[6])
    non = statistics.median(r[5] for r in rows if not r[6])
    assert ovl == pytest.approx(563, rel=0.04) and non == pytest.approx(622, rel=0.03)


def test_per_layer_kernel_times(truths):
    def per_layer(t, tag, n):
        return med(t, lambda s: s["ops"][tag]["total_ns"]) / n / 1000

    a, b = truths["dp16_bs24"], truths["dp2dcp8_bs128"]
    assert per_layer(a, "kda_state", 69) == pytest.approx(180, rel=0.05)  # 7 × 24 + 12 (124 µs at bs 16)
    assert per_layer(b, "kda_state", 69) == pytest.approx(85, rel=0.05)
    assert per_layer(a, "mla_decode", 24) == pytest.approx(1240, rel=0.03)  # two waves of 240 CTAs
    assert per_layer(b, "attn_mqa", 24) == pytest.approx(826, rel=0.03)
    assert per_layer(b, "dcp_exchange", 24) == pytest.approx(132, rel=0.05)
    assert per_layer(b, "moe_w13", 92) == pytest.approx(129, rel=0.05)
    assert per_layer(b, "moe_w2", 92) == pytest.approx(66, rel=0.05)
    for t in (truths["dp2dcp8_bs128"],):
        deepep = med(t, lambda s: s["ops"]["deepep_dispatch"]["total_ns"] + s["ops"]["deepep_combine"]["total_ns"])
        assert deepep == pytest.approx(32 * MS, rel=0.05)
        assert med(t, lambda s: s["comm"]["deepep"]["side_ns"]) == deepep  # DeepEP runs on the comm stream
        assert med(t, lambda s: s["comm"]["all_to_all"]["critical_ns"]) > 3 * MS  # dcp_exchange on the main stream


def test_dp2_activation_all_gathers_are_not_weight_allgathers(truths):
    name = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    for key in ("dp2dcp8_bs64", "dp2dcp8_bs128"):
        for s in truths[key]["steps"]:
            assert s["comm_kernels"][name] == 846
            assert s["allgather"]["count"] == 92


def test_blocks_per_step(truths):
    s = truths["dp16_bs4"]["steps"][0]["blocks"]
    assert {k: v["blocks"] for k, v in s.items()} == {
        "Dense": 1,
        "KDA": 69,
        "MLA": 24,
        "MoE": 92,
        "ReplaySSM": 1,
        "draft": 5,
        "head": 1,
        "tail": 1,
    }
    g = truths["dsv3_bs32"]["steps"][0]["blocks"]
    assert {k: v["blocks"] for k, v in g.items()} == {"Dense": 3, "MLA": 61, "MoE": 58, "head": 1, "tail": 1}


def test_one_gemm_name_serves_several_ops_and_graph_replays_share_a_correlation():
    sch = simulate(get_preset("dp16", 4), steps=1, seed=0)
    names = {a.tag: a.name for a in sch.acts if a.kind == "kernel"}
    assert names["kda_qkv_proj"] == names["kda_o_proj"] == names["o_proj"] == names["moe_latent_up_proj"]
    assert names["moe_w13"] == names["moe_w2"] != names["kda_qkv_proj"]
    graph_launches = [c for c in sch.cpu if c.name == "cudaGraphLaunch"]
    assert len(graph_launches) == 3  # target, ReplaySSM, draft
    corr = graph_launches[0].args["correlation"]
    replay = [a for a in sch.acts if a.corr == corr]
    assert len(replay) > 2000 and {a.stream for a in replay} == {7, 20, 24}


def test_mla_grid_follows_the_split_heuristic():
    for preset, bs, grid in (
        ("dp16", 4, (2, 20, 3)),
        ("dp16", 16, (2, 80, 1)),
        ("dp16", 24, (2, 120, 1)),
        ("dp2dcp8", 128, (2, 640, 1)),
    ):
        sch = simulate(get_preset(preset, bs), steps=1)
        grids = {a.grid for a in sch.acts if a.tag in ("mla_decode", "attn_mqa")}
        assert grids == {grid}


def test_build_is_deterministic_and_seeded():
    a, ta = build("dsv3", 8, steps=1, seed=3)
    b, tb = build("dsv3", 8, steps=1, seed=3)
    c, _ = build("dsv3", 8, steps=1, seed=4)
    assert ta == tb and a["traceEvents"] == b["traceEvents"]
    assert [e.get("ts") for e in a["traceEvents"]] != [e.get("ts") for e in c["traceEvents"]]


def test_cli_write_and_size_knob(tmp_path, capsys):
    assert (
        synth_main(["write", "--preset", "generic", "--bs", "8", "--out", str(tmp_path), "--mb", "5", "--no-gzip"]) == 0
    )
    capsys.readouterr()
    out = tmp_path / "dsv3_bs8.trace.json"
    assert 4.0e6 < out.stat().st_size < 6.0e6
    truth = json.loads((tmp_path / "dsv3_bs8.truth.json").read_text())
    assert truth["trace"] == out.name and len(truth["steps"]) >= 4


@pytest.mark.parametrize("name", ["dp16", "dp2dcp8"])
def test_launch_log_ledger(name):
    text = (FIXTURE_DIR / f"{name}.launch.log").read_text(encoding="utf-8")
    truth = json.loads((FIXTURE_DIR / f"{name}.launch.log.truth.json").read_text())
    rows = truth["rows"]
    tp0 = [ln for ln in text.splitlines() if "DP0 TP0 EP0]" in ln]
    avail = [float(m) for ln in tp0 for m in re.findall(r"avail mem=([\d.]+) GB", ln)]
    assert avail == [st["avail_gib"] for st in truth["timeline"]]
    final = re.search(r"available_gpu_mem=([\d.]+) GB", text)
    assert float(final.group(1)) == rows["runtime_margin_gib"] == truth["timeline"][-1]["avail_gib"]
    intervals = {i["name"]: i["residual_gib"] for i in truth["intervals"]}
    assert sum(intervals.values()) == pytest.approx(rows["workspace_residual_gib"], abs=1e-9)
    assert rows["usable_gib"] == 177.7
    assert rows["fixed_overhead_gib"] + rows["state_pools_gib"] == pytest.approx(177.7, abs=1e-9)
    study = {
        "dp16": dict(
            load_peak_gib=145.2,
            released_after_load_gib=47.7,
            cuda_graph_largest_bucket_gib=7.19,
            cuda_graph_static_gib=0.17,
            request_slots=33,
            mla_kv_gib=41.1,
            kda_state_gib=16.16,
        ),
        "dp2dcp8": dict(
            load_peak_gib=109.9,
            released_after_load_gib=14.6,
            cuda_graph_largest_bucket_gib=10.24,
            cuda_graph_static_gib=1.33,
            request_slots=209,
            mla_kv_gib=34.6,
        ),
    }[name]
    for k, v in study.items():
        assert rows[k] == v, k
    cap = "627048448" if name == "dp16" else "183500800"
    assert f"FlatAGStagingPool: capacity={cap} bytes" in text
    assert ("total=1196.0 MiB" in text) == (name == "dp16") and ("total=350.0 MiB" in text) == (name != "dp16")
    assert f"mem_fraction_static={0.88 if name == 'dp16' else 0.83}" in text
    assert ("draft hoisted 1/5 layer AG(s)" in text) == (name == "dp16")
    assert ("0 weight-sharded layers" in text) == (name != "dp16")
    assert text.count("All Reduce config: symmetric_memory = 28.01 MB") == (0 if name == "dp16" else 2)
    assert "DSpark SWA draft: reclaimed " + ("16.37" if name == "dp16" else "1.11") + " GB" in text
    # study: instance capacity 51.1 M vs 43.0 M tokens; per DP 3.19 M vs 21.5 M
    cap_t = truth["capacity"]
    assert cap_t["tokens_per_instance"] / 1e6 == pytest.approx(51.1 if name == "dp16" else 43.0, abs=0.05)
    assert cap_t["tokens_per_dp"] / 1e6 == pytest.approx(3.19 if name == "dp16" else 21.5, abs=0.05)


def test_launch_log_pair_differences():
    a = json.loads((FIXTURE_DIR / "dp16.launch.log.truth.json").read_text())["rows"]
    b = json.loads((FIXTURE_DIR / "dp2dcp8.launch.log.truth.json").read_text())["rows"]
    # study: DP16's fixed overhead is 10.4 GiB smaller; CUDA graph 5.9 less; runtime margin 4.0 less;
    # weights resident 2.2 more; NCCL init 0.65 less; workspace residuals 2.97 less
    assert b["fixed_overhead_gib"] - a["fixed_overhead_gib"] == pytest.approx(10.4, abs=0.05)
    assert b["cuda_graph_gib"] - a["cuda_graph_gib"] == pytest.approx(5.9, abs=0.05)
    assert b["runtime_margin_gib"] - a["runtime_margin_gib"] == pytest.approx(4.0, abs=0.06)
    assert a["weights_resident_gib"] - b["weights_resident_gib"] == pytest.approx(2.2, abs=0.05)
    assert b["nccl_init_gib"] - a["nccl_init_gib"] == pytest.approx(0.65, abs=0.01)
    assert b["workspace_residual_gib"] - a["workspace_residual_gib"] == pytest.approx(2.97, abs=0.02)
    assert a["req_to_token_gib"] == pytest.approx(0.13, abs=0.005) and b["req_to_token_gib"] == pytest.approx(
        0.82, abs=0.005
    )
