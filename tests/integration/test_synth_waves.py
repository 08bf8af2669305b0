"""waves, waves calc, roofline, hbm and hw end to end on the synthetic DP16 bs 16 deployment (fixtures/synth.py).

The trace is generated into a temporary directory (the committed fixtures hold bs 4 and 24 only); its
truth file gives the per-step MLA decode time, KDA state count and AllGather bytes the answers must match.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures.synth import build, write_trace  # noqa: E402

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

MLA = "tokenspeed_mla::sm100::mla_decode_fp8_kernel"


@pytest.fixture(scope="module")
def dp16_bs16(tmp_path_factory):
    trace, truth = build("dp16", 16, steps=3, seed=0, noise=False, step_marker="run_batch")
    path = tmp_path_factory.mktemp("synth") / "dp16_bs16.trace.json.gz"
    write_trace(path, trace)
    return path, truth


def run_json(cli, *args):
    code, out, err = cli(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_waves_counts_ctas_per_sm_from_the_synthetic_launch_configuration(cli, dp16_bs16):
    """The generator's MLA decode kernel is timed as one CTA per SM, and its launch record says so: 256 threads and
    200 KiB of shared memory per block (fixtures/synthlib/schedule.py ONE_CTA_SMEM), so on sm100 shared memory
    allows 233,472 // (204,800 + 1,024 reserved) = 1 CTA per SM: its 160 CTAs run in 2 waves of 148 slots."""
    path, _ = dp16_bs16
    doc = run_json(cli, "waves", path)
    mla = next(r for r in doc["tables"]["per_kernel"] if MLA in r["name"])
    assert (mla["ctas"], mla["ctas_per_sm"], mla["limited_by"], mla["capacity"], mla["waves"]) == (
        160,
        1,
        "shared_memory",
        148,
        2,
    )
    assert mla["ctas_per_sm_from"] == "launch configuration"
    occ = doc["summary"]["occupancy"]
    assert occ["sm_limits"]["compute_capability"] == "10.0" and occ["assumed"] is False


def test_waves_ranks_the_mla_decode_kernel_first(cli, dp16_bs16):
    path, truth = dp16_bs16
    # the study's MLA decode kernel: 1 CTA per SM (the launch configuration says so; the option agrees)
    doc = run_json(cli, "waves", path, "--ctas-per-sm", "1")
    assert doc["schema"] == "tracekit.waves/1"
    rows = doc["tables"]["per_kernel"]
    assert list(rows[0])[:6] == ["name", "count", "ctas", "waves", "wave_efficiency", "lost_ns"]
    top = rows[0]
    assert MLA in top["name"]
    assert (top["ctas"], top["waves"], top["count"]) == (160, 2, 24 * 3)
    assert top["wave_efficiency"] == pytest.approx(160 / 296, abs=1e-4)
    assert doc["summary"]["sms"] == 148 and doc["summary"]["sms_from"] == "trace deviceProperties"
    # lost per step = the step's MLA decode time x (1 − 160/296): the study's ~13.7 ms over 24 layers
    mla_ns = [s["ops"]["mla_decode"]["total_ns"] for s in truth["steps"]]
    want = sum(mla_ns) / len(mla_ns) * (1 - 160 / 296)
    assert top["lost_per_step_ns"] == pytest.approx(want, rel=1e-4)
    assert top["lost_per_step_ns"] / 1e6 == pytest.approx(13.7, abs=0.2)
    assert all(r["lost_ns"] <= top["lost_ns"] for r in rows)


def test_waves_default_subcommand_is_trace(cli, dp16_bs16):
    path, _ = dp16_bs16
    a = run_json(cli, "waves", path, "--top", "3")
    b = run_json(cli, "waves", "trace", path, "--top", "3")
    assert a["tables"] == b["tables"] and len(a["tables"]["per_kernel"]) == 3
    code, out, _ = cli("waves", "--help")
    assert code == 0 and "calc" in out and "trace" in out


def test_waves_calc_cli_reproduces_the_study(cli):
    doc = run_json(
        cli, "waves", "calc", "--batch", "16", "--qlen", "5", "--sms", "148", "--time-us", "1240", "--layers", "24"
    )
    s = doc["summary"]
    assert doc["schema"] == "tracekit.waves_calc/1"
    assert (s["ctas"], s["waves"]) == (160, 2)
    assert s["est_time_us"] == pytest.approx(670, abs=1) and s["saving_ms_per_step"] == pytest.approx(13.7, abs=0.05)
    s = run_json(cli, "waves", "calc", "--grid", "2,640,1", "--hw", "b200")["summary"]
    assert s["ctas"] == 1280 and s["waves_exact"] == pytest.approx(8.6, abs=0.05)
    code, _, err = cli("waves", "calc", "--grid", "2,640")
    assert code == 2 and "--grid" in err
    code, _, err = cli("waves", "calc", "--grid", "2,640,1")
    assert code == 3 and "--sms" in err


def test_roofline_on_the_synthetic_trace(cli, dp16_bs16):
    path, _ = dp16_bs16
    doc = run_json(cli, "roofline", path, "-a", "k3_dp16", "--bs", "16", "--hbm-gbps", "bus")
    rows = {r["op_tag"]: r for r in doc["tables"]["per_tag"]}
    assert list(doc["tables"]["per_tag"][0])[:7] == ["op_tag", "mean_ns", "bytes", "flops", "mbu", "mfu", "bound"]
    qkv = rows["kda_qkv_proj"]
    assert (qkv["m"], qkv["n"], qkv["k"], qkv["count"]) == (80, 36864, 7168, 69 * 3)
    assert qkv["mean_ns"] == pytest.approx(67_200, rel=0.01)  # the synthetic kernel runs the study's 67.2 µs
    assert qkv["mbu"] == pytest.approx(0.52, abs=0.01) and qkv["bound"] == "memory"  # the study's 52 %
    assert rows["kda_state"]["bytes"] == 2 * 16 * 96 * 65536
    assert doc["summary"]["hw"] == "b200" and doc["summary"]["hbm_gbps"] == 7672  # detected, bus peak
    datasheet = run_json(cli, "roofline", path, "-a", "k3_dp16", "--bs", "16", "--hw", "b200")
    assert datasheet["tables"]["per_tag"][1]["mbu"] < qkv["mbu"]


def test_hbm_table_on_the_synthetic_trace(cli, dp16_bs16):
    path, truth = dp16_bs16
    doc = run_json(cli, "hbm", path, "-a", "k3_dp16", "--bs", "16")
    rows = {r["row"]: r for r in doc["tables"]["per_row"]}
    assert rows["KDA state"]["bytes"] == 69 * 2 * 16 * 96 * 65536
    assert rows["MLA KV"]["bytes"] == 24 * 16 * 100_000 * 576
    assert rows["sharded weights"]["bytes"] == truth["steps"][0]["allgather"]["full_bytes"] == 55_325_712_384
    assert rows["routed experts"]["rule"] == "tags×mbu" and rows["routed experts"]["bytes"] > 0
    assert doc["summary"]["total_bytes_per_step"] == sum(r["bytes"] for r in rows.values())
    ctx = run_json(cli, "hbm", path, "-a", "k3_dp16", "--bs", "16", "--var", "context=200000")
    assert {r["row"]: r for r in ctx["tables"]["per_row"]}["MLA KV"]["bytes"] == 2 * rows["MLA KV"]["bytes"]


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "md"])
@pytest.mark.parametrize(
    "args",
    [
        ("waves", "{t}"),
        ("waves", "calc", "--grid", "2,80,1", "--sms", "148"),
        ("roofline", "{t}", "-a", "k3_dp16", "--bs", "16"),
        ("hbm", "{t}", "-a", "k3_dp16", "--bs", "16"),
        ("hw",),
    ],
)
def test_every_format(cli, dp16_bs16, args, fmt):
    code, out, err = cli(*[a.format(t=dp16_bs16[0]) for a in args], "--format", fmt)
    assert code == 0, err
    assert out.strip()
    if fmt == "csv":
        assert len(list(csv.reader(io.StringIO(out)))) >= 2
    if fmt == "md":
        assert "| --- |" in out


def test_hw_lists_profiles_and_roofline_without_shapes_exits_4(cli):
    doc = run_json(cli, "hw")
    assert {r["name"] for r in doc["tables"]["profiles"]} >= {"b200", "h100", "mi300x"}
    assert run_json(cli, "hw", "mi355x")["tables"]["profiles"][0]["sms"] == 256
    code, _, err = cli("roofline")  # the bundled sample's annotation has no shapes
    assert code == 4 and "op_shapes" in err
    code, _, err = cli("roofline", "-a", "k3_dp16", "--hw", "tpu")
    assert code == 3 and "b200" in err
