"""`tracekit whatif`: each replay rule on the synthetic K3 launch logs, with the expected numbers computed here from
the log's own printed figures (regular expressions over the text, not tracekit's ledger), and the refusals."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tracekit.analyses.memory.ledger_engine import OptionError
from tracekit.analyses.memory.whatif import whatif
from tracekit.errors import MissingDataError
from tracekit.ingest.sglang_log import parse_text, read_log

SYN = Path(__file__).resolve().parents[1] / "fixtures" / "synthetic"
GIB = 2**30


def _text(name: str) -> str:
    return (SYN / f"{name}.launch.log").read_text()


def _num(pattern: str, text: str) -> float:
    return float(re.search(pattern, text).group(1))


def _facts(name: str) -> dict:
    """The figures the rules start from, read straight from the log text (TP0's lines)."""
    t = _text(name)
    tp0 = "\n".join(ln for ln in t.splitlines() if "DP0 TP0 EP0]" in ln)
    f = {
        "running": int(_num(r"max_running_requests=(\d+), context_len", t)),
        "extra": int(_num(r"disaggregation_decode_extra_slots=(\d+)", t)),
        "context": int(_num(r"context_len=(\d+)", t)),
        "conv": _num(r"conv_state size: ([\d.]+)GB", tp0),
        "ssm": _num(r"ssm_state size: ([\d.]+)GB", tp0),
        "ring": _num(r"ReplaySSM ring is allocated\. slots: \d+, ring_len: \d+, size: ([\d.]+)GB", tp0),
        "kv": _num(r"float8_e4m3fn, #tokens: \d+, KV size: ([\d.]+) GB", tp0),
        "kv_tokens": int(_num(r"float8_e4m3fn, #tokens: (\d+)", tp0)),
        "draft_kv": _num(r"bfloat16, #tokens: \d+, KV size: ([\d.]+) GB", tp0),
        "margin": _num(r"available_gpu_mem=([\d.]+) GB", t),
        "pre_load": _num(r"Load weight begin\. avail mem=([\d.]+) GB", tp0),
        "msf": _num(r"mem_fraction_static=([\d.]+)", t),
        "deepep": _num(r"DeepEP low-latency buffer allocated: .*size=([\d.]+) GB", t),
        "deepep_tokens": int(_num(r"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=(\d+)", t)),
        "draft_tokens": int(_num(r"speculative_num_draft_tokens=(\d+)", t)),
        "dp": int(_num(r"dp_size=(\d+)", t)),
        "dcp": int(_num(r"dcp_size=(\d+)", t)),
    }
    f["slots"] = f["running"] + f["extra"] + 1
    f["bpt"] = round(f["kv"] * GIB / f["kv_tokens"])
    bars = re.findall(r"Capturing batches \(bs=(\d+) avail_mem=([\d.]+) GB\)", t)
    seen = []
    for bs, avail in bars:
        if not seen or seen[-1][0] != int(bs):
            seen.append((int(bs), float(avail)))
    end = _num(r"Capture cuda graph end\..*?avail mem=([\d.]+) GB", t)
    f["bucket_cost"] = {bs: a - (seen[i + 1][1] if i + 1 < len(seen) else end) for i, (bs, a) in enumerate(seen)}
    begin = _num(r"Capture cuda graph begin\..*?avail mem=([\d.]+) GB", tp0)
    f["static"] = begin - seen[0][1]
    return f


def _rows(res) -> dict:
    return {r["item"]: r for r in res.tables["before_after"].to_dict("records")}


@pytest.fixture(scope="module")
def dp16():
    return read_log(SYN / "dp16.launch.log")


@pytest.fixture(scope="module")
def dp2():
    return read_log(SYN / "dp2dcp8.launch.log")


def _tokens(f: dict, kv_delta: float) -> int:
    return math.floor((f["kv_tokens"] * f["bpt"] + kv_delta * GIB) / f["bpt"])


# --------------------------------------------------------------------------- the rules


def test_extra_slots_8_to_2_move_the_per_slot_pools_into_kv(dp16):
    f = _facts("dp16")
    res = whatif(dp16, settings=["disaggregation_decode_extra_slots=2"])
    rows, s = _rows(res), res.summary
    new_slots = f["running"] + 2 + 1
    assert (f["slots"], new_slots) == (33, 27)
    per_slot = (f["conv"] + f["ssm"] + f["ring"]) / f["slots"]
    assert per_slot == pytest.approx(0.64, abs=0.005)  # the study: 0.64 GiB per slot
    to_kv = per_slot * (f["slots"] - new_slots)
    assert to_kv == pytest.approx(3.84, abs=0.01)  # the study: ≈ 3.8 GiB
    assert s["kv_pool_gib_before"] == f["kv"] and s["kv_pool_gib_after"] == pytest.approx(f["kv"] + to_kv, abs=1e-5)
    assert rows["kda_ssm_state"]["after_gib"] == pytest.approx(f["ssm"] * new_slots / f["slots"], abs=1e-5)
    assert all(rows[k]["flows_to"] == "kv_pool" for k in ("kda_conv_state", "kda_ssm_state", "replay_ssm_ring"))
    # outside the static budget: the req_to_token table and the draft SWA KV raise the runtime margin
    r2t = (new_slots - f["slots"]) * f["context"] * 4 / GIB
    draft = f["draft_kv"] * (new_slots - f["slots"]) / f["slots"]
    assert rows["req_to_token"]["delta_gib"] == pytest.approx(r2t, abs=1e-5)
    assert rows["draft_swa_kv"]["delta_gib"] == pytest.approx(draft, abs=1e-5)
    assert s["runtime_margin_gib_after"] == pytest.approx(f["margin"] - r2t - draft, abs=1e-5)
    assert s["tokens_per_rank_before"] == f["kv_tokens"]
    assert s["tokens_per_rank_after"] == _tokens(f, to_kv)
    assert s["tokens_per_instance_after"] == _tokens(f, to_kv) * f["dcp"] * f["dp"]
    cap = {r["level"]: r for r in res.tables["capacity"].to_dict("records")}
    assert cap["instance"]["delta_tokens"] == (_tokens(f, to_kv) - f["kv_tokens"]) * 16
    assert s["changes"]["disaggregation_decode_extra_slots"] == {"before": 8, "after": 2}


def test_max_running_requests_moves_slots_the_same_way(dp2):
    f = _facts("dp2dcp8")
    res = whatif(dp2, settings={"max_running_requests": "160"})
    new_slots = 160 + f["extra"] + 1
    assert res.summary["request_slots_before"] == f["slots"] == 209 and res.summary["request_slots_after"] == new_slots
    to_kv = (f["conv"] + f["ssm"] + f["ring"]) * (f["slots"] - new_slots) / f["slots"]
    assert res.summary["kv_pool_gib_after"] == pytest.approx(f["kv"] + to_kv, abs=1e-5)
    # DCP8: a DP group holds 8 ranks' tokens
    assert res.summary["tokens_per_dp_after"] == _tokens(f, to_kv) * 8


def test_deepep_144_to_120_frees_0_6_gib_into_the_runtime_margin(dp16):
    f = _facts("dp16")
    res = whatif(dp16, settings=["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=120"])
    row = _rows(res)["deepep_ll_buffer"]
    after = f["deepep"] * 120 / f["deepep_tokens"]
    assert (f["deepep"], f["deepep_tokens"]) == (3.5, 144) and after == pytest.approx(2.92, abs=0.005)
    assert row["before_gib"] == 3.5 and row["after_gib"] == pytest.approx(after, abs=1e-5)
    assert row["delta_gib"] == pytest.approx(-0.58, abs=0.01) and row["flows_to"] == "runtime_margin"
    s = res.summary
    assert (
        s["kv_pool_gib_after"] == s["kv_pool_gib_before"]
        and s["tokens_per_instance_after"] == s["tokens_per_instance_before"]
    )
    assert s["runtime_margin_gib_after"] == pytest.approx(f["margin"] + f["deepep"] - after, abs=1e-5)
    # how far mem_fraction_static could rise to move it into the KV pool
    assert s["mem_fraction_static_to_move_margin_gain"] == pytest.approx(
        f["msf"] + (f["deepep"] - after) / f["pre_load"], abs=1e-4
    )
    assert any("mem_fraction_static by 0.0033" in w for w in res.warnings)


def test_deepep_below_the_rows_the_largest_bucket_dispatches_is_refused(dp16):
    with pytest.raises(OptionError, match=r"dispatches 120 rows per rank.*at least 120"):
        whatif(dp16, settings=["deepep_max_dispatch_tokens=100"])


def test_deepep_without_the_buffer_line_needs_the_dimensions():
    text = re.sub(r"\[[^\]]*\] DeepEP low-latency buffer allocated:[^\n]*", "", _text("dp16"))
    assert "DeepEP" not in text and "bs=24 avail_mem" in text
    log = parse_text(text, "nodeepep.log")
    with pytest.raises(MissingDataError, match="--dim hidden_size=N --dim num_experts=N"):
        whatif(log, settings=["deepep_max_dispatch_tokens=120"])
    res = whatif(
        log,
        settings=["deepep_max_dispatch_tokens=120"],
        dims=["hidden_size=7168", "num_experts=448", "num_max_dispatch_tokens_per_rank=144"],
    )
    row = _rows(res)["deepep_ll_buffer"]
    h, e = 7168, 448

    def layout(t):  # DeepEP csrc/config.hpp LowLatencyLayout, written out independently
        d, c = 16 + max(2 * h, h + h // 128 * 4), h // 128 * 4 + 2 * h
        total = 2 * max(t * d, e * t * c) + 2 * max(e * t * d, e * t * c) + 2 * (-(-e * 4 // 128) * 128)
        return (total + 128) // 128 * 128 / GIB

    assert row["basis"] == "estimated" and row["before_gib"] == pytest.approx(layout(144), abs=1e-6)
    assert row["after_gib"] == pytest.approx(layout(120), abs=1e-6) and round(layout(144), 2) == 3.5
    # the tokens per rank come from the log's environment line when --dim does not give them
    res_env = whatif(log, settings=["deepep_max_dispatch_tokens=120"], dims=["hidden_size=7168", "num_experts=448"])
    assert _rows(res_env)["deepep_ll_buffer"]["before_gib"] == pytest.approx(layout(144), abs=1e-6)
    assert res_env.summary["changes"]["deepep_max_dispatch_tokens"]["before"] == 144


def test_mem_fraction_static_moves_the_margin_into_kv_by_the_formula(dp16):
    f = _facts("dp16")
    res = whatif(dp16, settings=["--mem-fraction-static=0.89"])
    moved = f["pre_load"] * (0.89 - f["msf"])  # rest_memory = post-load − pre-load × (1 − msf)
    s = res.summary
    assert s["kv_pool_gib_after"] == pytest.approx(f["kv"] + moved, abs=1e-5)
    assert s["runtime_margin_gib_after"] == pytest.approx(f["margin"] - moved, abs=1e-5)
    assert s["tokens_per_rank_after"] == _tokens(f, moved) and s["total_gpu_memory_gib"] == f["pre_load"]
    lower = whatif(dp16, settings=["mem_fraction_static=0.85"]).summary
    assert lower["runtime_margin_gib_after"] == pytest.approx(f["margin"] + f["pre_load"] * 0.03, abs=1e-5)


def test_dropping_small_buckets_frees_their_measured_cost(dp16):
    f = _facts("dp16")
    res = whatif(dp16, settings=["cuda_graph_bs=[4, 8, 16, 24]"])
    rows = _rows(res)
    freed = f["bucket_cost"][1] + f["bucket_cost"][2]
    assert set(rows) == {"cuda_graph_bucket_bs1", "cuda_graph_bucket_bs2", "kv_pool", "runtime_margin"}
    assert all(rows[k]["basis"] == "measured" for k in rows)
    assert res.summary["runtime_margin_gib_after"] == pytest.approx(f["margin"] + freed, abs=1e-5)


def test_a_new_largest_bucket_is_estimated_with_its_formula(dp16):
    f = _facts("dp16")
    res = whatif(dp16, settings=["cuda_graph_max_bs=16"])
    rows = _rows(res)
    largest = f["bucket_cost"][24]
    est = f["deepep"] + (largest - f["deepep"]) * 16 / 24
    assert rows["cuda_graph_bucket_bs16"]["basis"] == "estimated"
    assert rows["cuda_graph_bucket_bs16"]["after_gib"] == pytest.approx(est, abs=1e-5)
    assert "deepep_gib" in rows["cuda_graph_bucket_bs16"]["formula"]
    freed = largest + f["bucket_cost"][16] - est + f["static"] * (1 - 16 / 24)
    assert res.summary["runtime_margin_gib_after"] == pytest.approx(f["margin"] + freed, abs=1e-5)
    assert rows["runtime_margin"]["basis"] == "estimated"


def test_draft_tokens_scale_the_ring_and_the_conv_window(dp16):
    f = _facts("dp16")
    res = whatif(dp16, settings=["speculative_num_draft_tokens=4"])
    rows = _rows(res)
    n = f["draft_tokens"]
    assert rows["replay_ssm_ring"]["after_gib"] == pytest.approx(f["ring"] * 4 / n, abs=1e-5)
    assert rows["kda_conv_state"]["after_gib"] == pytest.approx(f["conv"] * 4 / n, abs=1e-5)
    assert "kda_ssm_state" not in rows
    assert res.summary["kv_pool_gib_after"] == pytest.approx(f["kv"] + (f["ring"] + f["conv"]) / n, abs=1e-5)
    assert any("one log does not say by how much" in w for w in res.warnings)


def test_two_settings_compose(dp16):
    f = _facts("dp16")
    res = whatif(dp16, settings=["disaggregation_decode_extra_slots=2", "deepep_max_dispatch_tokens=120"])
    one = whatif(dp16, settings=["disaggregation_decode_extra_slots=2"]).summary
    two = whatif(dp16, settings=["deepep_max_dispatch_tokens=120"]).summary
    s = res.summary
    assert s["kv_pool_gib_after"] == one["kv_pool_gib_after"]
    assert s["runtime_margin_delta_gib"] == pytest.approx(
        one["runtime_margin_delta_gib"] + two["runtime_margin_delta_gib"], abs=1e-5
    )
    # slots and draft tokens on the same pool multiply
    both = _rows(whatif(dp16, settings=["disaggregation_decode_extra_slots=2", "speculative_num_draft_tokens=4"]))
    assert both["replay_ssm_ring"]["after_gib"] == pytest.approx(f["ring"] * 27 / 33 * 4 / 5, abs=1e-5)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "settings, match",
    [
        (["tp_size=8"], "cannot model this parameter; it can model max_running_requests"),
        (["disaggregation_decode_extra_slots=-1"], "must be at least 0"),
        (["mem_fraction_static=1.0"], "strictly between 0 and 1"),
        (["mem_fraction_static=0"], "strictly between 0 and 1"),
        (["max_running_requests=0"], "must be at least 1"),
        (["cuda_graph_bs=1,3"], "bs 3 was not captured"),
        (["cuda_graph_max_bs=32"], "above the largest captured bs 24"),
        (["deepep_max_dispatch_tokens=2048"], "at most 1024"),
        (["speculative_num_draft_tokens=two"], "must be an integer"),
        (["mem_fraction_static=0.5"], "the KV pool would be"),
        (["max_running_requests"], "NAME=VALUE"),
        ([], "at least one --set"),
    ],
)
def test_what_the_replay_cannot_model_is_refused_in_one_sentence(dp16, settings, match):
    with pytest.raises(OptionError, match=match) as exc:
        whatif(dp16, settings=settings)
    assert "\n" not in str(exc.value)


def test_cli_refuses_an_unknown_parameter_in_one_line(cli):
    code, out, err = cli("whatif", SYN / "dp16.launch.log", "--set", "tp_size=8")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "tp_size" in err


def test_cli_json_keeps_the_contract(cli):
    code, out, err = cli(
        "whatif",
        SYN / "dp16.launch.log",
        "--set",
        "--disaggregation-decode-extra-slots=2",
        "--set",
        "deepep_max_dispatch_tokens=120",
        "-f",
        "json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["command"] == "whatif"
    row = doc["tables"]["before_after"][0]
    assert list(row)[:5] == ["item", "before_gib", "after_gib", "delta_gib", "rule"]
    assert {
        "kv_pool_gib_before",
        "kv_pool_gib_after",
        "tokens_per_instance_before",
        "tokens_per_instance_after",
    } <= set(doc["summary"])
    assert [r["level"] for r in doc["tables"]["capacity"]] == ["rank", "dp_group", "instance"]
    assert doc["summary"]["kv_pool_gib_after"] == pytest.approx(44.94, abs=1e-6)
