"""Issue 26: no silent wrong number. Each case once gave a number that looked fine and was wrong; now it is null
with a warning, a flagged row, or a refusal that names the line or the file. Hand-built inputs in tmp_path."""

from __future__ import annotations

import json

import pytest

import tracekit
from tracekit.analyses.memory.capacity import capacity
from tracekit.analyses.memory.launch_log import ledger
from tracekit.errors import InputError
from tracekit.ingest.bench import read_bench
from tracekit.ingest.normalize import CLOCK_JUMP
from tracekit.ingest.sglang_log import parse_text
from tests.conftest import kernel, memcpy, write_trace

PTOP = "Memcpy PtoP (Device -> Device)"
TS = "[2026-01-30 20:54:50{tags}] "


def line(msg: str, tags: str = "") -> str:
    return TS.format(tags=tags) + msg


def log_of(*lines: str):
    return parse_text("\n".join(lines) + "\n", "hand.log")


def launch(kv: str = "KV size: 60.00 GB", pool_end: str = "18.50", tags: str = " TP0") -> list[str]:
    """A complete one-rank launch (as tests/unit/ingest/test_sglang_log.py's LAUNCH): usable 100 GiB, weights 20, KV 60."""
    return [
        line("server_args=ServerArgs(tp_size=1, context_length=1000, max_running_requests=7)"),
        line("Init torch distributed ends. mem usage=1.00 GB", tags),
        line("Load weight begin. avail mem=99.00 GB", tags),
        line("Load weight end. type=M, dtype=torch.bfloat16, avail mem=79.00 GB, mem usage=20.00 GB.", tags),
        line(f"KV Cache is allocated. #tokens: 1000, {kv}", tags),
        line(f"Memory pool end. avail mem={pool_end} GB", tags),
        line("Capture cuda graph begin. This can take up to several minutes. avail mem=18.00 GB", tags),
        line("Capture cuda graph end. Time elapsed: 3.00 s. mem usage=2.20 GB. avail mem=15.80 GB.", tags),
        line("max_total_num_tokens=1000, max_running_requests=7, context_len=1000, available_gpu_mem=15.80 GB", tags),
    ]


# --------------------------------------------------------------------------- 1. copies without bytes


def test_copies_without_bytes_never_count_as_zero(tmp_path):
    """Half of the PtoP copies without `bytes` (-1 in the events table) gave a median received size of 0."""
    evs = [
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "scheduler.run_batch",
            "pid": 0,
            "tid": 7,
            "ts": 0.0,
            "dur": 1000.0,
        },
        kernel("k", 50.0, 10.0),
    ]
    t = 100.0
    for i in range(6):
        evs.append(memcpy(PTOP, t, 10.0, nbytes=None if i % 2 else 1000, stream=20))
        t += 11.0
    res = tracekit.allgathers(tracekit.load(write_trace(tmp_path / "t.json", evs), cache=False))
    s = res.summary
    assert s["median_received_bytes_per_step"] is None
    assert s["copies_without_bytes"] == 3 and s["steps_without_bytes"] == 1
    pst = res.tables["per_step_type"]
    assert pst["received_bytes"].isna().all() and pst["full_bytes"].isna().all()  # null, not 0
    assert any("3 cop(ies) without bytes" in w and "median received bytes per step is null" in w for w in res.warnings)
    # every copy with its bytes: the number is there, and nothing is said
    for e in evs[2:]:
        e["args"]["bytes"] = 1000
    ok = tracekit.allgathers(tracekit.load(write_trace(tmp_path / "ok.json", evs), cache=False))
    assert ok.summary["median_received_bytes_per_step"] == 6000 and ok.summary["copies_without_bytes"] == 0
    assert not any("without bytes" in w for w in ok.warnings)


# --------------------------------------------------------------------------- 2. a clock jump


def _body(n: int = 200) -> list:
    return [kernel(f"k{i % 5}", 1000.0 + 10.0 * i, 5.0) for i in range(n)]


def test_a_lone_event_far_from_the_timeline_is_dropped_and_named(tmp_path, cli):
    """One event 5,000 s away made the span 5,000 s and the idle time 99.9998 %, with no warning."""
    evs = _body() + [kernel("jumped_kernel", 1000.0 + 5_000e6, 5.0)]
    t = tracekit.load(write_trace(tmp_path / "t.json", evs), cache=False)
    rep = t.report
    ((reason, count),) = rep.dropped.items()
    assert count == 1 and reason.startswith(CLOCK_JUMP) and "jumped_kernel" in reason and "5,000.0 s" in reason
    assert rep.records_read == rep.events_kept + sum(rep.not_events.values()) + sum(rep.dropped.values()) == 201
    assert any("jumped_kernel" in w and CLOCK_JUMP in w and str(tmp_path / "t.json") in w for w in rep.warnings)
    span = int(t.events["end_ns"].max() - t.events["start_ns"].min())
    assert span == 1_995_000  # the body: 1000 µs .. 2995 µs
    assert "jumped_kernel" not in set(t.events["name"].astype(str))
    code, out, err = cli("info", tmp_path / "t.json", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["summary"]["span_ns"] == 1_995_000 and "jumped_kernel" in err
    assert any(CLOCK_JUMP in w for w in doc["warnings"])


def test_jumps_at_both_ends_and_small_or_real_gaps_are_kept_apart(tmp_path):
    early = kernel("early", -4_000e6, 5.0)
    late = kernel("late", 9_000e6, 5.0)
    t = tracekit.load(write_trace(tmp_path / "both.json", [early] + _body() + [late]), cache=False)
    assert sum(t.report.dropped.values()) == 2 and len(t.events) == 200
    # a long event that covers the body from far before is not isolated: it touches the rest
    cover = {
        "ph": "X",
        "cat": "user_annotation",
        "name": "whole_run",
        "pid": 1,
        "tid": 1,
        "ts": -4_000e6,
        "dur": 4_000e6 + 5_000.0,
    }
    t = tracekit.load(write_trace(tmp_path / "cover.json", [cover] + _body()), cache=False)
    assert t.report.dropped == {} and len(t.events) == 201
    # a gap below 10 s, or below 10x the rest's span, is the trace's own: kept
    near = kernel("near", 1000.0 + 5e6, 5.0)  # 5 s after a 2 ms body
    t = tracekit.load(write_trace(tmp_path / "near.json", _body() + [near]), cache=False)
    assert t.report.dropped == {}
    # ten events are a timeline: an epoch-scale ts among relative ones is a clock jump (the one rule, issue 41) ...
    t = tracekit.load(
        write_trace(tmp_path / "small.json", _body(10) + [kernel("epoch", 1712195495519689.047, 1.0)]), cache=False
    )
    assert sum(t.report.dropped.values()) == 1 and len(t.events) == 10
    # ... but a trace of under 9 events has no body to judge by: the far ts stays (the ts-as-strings case)
    t = tracekit.load(
        write_trace(tmp_path / "tiny.json", _body(7) + [kernel("epoch", 1712195495519689.047, 1.0)]), cache=False
    )
    assert t.report.dropped == {} and len(t.events) == 8


# --------------------------------------------------------------------------- 3. scientific notation


def test_sizes_in_scientific_notation_are_read():
    """`KV size: 4.110e+01 GB` was not read, and its 41 GiB moved into the fixed overhead."""
    plain = ledger(log_of(*launch(kv="KV size: 60.00 GB"))).summary
    sci = ledger(log_of(*launch(kv="KV size: 6.000e+01 GB"))).summary
    assert sci["kv_gib"] == 60.0 and sci["state_pools_gib"] == 60.0
    assert sci["fixed_overhead_gib"] == plain["fixed_overhead_gib"] == 40.0
    rec = log_of(line("KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 3192320, KV size: 4.110e+01 GB"))
    assert rec.records[0].fields["kv_gib"] == pytest.approx(41.1)
    pairs = (
        log_of(line("max_total_num_tokens=1000, max_running_requests=7, context_len=1000, available_gpu_mem=1.58E1 GB"))
        .records[0]
        .fields
    )
    assert pairs["available_gpu_mem_gib"] == pytest.approx(15.8)
    # an exponent cut off mid-line is still not a value
    cut = log_of(line("Memory pool end. avail mem=1.850e+")).records
    assert not cut or "avail_gib" not in cut[0].fields


# --------------------------------------------------------------------------- 4. DP ranks that disagree


def test_dp_ranks_that_disagree_are_named_or_added_each_on_its_own(tmp_path):
    """A log whose DP ranks logged different KV pools was multiplied from DP0 alone, silently."""
    head = line("server_args=ServerArgs(tp_size=2, dp_size=2, context_length=1000, max_running_requests=7)")
    kv = [
        line("KV Cache is allocated. #tokens: 1000, KV size: 60.00 GB", " DP0 TP0"),
        line("KV Cache is allocated. #tokens: 800, KV size: 48.00 GB", " DP1 TP1"),
        line(
            "max_total_num_tokens=1000, max_running_requests=7, context_len=1000, available_gpu_mem=15.80 GB",
            " DP0 TP0",
        ),
    ]
    res = capacity(log=log_of(head, *kv), context=100)
    s = res.summary
    assert s["tokens_per_rank"] == 1000 and s["tokens_per_instance"] == 1800  # not 2 x 1000
    assert s["tokens_per_instance_source"] == "each DP rank's own #tokens" and s["max_concurrency"] == 18
    levels = {r["level"]: r for r in res.tables["levels"].to_dict("records")}
    assert levels["instance"]["kv_gib"] == 108.0 and levels["instance"]["tokens"] == 1800
    w = [x for x in res.warnings if "disagree" in x]
    assert w and "DP0 TP0: 1,000 tokens, 60 GiB (line 2)" in w[0] and "DP1 TP1: 800 tokens, 48 GiB (line 3)" in w[0]
    # four DP groups, two in the log: the instance figure is the chosen rank's x 4, and the warning says so
    head4 = head.replace("tp_size=2, dp_size=2", "tp_size=4, dp_size=4")
    res = capacity(log=log_of(head4, *kv))
    assert res.summary["tokens_per_instance"] == 4000
    assert res.summary["tokens_per_instance_source"] == "tokens per DP group × dp"
    assert any("2 of 4 DP group(s)" in x and "1,000 tokens" in x and "800 tokens" in x for x in res.warnings)
    # the ledger is one rank's rows: it says the other ranks logged other pools
    led = ledger(log_of(head, *kv))
    assert led.summary["kv_gib"] == 60.0 and led.summary["kv_tokens"] == 1000
    assert any(
        "disagree on kv_gib (48 on DP1 TP1, 60 on DP0 TP0)" in x and "DP0 TP0's own readings" in x for x in led.warnings
    )
    # a what-if moves each DP group from its own reading (not DP0's x dp), and carries the warning
    from tracekit.analyses.memory.whatif import whatif

    full = [head.replace("max_running_requests=7", "max_running_requests=7, mem_fraction_static=0.8")]
    for tags, kv_line in (
        (" DP0 TP0", "#tokens: 1000, KV size: 60.00 GB"),
        (" DP1 TP1", "#tokens: 800, KV size: 48.00 GB"),
    ):
        full += [x.replace("#tokens: 1000, KV size: 60.00 GB", kv_line) for x in launch(tags=tags)[1:]]
    wi = whatif(log_of(*full), settings=["mem_fraction_static=0.85"])
    inst = wi.tables["capacity"].set_index("level").loc["instance"]
    rank = wi.tables["capacity"].set_index("level").loc["rank"]
    assert inst["tokens_before"] == 1800 and inst["kv_gib_before"] == 108.0
    assert inst["delta_tokens"] == 2 * rank["delta_tokens"] > 0
    assert wi.summary["tokens_per_instance_after"] == 1800 + 2 * rank["delta_tokens"]
    assert any("disagree" in x for x in wi.warnings)
    # ranks that agree: nothing said
    same = [x.replace("#tokens: 800, KV size: 48.00 GB", "#tokens: 1000, KV size: 60.00 GB") for x in kv]
    assert not any("disagree" in x for x in capacity(log=log_of(head, *same)).warnings)
    assert not any("disagree" in x for x in ledger(log_of(head, *same)).warnings)


# --------------------------------------------------------------------------- 5. impossible sizes and readings


def test_negative_and_impossible_sizes_are_refused_with_their_line(cli, tmp_path):
    """A negative KV size and free memory larger than the GPU became numbers."""
    neg = log_of(*launch(kv="KV size: -60.00 GB"))
    rec = next(r for r in neg.records if r.kind == "kv_alloc")
    assert "kv_gib" not in rec.fields and rec.fields["rejected"]["kv_gib"][0] == -60.0
    assert any("line 5" in w and "negative size" in w for w in neg.warnings)
    with pytest.raises(InputError, match="line 5: the KV size is not one a GPU can have"):
        capacity(log=neg)
    res = ledger(neg)
    assert "kv_gib" not in res.summary and "state_pools_gib" not in res.summary
    assert {"kv_gib", "state_pools_gib"} <= set(res.summary["missing_rows"]) and res.summary["unaccounted_gib"] is None
    assert any("hand.log line 5" in w for w in res.warnings)
    from tracekit.analyses.memory.whatif import whatif

    with pytest.raises(InputError, match="line 5: --set max_running_requests needs the target KV pool"):
        whatif(neg, settings=["max_running_requests=3"])
    log = tmp_path / "neg.log"
    log.write_text("\n".join(launch(kv="KV size: -60.00 GB")) + "\n")
    code, out, err = cli("capacity", "--log", log)
    assert code == 3 and out == "" and "line 5" in err and "Traceback" not in err
    # free memory: negative, beyond any GPU, or beyond what this GPU held at load begin (99 + 1 GiB of NCCL)
    for reading, why in (
        ("-3.50", "negative free-memory reading"),
        ("5000.00", "more than any GPU has"),
        ("150.00", "more free memory than the GPU holds (100 GiB by line 3)"),
    ):
        lg = log_of(*launch(pool_end=reading))
        pool = next(r for r in lg.records if r.kind == "pool_end")
        assert "avail_gib" not in pool.fields and why in pool.fields["rejected"]["avail_gib"][1]
        assert any("line 6" in w and why in w for w in lg.warnings)
        res = ledger(lg)
        assert all(p != float(reading) for p in res.tables["timeline"]["avail_gib"])
        assert any("line 6" in w for w in res.warnings)
    # a slightly negative "mem usage" (memory freed while capturing) is a real reading: kept
    ok = log_of(line("Capture cuda graph end. Time elapsed: 3.00 s. mem usage=-0.02 GB. avail mem=15.80 GB."))
    assert ok.records[0].fields["usage_gib"] == -0.02 and "rejected" not in ok.records[0].fields


# --------------------------------------------------------------------------- 6. text in bench number columns


def test_bench_text_in_number_columns_is_named(tmp_path):
    """Text in a number column became a null without a word."""
    (tmp_path / "b.csv").write_text(
        'deployment,context,concurrency,generation_time_ms\na,100,8,80\nb,100,n/a,"12 ms"\nc,100,8.5,nan\n'
    )
    (tmp_path / "one.jsonl").write_text(
        '{"run_name": "x", "batch_size": 16, "input_len": 1024, "output_len": 101, "latency": "slow", "ttft": 0.1}\n'
    )
    df = read_bench([tmp_path / "b.csv", tmp_path / "one.jsonl"])
    rows = df.set_index("deployment")
    assert rows.loc["a", "step_time_ms"] == 80 and rows.loc["a", "concurrency"] == 8
    assert rows.loc[["b", "c"], "step_time_ms"].isna().all() and rows.loc[["b", "c"], "concurrency"].isna().all()
    assert pd_isna(rows.loc["x", "step_time_ms"])
    assert df.attrs["text_in_number_columns"] == 5
    csv_w, jsonl_w = df.attrs["warnings"]
    assert str(tmp_path / "b.csv") in csv_w and "4 cell(s)" in csv_w
    for where in (
        "line 3 column 'concurrency' = 'n/a'",
        "line 3 column 'generation_time_ms' = '12 ms'",
        "line 4 column 'generation_time_ms' = 'nan'",
        "line 4 column 'concurrency' = '8.5'",
    ):
        assert where in csv_w
    assert str(tmp_path / "one.jsonl") in jsonl_w and "record 1 column 'latency' = 'slow'" in jsonl_w
    clean = read_bench([tmp_path / "b.csv"]).iloc[:1]
    assert clean.attrs.get("warnings") is not None  # the attribute is always there
    (tmp_path / "ok.csv").write_text("deployment,context,concurrency,generation_time_ms\na,100,8,80\n")
    assert read_bench([tmp_path / "ok.csv"]).attrs["warnings"] == []


def pd_isna(v) -> bool:
    import pandas as pd

    return bool(pd.isna(v))


@pytest.mark.slow
def test_bench_text_in_number_columns_reaches_the_cli(tmp_path):
    """The reader's warnings go through bench_table to the command's warnings (stderr and the JSON)."""
    import json
    import subprocess
    import sys

    (tmp_path / "b.csv").write_text(
        'deployment,context,concurrency,generation_time_ms\na,100,8,80\nb,100,n/a,"12 ms"\n'
    )
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from tracekit.cli import main; sys.argv[0] = 'tracekit'; main()",
            "bench",
            str(tmp_path / "b.csv"),
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    warnings = json.loads(r.stdout)["warnings"]
    assert any("line 3 column 'concurrency' = 'n/a'" in w for w in warnings), warnings
    assert "line 3 column 'concurrency'" in r.stderr
