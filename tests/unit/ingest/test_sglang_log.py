"""sglang launch-log parser (patterns as data), the memory ledger and KV capacity on hand-written lines."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analyses.memory.capacity import ModelDims, bytes_per_token, capacity
from tracekit.analyses.memory.launch_log import OptionError, ledger, log_records
from tracekit.errors import DataFileError, InputError, MissingDataError
from tracekit.ingest.sglang_fields import parse_pyargs
from tracekit.ingest.sglang_grammar import grammar_default, load_grammar, parse_pattern_set
from tracekit.ingest.sglang_log import parse_rank_spec, parse_text, rank_label, read_log
from tracekit.render import emit

TS = "[2026-01-30 20:54:50{tags}] "


def line(msg: str, tags: str = "") -> str:
    return TS.format(tags=tags) + msg


def records(text: str):
    return parse_text(text).records


def one(msg: str, tags: str = ""):
    recs = records(line(msg, tags) + "\n")
    assert len(recs) == 1, recs
    return recs[0]


# --------------------------------------------------------------------------- the pattern data


def test_every_builtin_pattern_matches_its_example_and_wins_it():
    g = grammar_default()
    assert {s.name for s in g.sets} >= {
        "sglang",
        "sglang-2024",
        "sglang-2025",
        "sglang-2026",
        "sglang-2026h2",
        "kimi-k3-fork",
    }
    for p in g.patterns:
        recs = records(line(p.example) + "\n")
        assert recs and recs[0].pattern == p.id and recs[0].kind == p.kind, (p.set, p.id, recs)


def test_sets_are_tried_by_priority_and_user_sets_first(tmp_path):
    extra = tmp_path / "mine.json"
    extra.write_text(
        json.dumps(
            {
                "name": "my-fork",
                "priority": -5,
                "patterns": [
                    {
                        "id": "pool",
                        "kind": "my_pool",
                        "contains": "Memory pool end",
                        "regex": r"Memory pool end\. avail mem=(?P<avail_gib>{NUM}) GB",
                        "example": "Memory pool end. avail mem=1.00 GB",
                    }
                ],
            }
        )
    )
    g = load_grammar([extra])
    assert g.sets[0].name == "my-fork"
    prios = [s.priority for s in g.sets[1:]]
    assert prios == sorted(prios, reverse=True)
    assert parse_text(line("Memory pool end. avail mem=3.25 GB"), grammar=g).records[0].kind == "my_pool"


def test_a_user_pattern_file_recognises_a_new_fork_line(tmp_path):
    log = tmp_path / "x.log"
    log.write_text(line("MyPool is allocated. size: 3.50GB, slots: 12", " TP0") + "\n")
    with pytest.raises(MissingDataError):
        read_log(log)
    pat = tmp_path / "pats"
    pat.mkdir()
    (pat / "myfork.json").write_text(
        json.dumps(
            {
                "name": "myfork",
                "patterns": [
                    {
                        "id": "mypool",
                        "kind": "my_pool",
                        "contains": "MyPool is allocated",
                        "regex": r"MyPool is allocated\. size: (?P<size_gib>{NUM}) ?GB, slots: (?P<slots>\d+)",
                        "alloc": {"what": "my_pool", "fields": ["size_gib"], "state_pool": True},
                        "example": "MyPool is allocated. size: 1.00GB, slots: 1",
                    }
                ],
            }
        )
    )
    parsed = read_log(log, patterns=[pat])
    assert [(r.kind, r.fields) for r in parsed.records] == [("my_pool", {"size_gib": 3.5, "slots": 12})]
    assert parsed.set_counts == {"myfork": 1}


@pytest.mark.parametrize(
    "doc, needle",
    [
        ({"patterns": []}, "$.name"),
        ({"name": "x", "patterns": {}}, "$.patterns"),
        (
            {"name": "x", "patterns": [{"kind": "k", "contains": "a", "regex": "(", "example": "a"}]},
            "not a valid regular",
        ),
        ({"name": "x", "patterns": [{"kind": "k", "contains": "a", "regex": "b", "example": "a"}]}, "own example"),
        (
            {
                "name": "x",
                "patterns": [{"kind": "k", "contains": "a", "regex": "a", "example": "a", "types": {"v": "money"}}],
            },
            "types",
        ),
        (
            {
                "name": "x",
                "patterns": [
                    {
                        "kind": "k",
                        "contains": "a",
                        "regex": "a(?P<v>1)",
                        "example": "a1",
                        "alloc": {"what": "w", "fields": ["nope"]},
                    }
                ],
            },
            "alloc.fields",
        ),
        (
            {"name": "x", "patterns": [{"kind": "k", "contains": "a", "regex": "a(?P<line>1)", "example": "a1"}]},
            "reserved",
        ),
        (
            {"name": "x", "patterns": [{"kind": "k", "contains": "a", "regex": "a", "example": "a", "measured": "v"}]},
            "measured",
        ),
        (
            {
                "name": "x",
                "patterns": [
                    {"id": "p", "kind": "k", "contains": "a", "regex": "a", "example": "a"},
                    {"id": "p", "kind": "k", "contains": "a", "regex": "a", "example": "a"},
                ],
            },
            "twice",
        ),
    ],
)
def test_bad_pattern_files_fail_with_the_file_and_json_path(doc, needle):
    with pytest.raises(DataFileError) as exc:
        parse_pattern_set(doc, "my/patterns.json", {"NUM": r"\d+"})
    assert "my/patterns.json" in str(exc.value) and needle in str(exc.value)


def test_user_pattern_file_problems_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_grammar([tmp_path / "none.json"])
    with pytest.raises(InputError, match="no pattern file"):
        load_grammar([tmp_path])
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(DataFileError, match="bad.json is not valid JSON"):
        load_grammar([bad])
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps({"name": "sglang", "patterns": []}))
    with pytest.raises(DataFileError, match="used twice"):
        load_grammar([dup])


# --------------------------------------------------------------------------- the line prefix


@pytest.mark.parametrize(
    "prefix, ranks",
    [
        ("[2024-12-13 01:44:59 TP0] ", {"TP": 0}),
        ("[2025-05-19 01:06:14] ", {}),
        ("[2026-05-07 13:39:14 DP1 TP1 EP1] ", {"DP": 1, "TP": 1, "EP": 1}),
        ("[2026-01-30 20:54:50 PP1 TP0] ", {"PP": 1, "TP": 0}),
        ("[2025-06-01 10:00:00 DP2 TP2 EP2 PP1] ", {"DP": 2, "TP": 2, "EP": 2, "PP": 1}),
        ("[2026-03-01 10:00:00 DP0 ATTN_CP3 MOE_DP1 TP7 EP7] ", {"DP": 0, "ATTN_CP": 3, "MOE_DP": 1, "TP": 7, "EP": 7}),
        ("[2026-03-01 10:00:00.123 TP3] ", {"TP": 3}),
        ("[2026-02-01 09:00:00] INFO model_runner.py:1565: ", {}),
        ("[2026-02-01 09:00:00 TP1] WARNING model_runner.py:88: ", {"TP": 1}),
        ("[03-01 10:00:00 TP3] ", {"TP": 3}),
    ],
)
def test_prefix_variants(prefix, ranks):
    recs = records(prefix + "Memory pool end. avail mem=12.45 GB\n")
    assert [(r.ranks, r.kind, r.fields) for r in recs] == [(ranks, "pool_end", {"avail_gib": 12.45})]
    assert rank_label(ranks) == (" ".join(f"{k}{v}" for k, v in ranks.items()) or "untagged")


def test_log_line_glued_to_a_tqdm_bar_yields_both():
    text = (
        "Capturing batches (bs=1 avail_mem=4.31 GB): 100%|##########| 6/6 [00:12<00:00,  2.05s/it]"
        "[2026-10-29 20:18:56 DP0 TP0 EP0] Capture cuda graph end. Time elapsed: 12.90 s. mem usage=7.93 GB. "
        "avail mem=4.20 GB.\n"
        "Multi-thread loading shards:  94% Completed | 15/16 [00:04<00:00,  3.89it/s][2026-05-07 13:39:14 DP1 TP1"
        " EP1] Load weight end. elapsed=5.05 s, type=Qwen3MoeForCausalLM, avail mem=121.90 GB, mem usage=16.39 GB.\n"
    )
    recs = records(text)
    assert [(r.line, r.kind, r.ranks) for r in recs] == [
        (1, "graph_progress", {}),
        (1, "graph_end", {"DP": 0, "TP": 0, "EP": 0}),
        (2, "weight_end", {"DP": 1, "TP": 1, "EP": 1}),
    ]
    assert recs[1].fields == {
        "device": "cuda",
        "elapsed_s": 12.9,
        "usage_gib": 7.93,
        "avail_gib": 4.2,
        "graph": "target",
    }


def test_two_log_lines_glued_together():
    text = line("Memory pool end. avail mem=1.50 GB", " TP0") + line("Memory pool end. avail mem=2.50 GB", " TP1")
    recs = records(text + "\n")
    assert [(r.ranks, r.fields["avail_gib"]) for r in recs] == [({"TP": 0}, 1.5), ({"TP": 1}, 2.5)]


def test_crlf_carriage_returns_ansi_and_junk_do_not_break_it():
    text = (
        "\x1b[32m[2025-05-19 01:06:14 TP0]\x1b[0m Memory pool end. avail mem=5.27 GB\r\n"
        "Capturing batches (bs=24 avail_mem=11.96 GB):   0%|\rCapturing batches (bs=16 avail_mem=4.77 GB):  16%|\r\n"
        "\x00\xff\ufffd garbage \x07 [2025-05-19 01:06:15 TP0] Capture cuda graph begin. This can take up to several"
        " minutes. avail mem=4.64 GB\r\n"
    )
    recs = records(text)
    assert [(r.line, r.kind, r.fields.get("avail_gib")) for r in recs] == [
        (1, "pool_end", 5.27),
        (2, "graph_progress", 11.96),
        (2, "graph_progress", 4.77),
        (3, "graph_begin", 4.64),
    ]


def test_binary_file_reads_with_replacement(tmp_path):
    p = tmp_path / "b.log"
    p.write_bytes(
        b"\xff\xfe\x00junk\n"
        + line("KV Cache is allocated. #tokens: 1,234, KV size: 0.50 GB", " TP0").encode()
        + b"\n\x80\x81"
    )
    log = read_log(p)
    assert [(r.kind, r.fields) for r in log.records] == [("kv_alloc", {"tokens": 1234, "kv_gib": 0.5})]
    assert log.last_line_cut and "no line end" in log.warnings[0]


def test_gzip_log(tmp_path):
    p = tmp_path / "x.log.gz"
    p.write_bytes(gzip.compress((line("Memory pool end. avail mem=5.27 GB") + "\n").encode()))
    assert read_log(p).records[0].fields == {"avail_gib": 5.27}


# --------------------------------------------------------------------------- message shapes across eras


@pytest.mark.parametrize(
    "msg, kind, fields",
    [
        ("Init torch distributed ends. mem usage=0.55 GB", "dist_init_end", {"usage_gib": 0.55}),
        (
            "Init torch distributed ends. elapsed=2.41 s, mem usage=1.60 GB",
            "dist_init_end",
            {"elapsed_s": 2.41, "usage_gib": 1.6},
        ),
        (
            "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.47 GB",
            "weight_end",
            {"model": "LlamaForCausalLM", "dtype": "torch.bfloat16", "avail_gib": 62.47},
        ),
        (
            "Load weight end. type=Q, dtype=torch.float16, avail mem=19.67 GB, mem usage=27.57 GB.",
            "weight_end",
            {"model": "Q", "dtype": "torch.float16", "avail_gib": 19.67, "usage_gib": 27.57},
        ),
        (
            "Load weight end. elapsed=6.21 s, type=Q, dtype=torch.bfloat16, avail mem=76.05 GB, mem usage=2.33 GB.",
            "weight_end",
            {"elapsed_s": 6.21, "model": "Q", "dtype": "torch.bfloat16", "avail_gib": 76.05, "usage_gib": 2.33},
        ),
        (
            (
                "Load weight end. elapsed=9.00 s, type=BailingMoeV3ForCausalLM, quant=fp8, fmt=e4m3, avail mem=29.67 GB, "
                "mem usage=80.31 GB."
            ),
            "weight_end",
            {
                "elapsed_s": 9.0,
                "model": "BailingMoeV3ForCausalLM",
                "quant": "fp8",
                "fmt": "e4m3",
                "avail_gib": 29.67,
                "usage_gib": 80.31,
            },
        ),
        (
            (
                "Load weight end. elapsed=9.00 s, type=X, quant=modelopt_fp4, bits=4, quant_algo=NVFP4, avail mem=29.67 GB, "
                "mem usage=80.31 GB."
            ),
            "weight_end",
            {
                "elapsed_s": 9.0,
                "model": "X",
                "quant": "modelopt_fp4",
                "bits": "4",
                "quant_algo": "NVFP4",
                "avail_gib": 29.67,
                "usage_gib": 80.31,
            },
        ),
        (
            "Load weight end. avail mem=29.67 GB, mem usage=80.31 GB.",
            "weight_end",
            {"avail_gib": 29.67, "usage_gib": 80.31},
        ),
        (
            "KV Cache is allocated. #tokens: 91749, K size: 7.00 GB, V size: 7.00 GB",
            "kv_alloc",
            {"tokens": 91749, "k_gib": 7.0, "v_gib": 7.0},
        ),
        (
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1029388, K size: 47.12 GB, V size: 47.12 GB",
            "kv_alloc",
            {"dtype": "torch.bfloat16", "tokens": 1029388, "k_gib": 47.12, "v_gib": 47.12},
        ),
        (
            "KV Cache is allocated. #tokens: 1,029,388, KV size: 72.18 GB",
            "kv_alloc",
            {"tokens": 1029388, "kv_gib": 72.18},
        ),
        (
            "Mamba Cache is allocated. max_mamba_cache_size: 33, conv_state size: 2.35GB, ssm_state size: 13.81GB ",
            "mamba_alloc",
            {"slots": 33, "conv_gib": 2.35, "ssm_gib": 13.81},
        ),
        (
            (
                "Mamba Cache is allocated. max_mamba_cache_size: 8, conv_state size: 0.10GB, ssm_state size: 1.20GB, "
                "intermediate_ssm_state_cache size: 0.50GB, intermediate_conv_window_cache size: 0.05GB"
            ),
            "mamba_alloc",
            {"slots": 8, "conv_gib": 0.1, "ssm_gib": 1.2, "intermediate_ssm_gib": 0.5, "intermediate_conv_gib": 0.05},
        ),
        (
            "Mamba Cache is allocated. conv_state size: 0.15 GB, ssm_state size: 6.30 GB",
            "mamba_alloc",
            {"conv_gib": 0.15, "ssm_gib": 6.3},
        ),
        (
            "SWAKVPool mem usage: 60.12 GB, swa size: 2048000, full size: 409600",
            "swa_pool",
            {"usage_gib": 60.12, "swa_tokens": 2048000, "full_tokens": 409600},
        ),
        ("Capture cuda graph begin. This can take up to several minutes.", "graph_begin", {"graph": "target"}),
        ("Capture cuda graph end. Time elapsed: 12.61 s", "graph_end", {"elapsed_s": 12.61, "graph": "target"}),
        (
            "Capture npu graph begin. This can take up to several minutes. avail mem=17.02 GB",
            "graph_begin",
            {"avail_gib": 17.02, "graph": "npu"},
        ),
        (
            "Capture draft cuda graph end. Time elapsed: 2.95 s. avail mem=7.12 GB. mem usage=0.41 GB.",
            "graph_end",
            {"elapsed_s": 2.95, "avail_gib": 7.12, "usage_gib": 0.41, "graph": "draft"},
        ),
        (
            "Capture draft extend cuda graph begin. This can take up to several minutes. avail mem=7.00 GB",
            "graph_begin",
            {"phase": "extend", "avail_gib": 7.0, "graph": "draft"},
        ),
        (
            "Capture piecewise CUDA graph end. Time elapsed: 20.41 s. mem usage=0.92 GB. avail mem=37.13 GB.",
            "graph_end",
            {"elapsed_s": 20.41, "usage_gib": 0.92, "avail_gib": 37.13, "graph": "piecewise"},
        ),
        (
            "Capture target decode CUDA graph end. elapsed=12.90 s, mem usage=7.93 GB, avail mem=4.20 GB.",
            "graph_end",
            {"phase": "decode", "elapsed_s": 12.9, "usage_gib": 7.93, "avail_gib": 4.2, "graph": "target"},
        ),
        (
            "Capture target prefill CUDA graph begin. backend=piecewise, num_tokens=[4, 8], avail mem=38.05 GB",
            "graph_begin",
            {
                "backend": "piecewise",
                "num_tokens": [4, 8],
                "avail_gib": 38.05,
                "graph": "piecewise",
                "phase": "prefill",
            },
        ),
        (
            "max_total_num_tokens=1226984, chunked_prefill_size=8192, context_len=262144, available_gpu_mem=10.39 GB",
            "summary",
            {
                "max_total_num_tokens": 1226984,
                "chunked_prefill_size": 8192,
                "context_len": 262144,
                "available_gpu_mem_gib": 10.39,
            },
        ),
        (
            "max_total_num_tokens=54321, max_prefill_tokens=16384, max_running_requests=4097, context_len=8192",
            "summary",
            {
                "max_total_num_tokens": 54321,
                "max_prefill_tokens": 16384,
                "max_running_requests": 4097,
                "context_len": 8192,
            },
        ),
        (
            "All Reduce config: symmetric_memory = 28.01 MB, local_buffer = 8.00 MB, multicast = True",
            "all_reduce",
            {"symmetric_memory_mib": 28.01, "local_buffer_mib": 8.0, "multicast": True},
        ),
        ("The available memory for KV cache is 17.67 GB.", "kv_budget", {"avail_gib": 17.67}),
        (
            "FlatAGStagingPool: capacity=183500800 bytes, buffers=2, total=350.0 MiB",
            "ag_staging_pool",
            {"capacity_bytes": 183500800, "buffers": 2, "total_mib": 350.0},
        ),
        (
            "DSpark draft SWA slot map: swa_slots_per_req=7997, pool_multiplier=4, full_to_swa=int64[21499392]",
            "swa_draft_slot_map",
            {
                "swa_slots_per_req": 7997,
                "pool_multiplier": 4,
                "full_to_swa_dtype": "int64",
                "full_to_swa_entries": 21499392,
            },
        ),
    ],
)
def test_message_shapes(msg, kind, fields):
    r = one(msg, " TP0")
    assert (r.kind, r.fields) == (kind, fields)


def test_server_args_become_a_dict_and_a_cut_line_keeps_the_complete_pairs():
    r = one(
        "server_args=ServerArgs(model_path='/m, x', tp_size=16, mem_fraction_static=0.88, cuda_graph_bs=[1, 2],"
        " chunked_prefill_size=None, flag=True, lora=LoRAConfig(a=1), s={1, 2})"
    )
    assert r.kind == "server_args" and "truncated" not in r.fields
    assert r.fields["args"] == {
        "model_path": "/m, x",
        "tp_size": 16,
        "mem_fraction_static": 0.88,
        "cuda_graph_bs": [1, 2],
        "chunked_prefill_size": None,
        "flag": True,
        "lora": "LoRAConfig(a=1)",
        "s": "{1, 2}",
    }
    cut = one("server_args=ServerArgs(model_path='/m', tp_size=16, mem_fraction_static=0.8")
    assert cut.fields == {"args": {"model_path": "/m", "tp_size": 16}, "truncated": True}
    assert parse_pyargs("") == ({}, True)


def test_a_number_cut_off_mid_line_is_not_a_value():
    text = "\n".join(
        [
            line("Memory pool end. avail mem=27.6", " DP1"),
            line("Memory pool end. a", " DP1"),
            line("Capture cuda graph bs [1, 2, 4, 8, 1", " TP0"),
            line("KV Cache is allocated. #tokens: 1029388, K size: 47.12 GB, V size: 47.1", " TP0"),
            line(
                "max_total_num_tokens=3192320, chunked_prefill_size=8192, context_len=1048576, available_gpu_mem=4.0",
                " TP0",
            ),
        ]
    )
    log = parse_text(text)
    kinds = [(r.line, r.kind, r.fields) for r in log.records]
    assert kinds == [
        (3, "graph_sizes", {"graph": "target", "truncated": True}),
        (
            5,
            "summary",
            {"max_total_num_tokens": 3192320, "chunked_prefill_size": 8192, "context_len": 1048576, "truncated": True},
        ),
    ]
    assert [u[0] for u in log.unrecognised] == [1, 2, 4]


def test_unrecognised_memory_lines_are_listed_and_others_ignored():
    text = "\n".join(
        [
            line("Some new pool allocated: 3.00 GB", " TP0"),
            line("Beginning to load weights", " TP0"),
            "Loading safetensors checkpoint shards:  33% Completed | 1/3",
            line("Using 8.5 GiB for X"),
        ]
    )
    log = parse_text(text)
    assert log.records == [] and [(u[0], u[1]) for u in log.unrecognised] == [(1, {"TP": 0}), (4, {})]


def test_read_log_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_log(tmp_path / "none.log")
    with pytest.raises(InputError, match="is a directory"):
        read_log(tmp_path)
    (tmp_path / "e.log").write_text("  \n")
    with pytest.raises(InputError, match="is empty"):
        read_log(tmp_path / "e.log")
    (tmp_path / "n.log").write_text("hello\nworld 3 GB\n")
    with pytest.raises(MissingDataError, match="n.log holds no sglang launch-log line.*1 line"):
        read_log(tmp_path / "n.log")
    (tmp_path / "z.log.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(InputError, match="damaged gzip"):
        read_log(tmp_path / "z.log.gz")


@pytest.mark.parametrize(
    "spec, want",
    [
        ("DP0 TP0", {"DP": 0, "TP": 0}),
        ("dp0,tp0", {"DP": 0, "TP": 0}),
        ("TP-1", {"TP": 1}),
        ("untagged", {}),
        ("ATTN_CP2", {"ATTN_CP": 2}),
    ],
)
def test_rank_specs(spec, want):
    assert parse_rank_spec(spec) == want


@pytest.mark.parametrize("spec", ["foo", "TP", "TP0 x"])
def test_bad_rank_specs(spec):
    with pytest.raises(ValueError):
        parse_rank_spec(spec)


# --------------------------------------------------------------------------- property tests

JUNK = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from(list("[]=.,:# \r\n\x1b0123456789GBMiTPDE")), max_size=400
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(JUNK, st.lists(st.sampled_from([p.example for p in grammar_default().patterns]), max_size=4), st.data())
def test_parser_never_raises_on_junk(junk, examples, data):
    pieces = [junk] + [line(e, " TP0") for e in examples]
    text = data.draw(st.permutations(pieces)) if len(pieces) > 1 else pieces
    cut = data.draw(st.integers(0, sum(len(p) for p in pieces) + len(pieces)))
    full = "\n".join(text)
    log = parse_text(full[:cut])
    json.dumps([r.fields for r in log.records])  # every field is JSON-ready
    assert all(r.line >= 1 for r in log.records)


GIB_VAL = st.integers(0, 99_999).map(lambda c: c / 100)
TEMPLATES = [
    (
        "Load weight end. type=M, dtype=torch.bfloat16, avail mem={a:.2f} GB, mem usage={b:.2f} GB.",
        "weight_end",
        {"avail_gib": "a", "usage_gib": "b"},
    ),
    (
        "Load weight end. elapsed={c:.2f} s, type=M, avail mem={a:.2f} GB, mem usage={b:.2f} GB.",
        "weight_end",
        {"elapsed_s": "c", "avail_gib": "a", "usage_gib": "b"},
    ),
    (
        "KV Cache is allocated. #tokens: {n}, K size: {a:.2f} GB, V size: {b:.2f} GB",
        "kv_alloc",
        {"tokens": "n", "k_gib": "a", "v_gib": "b"},
    ),
    (
        "KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: {n}, KV size: {a:.2f} GB",
        "kv_alloc",
        {"tokens": "n", "kv_gib": "a"},
    ),
    ("Memory pool end. avail mem={a:.2f} GB", "pool_end", {"avail_gib": "a"}),
    (
        "Capture cuda graph end. Time elapsed: {c:.2f} s. mem usage={b:.2f} GB. avail mem={a:.2f} GB.",
        "graph_end",
        {"elapsed_s": "c", "usage_gib": "b", "avail_gib": "a"},
    ),
    (
        "Mamba Cache is allocated. max_mamba_cache_size: {n}, conv_state size: {a:.2f}GB, ssm_state size: {b:.2f}GB",
        "mamba_alloc",
        {"slots": "n", "conv_gib": "a", "ssm_gib": "b"},
    ),
    (
        "max_total_num_tokens={n}, chunked_prefill_size=8192, context_len=4096, available_gpu_mem={a:.2f} GB",
        "summary",
        {"max_total_num_tokens": "n", "available_gpu_mem_gib": "a"},
    ),
    (
        "Capturing batches (bs={n} avail_mem={a:.2f} GB):  50%|#####     | 3/6",
        "graph_progress",
        {"bs": "n", "avail_gib": "a"},
    ),
]
TAGS = st.lists(st.sampled_from(["DP", "PP", "TP", "EP", "ATTN_CP", "MOE_DP"]), unique=True, max_size=4).flatmap(
    lambda ks: st.tuples(*[st.integers(0, 63) for _ in ks]).map(lambda vs: dict(zip(ks, vs)))
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(TEMPLATES),
    GIB_VAL,
    GIB_VAL,
    GIB_VAL,
    st.integers(0, 10**9),
    TAGS,
    st.sampled_from(["", "\x1b[1m", "tqdm 50%|####  | 3/6 [00:01<00:01]"]),
    st.sampled_from(["\n", "\r\n", ""]),
    st.integers(0, 400),
)
def test_every_number_read_equals_the_number_written(tpl, a, b, c, n, tags, before, end, cut):
    template, kind, fields = tpl
    values = {"a": a, "b": b, "c": c, "n": n}
    msg = template.format(**values)
    tag_text = "".join(f" {k}{v}" for k, v in tags.items())
    prefix = "" if kind == "graph_progress" else TS.format(tags=tag_text)
    full = before + prefix + msg + end
    recs = parse_text(full).records
    assert len(recs) == 1 and recs[0].kind == kind
    r = recs[0]
    assert r.ranks == ({} if kind == "graph_progress" else tags)
    for field, key in fields.items():
        assert r.fields[field] == values[key], (field, r.fields)
    # cut anywhere: whatever is still read is exactly what was written
    for rec in parse_text(full[: len(before + prefix) + cut]).records:
        for field, key in fields.items():
            if field in rec.fields:
                assert rec.fields[field] == values[key], (field, rec.fields, full)


# --------------------------------------------------------------------------- ledger on hand-built logs


def _log(*lines_: str):
    return parse_text("\n".join(lines_) + "\n", "hand.log")


LAUNCH = [
    line("server_args=ServerArgs(tp_size=2, context_length=1000, max_running_requests=7)"),
    line("Init torch distributed ends. mem usage=1.00 GB", " TP0"),
    line("Load weight begin. avail mem=99.00 GB", " TP0"),
    line("Load weight begin. avail mem=98.00 GB", " TP1"),
    line("Load weight end. type=M, dtype=torch.bfloat16, avail mem=79.00 GB, mem usage=20.00 GB.", " TP0"),
    line("Load weight end. type=M, dtype=torch.bfloat16, avail mem=78.50 GB, mem usage=19.50 GB.", " TP1"),
    line("KV Cache is allocated. #tokens: 1000, K size: 30.00 GB, V size: 30.00 GB", " TP0"),
    line("Memory pool end. avail mem=18.50 GB", " TP0"),  # fall 60.5, logged 60 → residual 0.5
    line("Capture cuda graph begin. This can take up to several minutes. avail mem=18.00 GB", " TP0"),
    "Capturing batches (bs=4 avail_mem=17.90 GB):   0%|",
    "Capturing batches (bs=1 avail_mem=15.90 GB):  50%|",
    line("Capture cuda graph end. Time elapsed: 3.00 s. mem usage=2.20 GB. avail mem=15.80 GB.", " TP0"),
    line("max_total_num_tokens=1000, max_running_requests=7, context_len=1000, available_gpu_mem=15.80 GB", " TP0"),
]


def test_ledger_rows_of_a_simple_launch():
    res = ledger(_log(*LAUNCH))
    s = res.summary
    assert s["rank"] == "TP0" and s["complete"] and s["incomplete_reason"] is None
    assert (s["usable_gib"], s["nccl_init_gib"], s["load_peak_gib"], s["weights_resident_gib"]) == (
        100.0,
        1.0,
        20.0,
        20.0,
    )
    assert (s["kv_gib"], s["state_pools_gib"], s["kv_tokens"]) == (60.0, 60.0, 1000)
    assert s["workspace_residual_gib"] == 1.0  # 0.5 in the pool + 0.5 between pool end and capture begin
    assert (s["cuda_graph_target_gib"], s["cuda_graph_gib"], s["cuda_graph_static_gib"]) == (2.2, 2.2, 0.1)
    assert (s["cuda_graph_largest_bucket_gib"], s["cuda_graph_buckets"]) == (2.0, 2)
    assert s["runtime_margin_gib"] == 15.8
    assert s["fixed_overhead_gib"] == 40.0 and s["unaccounted_gib"] == 0.0  # 20 + 2.2 + 1 + 1 + 15.8
    assert (s["request_slots"], s["req_to_token_gib"]) == (8, round(8 * 1000 * 4 / 2**30, 6))
    rows = {r["row"]: r for r in res.tables["rows"].to_dict("records")}
    assert rows["load_peak_gib"]["lines"] == [5] and rows["load_peak_gib"]["how"] == "read"
    iv = res.tables["intervals"]
    assert list(iv["type"]) == ["measured", "residual", "residual", "measured", "residual"]
    assert list(iv["residual_gib"]) == [0.0, 0.5, 0.5, 0.0, 0.0]
    skew = {r["metric"]: r for r in res.tables["skew"].to_dict("records")}
    assert skew["load_weight_end.avail_gib"]["skew"] == 0.5 and skew["load_weight_end.avail_gib"]["min_rank"] == "TP1"


def test_a_residual_may_be_negative():
    res = ledger(
        _log(
            line("Load weight end. type=M, dtype=d, avail mem=79.00 GB, mem usage=20.00 GB."),
            line("KV Cache is allocated. #tokens: 1000, KV size: 60.00 GB"),
            line("Memory pool end. avail mem=19.66 GB"),
        )
    )
    assert res.tables["intervals"]["residual_gib"].tolist() == [-0.66]


def test_ledger_other_rank_and_bad_rank():
    log = _log(*LAUNCH)
    res = ledger(log, rank="TP1")
    assert res.summary["rank"] == "TP1" and res.summary["load_peak_gib"] == 19.5
    assert "runtime_margin_gib" in res.summary["missing_rows"]  # TP1 never logged a reading after capture
    with pytest.raises(MissingDataError, match="TP5.*ranks present: TP0, TP1"):
        ledger(log, rank="TP5")
    with pytest.raises(OptionError):
        ledger(log, rank="nonsense")


def test_incomplete_and_crashed_launches():
    cut = ledger(_log(*LAUNCH[:10]))
    assert not cut.summary["complete"] and "began at line 9 on TP0" in cut.summary["incomplete_reason"]
    assert any("incomplete" in w for w in cut.warnings) and cut.summary["load_peak_gib"] == 20.0
    crashed = ledger(
        _log(
            *LAUNCH[:8], line("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", " TP0")
        )
    )
    assert "not enough memory at line 9" in crashed.summary["incomplete_reason"]


def test_two_logs_side_by_side():
    a = _log(*LAUNCH)
    b = _log(*[x.replace("mem usage=20.00 GB", "mem usage=21.50 GB") for x in LAUNCH])
    res = ledger(a, b)
    rows = {r["row"]: r for r in res.tables["rows"].to_dict("records")}
    assert rows["load_peak_gib"]["value_a"] == 20.0 and rows["load_peak_gib"]["value_b"] == 21.5
    assert rows["load_peak_gib"]["diff"] == 1.5 and res.summary["diff"]["load_peak_gib"] == 1.5
    assert set(res.tables["timeline"]["log"]) == {"a", "b"}


def test_log_result_records_and_filters():
    log = _log(*LAUNCH)
    res = log_records(log, rank="TP1")
    df = res.tables["records"]
    assert list(df.columns) == ["line", "ranks", "kind", "fields"] and df.attrs["spread"] == "fields"
    assert df["kind"].tolist() == ["weight_begin", "weight_end"]
    only = log_records(log, kinds=["pool_end"])
    assert only.tables["records"]["fields"].tolist() == [{"avail_gib": 18.5}]
    assert res.summary["complete"] and res.summary["ranks_present"] == ["TP0", "TP1", "untagged"]


# --------------------------------------------------------------------------- capacity


def test_bytes_per_token_formulas():
    assert bytes_per_token(ModelDims(layers=24, kv_lora_rank=512, rope_dim=64), 1) == (13824, "mla")
    assert bytes_per_token(ModelDims(layers=40, kv_heads=8, head_dim=128), 2) == (40 * 8 * 128 * 2 * 2, "mha")
    for dims in (
        ModelDims(kv_lora_rank=512, rope_dim=64),
        ModelDims(layers=2, kv_lora_rank=512),
        ModelDims(layers=2, kv_heads=8),
    ):
        with pytest.raises(OptionError):
            bytes_per_token(dims, 1)


def test_capacity_from_dimensions():
    mla = ModelDims(layers=24, kv_lora_rank=512, rope_dim=64)
    res = capacity(dims=mla, kv_dtype="fp8", pool_gib=41.1, ranks=16, dcp=1, context=100_000)
    s = res.summary
    assert s["bytes_per_token"] == 13824 and s["tokens_per_rank"] == math.floor(41.1 * 2**30 / 13824)
    assert s["dp"] == 16 and s["tokens_per_instance"] == s["tokens_per_rank"] * 16
    assert s["max_concurrency_per_dp"] == s["tokens_per_dp"] // 100_000 and s["max_concurrency"] == 16 * 31
    dcp = capacity(dims=mla, kv_dtype="fp8", pool_gib=34.6, ranks=16, dcp=8).summary
    assert (dcp["dp"], dcp["attn_tp"]) == (2, 1) and dcp["tokens_per_dp"] == dcp["tokens_per_rank"] * 8
    mha = capacity(dims=ModelDims(layers=40, kv_heads=8, head_dim=128), kv_dtype="bf16", pool_gib=14.0).summary
    assert mha["bytes_per_token"] == 163840 and mha["tokens_per_instance"] == math.floor(14 * 2**30 / 163840)


def test_capacity_option_errors():
    mla = ModelDims(layers=24, kv_lora_rank=512, rope_dim=64)
    with pytest.raises(OptionError, match="--log"):
        capacity()
    with pytest.raises(OptionError, match="unknown"):
        capacity(dims=mla, kv_dtype="fp7", pool_gib=1)
    with pytest.raises(OptionError, match="do not divide"):
        capacity(dims=mla, pool_gib=1, ranks=16, dp=3)
    with pytest.raises(OptionError, match="dimensions"):
        capacity(pool_gib=1)


def test_capacity_from_a_log_uses_its_kv_line_and_server_args():
    log = _log(
        line("server_args=ServerArgs(tp_size=8, pp_size=1, dp_size=4, dcp_size=2)"),
        line("KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 1000000, KV size: 12.87 GB", " DP0 TP0"),
    )
    s = capacity(log=log).summary
    assert (s["tokens_per_rank"], s["ranks"], s["dp"], s["dcp"], s["attn_tp"]) == (1000000, 8, 4, 2, 1)
    assert s["tokens_per_dp"] == 2_000_000 and s["tokens_per_instance"] == 8_000_000
    assert s["bytes_per_token"] == round(12.87 * 2**30 / 1e6) and s["dtype_bytes"] == 1
    assert (
        capacity(log=log, dims=ModelDims(layers=24, kv_lora_rank=512, rope_dim=64)).summary["bytes_per_token"] == 13824
    )
    with pytest.raises(MissingDataError, match="no 'KV Cache is allocated' line"):
        capacity(log=_log(line("Memory pool end. avail mem=1.00 GB")))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_read_log_on_random_bytes_raises_only_tracekit_errors(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("junk") / "j.log"
    p.write_bytes(data)
    try:
        log = read_log(p)
    except (InputError, MissingDataError):
        return
    ledger(log)
    log_records(log)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([p.example for p in grammar_default().patterns] + LAUNCH),
            st.sampled_from(["", " TP0", " TP1", " DP1 TP1"]),
        ),
        max_size=25,
    )
)
def test_ledger_never_breaks_on_any_sequence_of_known_lines(lines_):
    text = "\n".join(ln if ln.startswith("[") else line(ln, tag) for ln, tag in lines_) + "\n"
    try:
        log = parse_text(text, "seq.log")
        if not log.records:
            return
        res = ledger(log)
    except InputError as exc:  # a sequence no one server writes (a once-per-launch line twice): one sentence
        assert "two servers' lines interleaved" in str(exc)
        return
    assert res.summary["rank"] in res.summary["ranks_present"]
    for r in (res, log_records(log)):
        json.loads(emit(r, "json"))
    try:
        capacity(log=log, context=1000)
    except (MissingDataError, OptionError):
        pass


@pytest.mark.slow
def test_a_flood_of_unrecognised_memory_lines_is_counted_not_kept(tmp_path):
    import gzip as gz

    from tracekit.analyses.memory.launch_log import log_records
    from tracekit.ingest.sglang_log import UNRECOGNISED_KEEP

    base = (Path(__file__).resolve().parents[3] / "fixtures" / "synthetic" / "dp16.launch.log").read_text()
    n = UNRECOGNISED_KEEP + 2_500
    flood = "".join(
        f"[2026-10-29 20:20:00 DP0 TP0 EP0] worker {i}: cache grew, memory now {i % 9}.50 GB\n" for i in range(n)
    )
    for name, data in (("f.log", (base + flood).encode()), ("f.log.gz", gz.compress((base + flood).encode()))):
        (tmp_path / name).write_bytes(data)
        log = read_log(tmp_path / name)
        assert log.unrecognised_total == n and len(log.unrecognised) == UNRECOGNISED_KEEP
        assert log.lines == base.count("\n") + n
        assert any(f"{n:,} lines mention memory" in w for w in log.warnings)
        res = log_records(log)
        assert res.summary["unrecognised"] == n and len(res.tables["unrecognised"]) == UNRECOGNISED_KEEP
