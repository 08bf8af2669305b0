"""`tracekit log / ledger / capacity` end to end: the synthetic K3 launch logs against their truth and the
study's numbers, the JSON contract, exit codes, and every real log of ../shared/corpus/sglang_logs against what
its SOURCE.md says a correct parser reads (skipped when the shared corpus is absent)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tracekit.analyses.memory.capacity import ModelDims, capacity
from tracekit.analyses.memory.launch_log import ledger
from tracekit.ingest.sglang_log import rank_label, read_log

REPO = Path(__file__).resolve().parents[2]
SYNTH = REPO / "fixtures" / "synthetic"
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "sglang_logs"
NO_CORPUS = (
    f"the shared sglang log corpus is not present ({CORPUS} holds no *.log); these tests need "
    "../shared/corpus/sglang_logs next to the repository"
)
ENVELOPE = {"tracekit", "schema", "command", "inputs", "params", "warnings", "summary", "tables"}

# truth row name → ledger row name (the ledger's names are generic; the K3 fork's pools keep sglang's words)
ROW_NAMES = {"kda_state_gib": "ssm_state_gib", "replay_ssm_gib": "replay_ssm_ring_gib", "mla_kv_gib": "kv_gib"}
BYTE_ROWS = {
    "ag_staging_target_bytes": ("ag_staging_pool", "target"),
    "ag_staging_draft_bytes": ("ag_staging_pool", "draft"),
}


def _truth(name: str) -> dict:
    return json.loads((SYNTH / f"{name}.launch.log.truth.json").read_text())


def _ledger(name: str):
    return ledger(read_log(SYNTH / f"{name}.launch.log"))


# --------------------------------------------------------------------------- synthetic K3 logs vs their truth


@pytest.mark.parametrize("name", ["dp16", "dp2dcp8"])
def test_synthetic_ledger_equals_truth(name):
    truth, res = _truth(name), _ledger(name)
    s = res.summary
    assert s["rank"] == truth["rank_prefix"] and s["complete"] and s["unrecognised"] == 0
    assert s["unaccounted_gib"] == 0.0 and not s["missing_rows"]
    timeline = [(t["stage"], t["avail_gib"]) for t in res.tables["timeline"].to_dict("records")]
    assert timeline[-1] == ("scheduler_ready", truth["rows"]["runtime_margin_gib"])
    assert timeline[:-1] == [(t["stage"], t["avail_gib"]) for t in truth["timeline"]]
    ivs = {(i["avail_before_gib"], i["avail_after_gib"]): i for i in res.tables["intervals"].to_dict("records")}
    for t in truth["intervals"]:
        mine = ivs[(t["avail_before_gib"], t["avail_after_gib"])]
        assert mine["type"] == "residual"
        for k in ("fall_gib", "logged_gib", "residual_gib"):
            assert mine[k] == pytest.approx(t[k], abs=1e-9), (t["name"], k)
    for row, want in truth["rows"].items():
        if row in BYTE_ROWS:
            what, role = BYTE_ROWS[row]
            got = [a for a in res.tables["allocations"].to_dict("records") if a["what"] == what and a["role"] == role]
            assert round(sum(a["mib"] for a in got) * 2**20) == want, row
            continue
        got = s[ROW_NAMES.get(row, row)]
        assert got == pytest.approx(want, abs=5e-5), row
    allocs = [(a["what"], a["mib"], a["counted_in"]) for a in res.tables["allocations"].to_dict("records")]
    want_allocs = {"ag_staging_pool_target", "ag_staging_pool_draft"}
    for t in truth["allocations"]:
        if t["what"] in want_allocs or t["what"].startswith("all_reduce"):
            assert any(m == pytest.approx(t["mib"]) for _, m, _ in allocs), t
    cap = capacity(log=read_log(SYNTH / f"{name}.launch.log")).summary
    tc = truth["capacity"]
    assert (cap["bytes_per_token"], cap["tokens_per_rank"], cap["tokens_per_dp"], cap["tokens_per_instance"]) == (
        tc["bytes_per_token"],
        tc["kv_tokens_per_rank"],
        tc["tokens_per_dp"],
        tc["tokens_per_instance"],
    )


def test_the_study_numbers():
    res = ledger(read_log(SYNTH / "dp16.launch.log"), read_log(SYNTH / "dp2dcp8.launch.log"))
    a, b, diff = res.summary["a"], res.summary["b"], res.summary["diff"]
    assert diff["fixed_overhead_gib"] == pytest.approx(10.4, abs=0.05)  # DP16's fixed overhead is 10.4 GiB smaller
    assert (a["load_peak_gib"], b["load_peak_gib"]) == (145.2, 109.9)
    assert (a["released_after_load_gib"], b["released_after_load_gib"]) == (47.7, 14.6)
    assert (a["cuda_graph_largest_bucket_gib"], b["cuda_graph_largest_bucket_gib"]) == (7.19, 10.24)
    assert diff["cuda_graph_gib"] == pytest.approx(5.9) and diff["runtime_margin_gib"] == pytest.approx(3.96)
    assert diff["weights_resident_gib"] == pytest.approx(-2.2) and diff["nccl_init_gib"] == pytest.approx(0.65)
    assert (a["request_slots"], b["request_slots"]) == (33, 209)
    assert round(a["req_to_token_gib"], 2) == 0.13 and round(b["req_to_token_gib"], 2) == 0.82
    staging = {
        (r["log"], r["role"]): r["mib"]
        for r in res.tables["allocations"].to_dict("records")
        if r["what"] == "ag_staging_pool"
    }
    assert (staging[("a", "target")], staging[("b", "target")], staging[("a", "draft")]) == (1196.0, 350.0, 1288.0)
    assert (a["kv_gib"], b["kv_gib"]) == (41.1, 34.6)
    rows = {r["row"]: r for r in res.tables["rows"].to_dict("records")}
    assert rows["fixed_overhead_gib"]["value_a"] == 113.98 and rows["fixed_overhead_gib"]["value_b"] == 124.39
    assert rows["fixed_overhead_gib"]["diff"] == pytest.approx(10.41)


@pytest.mark.parametrize("pool, dcp, per_dp_m, instance_m", [(41.1, 1, 3.19, 51.1), (34.6, 8, 21.5, 43.0)])
def test_study_capacity_from_dimensions(pool, dcp, per_dp_m, instance_m):
    s = capacity(
        dims=ModelDims(layers=24, kv_lora_rank=512, rope_dim=64),
        kv_dtype="fp8",
        pool_gib=pool,
        ranks=16,
        dcp=dcp,
        context=100_000,
    ).summary
    assert s["bytes_per_token"] == 13824
    assert round(s["tokens_per_dp"] / 1e6, 2 if per_dp_m < 10 else 1) == per_dp_m
    assert round(s["tokens_per_instance"] / 1e6, 1) == instance_m


# --------------------------------------------------------------------------- the CLI and its JSON contract


def test_log_json_contract(cli):
    code, out, err = cli("log", SYNTH / "dp16.launch.log", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == ENVELOPE and doc["schema"] == "tracekit.log/1" and doc["command"] == "log"
    assert doc["summary"]["complete"] is True and doc["summary"]["records"] == len(doc["tables"]["records"])
    rows = doc["tables"]["records"]
    assert all(list(r)[:3] == ["line", "ranks", "kind"] and "fields" not in r for r in rows)
    kv = [r for r in rows if r["kind"] == "kv_alloc"]
    assert kv[0] == {
        "line": 23,
        "ranks": {"DP": 0, "TP": 0, "EP": 0},
        "kind": "kv_alloc",
        "dtype": "torch.float8_e4m3fn",
        "tokens": 3192320,
        "kv_gib": 41.1,
    }
    progress = [r for r in rows if r["kind"] == "graph_progress"]
    assert progress[0] == {"line": 33, "ranks": {}, "kind": "graph_progress", "bs": 24, "avail_gib": 11.96}
    args = next(r for r in rows if r["kind"] == "server_args")["args"]
    assert args["mem_fraction_static"] == 0.88 and args["cuda_graph_bs"] == [1, 2, 4, 8, 16, 24]
    kinds = {r["kind"] for r in rows}
    assert {
        "ag_staging_pool",
        "requant_then_shard",
        "swa_draft_reclaimed",
        "swa_draft_slot_map",
        "draft_hoisted_ag",
        "weight_sharded_layers",
        "weight_shard_release",
        "replay_ssm_ring",
    } <= kinds


def test_log_rank_and_kind_filters(cli):
    code, out, _ = cli("log", SYNTH / "dp16.launch.log", "--rank", "DP1", "--kind", "kv_alloc", "-f", "json")
    rows = json.loads(out)["tables"]["records"]
    assert code == 0 and [(r["line"], r["tokens"]) for r in rows] == [(24, 3192256)]


def test_ledger_two_logs_json(cli):
    code, out, err = cli("ledger", SYNTH / "dp16.launch.log", SYNTH / "dp2dcp8.launch.log", "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "tracekit.ledger/1" and [i["rank"] for i in doc["inputs"]] == ["DP0 TP0 EP0"] * 2
    assert set(doc["tables"]) == {
        "rows",
        "timeline",
        "intervals",
        "allocations",
        "graph_buckets",
        "skew",
        "unrecognised",
    }
    row = next(r for r in doc["tables"]["rows"] if r["row"] == "request_slots")
    assert row == {
        "row": "request_slots",
        "value_a": 33,
        "value_b": 209,
        "diff": 176,
        "lines_a": [1, 42],
        "lines_b": [1, 58],
        "note": row["note"],
    }
    assert doc["summary"]["logs"] == 2 and doc["summary"]["diff"]["request_slots"] == 176


def test_capacity_json(cli):
    code, out, err = cli(
        "capacity",
        "--layers",
        "24",
        "--kv-lora-rank",
        "512",
        "--rope-dim",
        "64",
        "--kv-dtype",
        "fp8",
        "--pool-gib",
        "34.6",
        "--ranks",
        "16",
        "--dcp",
        "8",
        "--context",
        "100k",
        "-f",
        "json",
    )
    assert code == 0, err
    doc = json.loads(out)
    s = doc["summary"]
    assert doc["schema"] == "tracekit.capacity/1"
    assert {"bytes_per_token", "tokens_per_rank", "tokens_per_dp", "tokens_per_instance"} <= set(s)
    assert s["max_concurrency_per_dp"] == s["tokens_per_dp"] // 100_000 and s["dp"] == 2
    assert [lv["level"] for lv in doc["tables"]["levels"]] == ["rank", "dp_group", "instance"]


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "md"])
@pytest.mark.parametrize(
    "args",
    [
        ("log", SYNTH / "dp2dcp8.launch.log"),
        ("ledger", SYNTH / "dp2dcp8.launch.log"),
        ("ledger", SYNTH / "dp16.launch.log", SYNTH / "dp2dcp8.launch.log"),
        ("capacity", "--log", SYNTH / "dp16.launch.log", "--context", "1M"),
    ],
)
def test_every_format(cli, args, fmt):
    code, out, err = cli(*args, "--format", fmt)
    assert code == 0, err
    assert out.strip()
    if fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert len(rows) >= 2
        assert "{'" not in out  # dict and list cells are JSON, not Python reprs
    if fmt == "md":
        assert "| --- |" in out


def test_out_file_and_csv_dir(cli, tmp_path):
    code, _, err = cli("log", SYNTH / "dp16.launch.log", "-f", "json", "-o", tmp_path / "log.json")
    assert code == 0 and "wrote" in err
    assert "fields" not in json.loads((tmp_path / "log.json").read_text())["tables"]["records"][0]
    code, _, _ = cli("ledger", SYNTH / "dp16.launch.log", "-f", "csv", "-o", tmp_path / "csv")
    assert code == 0 and (tmp_path / "csv" / "ledger.rows.csv").exists()


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (("ledger", "/nonexistent/x.log"), 3, "does not exist"),
        (("ledger", REPO / "README.md"), 4, "holds no sglang launch-log line"),
        (("ledger", SYNTH / "dp16.launch.log", "--rank", "TP7"), 4, "ranks present: DP0 TP0 EP0, DP1 TP1 EP1"),
        (("ledger", SYNTH / "dp16.launch.log", "--rank", "x"), 2, "is not a rank"),
        (("capacity",), 2, "pass --log LOG"),
        (("capacity", "--pool-gib", "4", "--layers", "2"), 2, "--kv-lora-rank"),
        (
            ("capacity", "--pool-gib", "4", "--layers", "2", "--kv-heads", "1", "--head-dim", "8", "--context", "lots"),
            2,
            "not a token count",
        ),
        (("log", SYNTH / "dp16.launch.log", "--patterns", "/nonexistent/p.json"), 3, "does not exist"),
    ],
)
def test_errors_are_one_sentence_with_an_exit_code(cli, args, code, needle):
    got, out, err = cli(*args)
    assert got == code and needle in err and "Traceback" not in err and out == ""
    assert len(err.strip().splitlines()) == 1


def test_incomplete_launch_reports_what_was_read(cli, tmp_path):
    text = (SYNTH / "dp16.launch.log").read_text().splitlines()
    cut = tmp_path / "cut.log"
    cut.write_text("\n".join(text[:35]) + "\nCapturing batches (bs=4 avail_m")
    code, out, err = cli("ledger", cut, "-f", "json")
    doc = json.loads(out)
    assert code == 0 and doc["summary"]["complete"] is False
    assert "capture of the target graph began at line 31" in doc["summary"]["incomplete_reason"]
    assert doc["summary"]["load_peak_gib"] == 145.2 and "fixed_overhead_gib" in doc["summary"]["missing_rows"]
    assert "incomplete" in err and [u["line"] for u in doc["tables"]["unrecognised"]] == [36]


# --------------------------------------------------------------------------- the real corpus (SOURCE.md)

E = {}  # expected records per corpus file: (line, rank label, kind, fields)
E["02_qwen3-14b_tp1_noranktag_2025-05.log"] = [
    (
        1,
        "untagged",
        "weight_end",
        {"model": "Qwen3ForCausalLM", "dtype": "torch.bfloat16", "avail_gib": 19.67, "usage_gib": 27.57},
    ),
    (2, "untagged", "kv_alloc", {"tokens": 91749, "k_gib": 7.0, "v_gib": 7.0}),
    (3, "untagged", "pool_end", {"avail_gib": 5.27}),
    (4, "untagged", "graph_begin", {"device": "cuda", "avail_gib": 4.64, "graph": "target"}),
    (5, "untagged", "graph_sizes", {"graph": "target", "bs": [1, 2, 4, 8] + list(range(16, 161, 8))}),
]
E["05_b200_tp1_piecewise_2025-11.log"] = [
    (1, "untagged", "kv_dtype", {"dtype": "torch.bfloat16"}),
    (2, "untagged", "kv_alloc", {"tokens": 2243474, "k_gib": 59.91, "v_gib": 59.91}),
    (3, "untagged", "pool_end", {"avail_gib": 40.03}),
    (5, "untagged", "graph_begin", {"device": "cuda", "avail_gib": 39.48, "graph": "target"}),
    (
        6,
        "untagged",
        "graph_sizes",
        {"graph": "target", "bs": [1, 2, 4, 8, 12, 16, 24] + list(range(32, 257, 8)) + list(range(272, 513, 16))},
    ),
    (7, "untagged", "graph_progress", {"bs": 1, "avail_gib": 38.07}),
    (
        8,
        "untagged",
        "graph_end",
        {"device": "cuda", "elapsed_s": 5.37, "usage_gib": 1.44, "avail_gib": 38.05, "graph": "target"},
    ),
    (9, "untagged", "graph_sizes", {"graph": "piecewise", "truncated": True}),  # cut mid-list: no sizes read
]
_07_BS = [1, 2, 4, 8, 12, 16, 24] + list(range(32, 257, 8)) + list(range(272, 513, 16))
E["07_qwen3-omni_tp4_2025-12.log"] = [
    (1, "TP2", "kv_alloc", {"tokens": 2090351, "k_gib": 23.92, "v_gib": 23.92}),
    (2, "TP1", "kv_alloc", {"tokens": 2090351, "k_gib": 23.92, "v_gib": 23.92}),
    (3, "TP3", "pool_end", {"avail_gib": 12.68}),
    (4, "TP2", "pool_end", {"avail_gib": 12.45}),
    (5, "TP1", "pool_end", {"avail_gib": 12.45}),
    (6, "TP2", "graph_begin", {"device": "cuda", "avail_gib": 11.87, "graph": "target"}),
    (7, "TP3", "graph_begin", {"device": "cuda", "avail_gib": 12.11, "graph": "target"}),
    (8, "TP0", "graph_begin", {"device": "cuda", "avail_gib": 11.92, "graph": "target"}),
    (9, "TP0", "graph_sizes", {"graph": "target", "bs": _07_BS}),
    (10, "TP1", "graph_begin", {"device": "cuda", "avail_gib": 11.87, "graph": "target"}),
    (11, "untagged", "graph_progress", {"bs": 512, "avail_gib": 11.47}),
]
E["11_qwen3_pp2-tp2_musa_2026-01.log"] = [
    (1, "PP1 TP0", "weight_begin", {"avail_gib": 78.38}),
    (
        13,
        "PP1 TP1",
        "weight_end",
        {
            "elapsed_s": 6.21,
            "model": "Qwen3ForCausalLM",
            "dtype": "torch.bfloat16",
            "avail_gib": 76.05,
            "usage_gib": 2.33,
        },
    ),
]
_W13 = {"model": "Qwen3MoeForCausalLM", "usage_gib": 16.39}
_KV13 = {"tokens": 1029388, "k_gib": 47.12, "v_gib": 47.12}
E["13_qwen3-moe_dp4-tp4-ep4_runA_2026-05.log"] = [
    (1, "DP1 TP1 EP1", "weight_end", {"elapsed_s": 5.05, "avail_gib": 121.9, **_W13}),
    (5, "DP0 TP0 EP0", "weight_end", {"elapsed_s": 5.19, "avail_gib": 121.95, **_W13}),
    (6, "DP3 TP3 EP3", "weight_end", {"elapsed_s": 5.37, "avail_gib": 122.14, **_W13}),
    (7, "DP2 TP2 EP2", "weight_end", {"elapsed_s": 5.11, "avail_gib": 121.9, **_W13}),
    (8, "DP0 TP0 EP0", "kv_dtype", {"dtype": "torch.bfloat16"}),
    (9, "DP0 TP0 EP0", "kv_alloc", _KV13),
    (10, "DP0 TP0 EP0", "pool_end", {"avail_gib": 27.62}),
    (11, "DP2 TP2 EP2", "kv_alloc", _KV13),
    (12, "DP2 TP2 EP2", "pool_end", {"avail_gib": 27.57}),
    (13, "DP1 TP1 EP1", "kv_alloc", _KV13),
]
UNRECOGNISED = {"13_qwen3-moe_dp4-tp4-ep4_runA_2026-05.log": [(14, "DP1 TP1 EP1", "Memory pool end. a")]}


def _corpus_files() -> list[str]:
    return sorted(p.name for p in CORPUS.glob("*.log")) if CORPUS.is_dir() else []


def test_every_corpus_log_has_an_expectation():
    files = _corpus_files()
    if not files:
        pytest.skip(NO_CORPUS)
    assert set(files) == set(E), "a corpus log without an expectation here, or the other way round"


@pytest.mark.parametrize("name", sorted(E))
def test_corpus_log_yields_exactly_what_source_md_lists(name):
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(NO_CORPUS)
    log = read_log(path)
    got = [(r.line, rank_label(r.ranks), r.kind, r.fields) for r in log.records]
    assert got == E[name]
    assert [(ln, rank_label(rk), text) for ln, rk, text in log.unrecognised] == UNRECOGNISED.get(name, [])
    res = ledger(log)
    assert res.summary["complete"] is False  # every pasted log stops before the scheduler summary
    assert any("incomplete" in w for w in res.warnings)


def _corpus(name: str):
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(NO_CORPUS)
    return read_log(path)


def test_corpus_02_kv_check_and_no_derived_claims():
    log = _corpus("02_qwen3-14b_tp1_noranktag_2025-05.log")
    s = ledger(log).summary
    assert s["rank"] == "untagged" and "began at line 4" in s["incomplete_reason"]
    assert (s["load_peak_gib"], s["kv_gib"], s["kv_tokens"]) == (27.57, 14.0, 91749)
    assert "usable_gib" in s["missing_rows"] and "nccl_init_gib" in s["missing_rows"]  # pre-load 47.24 is derived
    assert not any(r.kind == "weight_begin" for r in log.records)
    cap = capacity(log=log, dims=ModelDims(layers=40, kv_heads=8, head_dim=128), kv_dtype="bf16").summary
    assert cap["bytes_per_token"] == 2 * 81920 and round(91749 * 81920 / 2**30, 2) == 7.00


def test_corpus_05_graph_memory():
    s = ledger(_corpus("05_b200_tp1_piecewise_2025-11.log")).summary
    assert (s["cuda_graph_target_gib"], s["runtime_margin_gib"], s["kv_gib"]) == (1.44, 38.05, 119.82)
    assert "cuda_graph_piecewise_gib" not in s and "cuda_graph_largest_bucket_gib" not in s  # only the final bar


def test_corpus_07_rank_skew():
    res = ledger(_corpus("07_qwen3-omni_tp4_2025-12.log"))
    skew = {r["metric"]: r for r in res.tables["skew"].to_dict("records")}
    assert skew["capture_begin.avail_gib"]["ranks"] == 4 and skew["capture_begin.avail_gib"]["skew"] == 0.24
    assert skew["target_memory_pool_end.avail_gib"]["max_rank"] == "TP3"
    assert res.summary["rank"] == "TP0" and res.summary["cuda_graph_static_gib"] == 0.45
    assert round(2090351 * 12288 / 2**30, 2) == 23.92
    assert ledger(_corpus("07_qwen3-omni_tp4_2025-12.log"), rank="TP1").summary["kv_gib"] == 47.84


def test_corpus_11_pp_tags():
    log = _corpus("11_qwen3_pp2-tp2_musa_2026-01.log")
    assert [rank_label(r) for r in log.ranks_present()] == ["PP1 TP0", "PP1 TP1"]
    assert ledger(log, rank="PP1 TP1").summary["load_peak_gib"] == 2.33


def test_corpus_13_glued_line_and_skew():
    res = ledger(_corpus("13_qwen3-moe_dp4-tp4-ep4_runA_2026-05.log"))
    skew = {r["metric"]: r for r in res.tables["skew"].to_dict("records")}
    w = skew["load_weight_end.avail_gib"]
    assert (w["ranks"], w["min"], w["max"], w["skew"], w["max_rank"]) == (4, 121.9, 122.14, 0.24, "DP3 TP3 EP3")
    assert skew["load_peak_gib"]["skew"] == 0.0
    assert res.summary["workspace_residual_gib"] == pytest.approx(121.95 - 27.62 - 94.24)
    assert [u["line"] for u in res.tables["unrecognised"].to_dict("records")] == [14]
