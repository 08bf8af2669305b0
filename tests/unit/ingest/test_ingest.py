"""Ingest on small hand-built traces where the right answer is obvious."""

from __future__ import annotations

import gzip
import os
import json

import numpy as np
import pytest

import tracekit
from tracekit.errors import InputError
from tracekit.cache import trace_entries as tk_cache
from tests.conftest import kernel, memcpy, write_trace


def test_exact_epoch_ns_and_sorting(tmp_path):
    # epoch-scale µs with three decimals: float64 would round these to 0.25 µs
    evs = [kernel("b", "1712195495519689.047", 2.5), kernel("a", "1712195495519600.001", 1.0)]
    raw = json.dumps({"traceEvents": evs}).replace('"1712195495519689.047"', "1712195495519689.047")
    raw = raw.replace('"1712195495519600.001"', "1712195495519600.001")
    p = tmp_path / "t.json"
    p.write_text(raw)
    ev = tracekit.load(p, cache=False).events
    assert ev["start_ns"].tolist() == [1712195495519600001, 1712195495519689047]  # sorted by start
    assert ev["name"].astype(str).tolist() == ["a", "b"]
    assert ev["event_id"].tolist() == [1, 0]
    assert ev["end_ns"].tolist() == [1712195495519601001, 1712195495519691547]
    assert ev["dur_ns"].dtype == np.int64


def test_chrome_array_form_and_formats(tmp_path):
    evs = [kernel("k", 10.0, 1.0), memcpy("Memcpy PtoP (Device -> Device)", 12.0, 2.0, nbytes=4096)]
    for compress, name in ((None, "a.json"), ("gz", "a.json.gz"), ("zst", "a.json.zst")):
        t = tracekit.load(write_trace(tmp_path / name, evs, wrap=False, compress=compress), cache=False)
        assert t.events["kind"].astype(str).tolist() == ["kernel", "memcpy"]
        assert t.events["copy_kind"].astype(str).tolist()[1] == "PtoP"
        assert t.events["bytes"].tolist() == [-1, 4096]


def test_classification_columns(tmp_path):
    evs = [
        kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1.0, 1.0),
        kernel("ncclKernel_AllReduce_TREE_LL128_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 3.0, 1.0),
        kernel("ncclDevKernel_ReduceScatter_Sum_bf16_NVLS_SIMPLE", 5.0, 1.0),
        kernel("void deep_ep::internode_ll::dispatch<true, 3, 10, 7168>(void*)", 7.0, 1.0),
        kernel("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)", 9.0, 1.0),
        kernel("multimem_all_reduce_kernel<c10::BFloat16, 16>", 11.0, 1.0),
        kernel("all_to_all_kernel", 13.0, 1.0),
        kernel(
            "void cutlass::Kernel2<gemm>",
            15.0,
            1.0,
            grid=[148, 2, 1],
            block=[128, 1, 1],
            **{"registers per thread": 168, "shared memory": 232448},
        ),
        memcpy("Memcpy HtoD (Pinned -> Device)", 17.0, 1.0),
        memcpy("Memcpy DtoH (Device -> Pageable)", 19.0, 1.0),
        memcpy("Memcpy DtoD (Device -> Device)", 21.0, 1.0),
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": 7,
            "ts": 23.0,
            "dur": 1.0,
            "args": {"stream": 7, "device": 0, "bytes": 64},
        },
    ]
    ev = tracekit.load(write_trace(tmp_path / "c.json", evs), cache=False).events
    rows = ev.astype({c: object for c in ("comm_class", "collective", "algo", "protocol", "copy_kind")})
    assert rows["comm_class"].tolist()[:7] == [
        "nccl",
        "nccl",
        "nccl",
        "deepep",
        "custom_all_reduce",
        "custom_all_reduce",
        "all_to_all",
    ]
    assert pd_isna(rows["comm_class"].iloc[7])
    assert rows["collective"].tolist()[:3] == ["AllGather", "AllReduce", "ReduceScatter"]
    assert rows["algo"].tolist()[:3] == ["RING", "TREE", "NVLS"]
    assert rows["protocol"].tolist()[:3] == ["LL", "LL128", "SIMPLE"]
    assert rows["copy_kind"].tolist()[8:] == ["HtoD", "DtoH", "DtoD", "memset"]
    gemm = ev.iloc[7]
    assert (gemm.grid_x, gemm.grid_y, gemm.grid_z, gemm.block_x) == (148, 2, 1, 128)
    assert (gemm.registers, gemm.shared_mem) == (168, 232448)


def pd_isna(v) -> bool:
    import pandas as pd

    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def test_quirks_do_not_crash_and_are_counted(tmp_path):
    evs = [
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 1.0,
            "dur": 100.0,
            "args": {"Op count": 3},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": -1220540864,
            "ts": 2.0,
            "dur": 5.0,
            "args": {"Comms Id": 10159970886766084423, "External id": 3},
        },
        kernel("no_args", 4.0, 1.0) | {"args": None},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "amd",
            "pid": 2,
            "tid": 0,
            "ts": 5.0,
            "dur": 1.0,
            "args": {"External id": 1, "device": 2, "stream": 0, "correlation": 9, "kind": "Dispatch Kernel"},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipMemcpyWithStream",
            "pid": 9,
            "tid": 9,
            "ts": 6.0,
            "dur": 1.0,
            "args": {"stream": "0x0", "bytes": "256", "correlation": 2},
        },
        {"ph": "X", "cat": "kernel", "name": "missing_dur", "pid": 0, "tid": 7, "ts": 7.0},
        {"ph": "X", "cat": "kernel", "name": "neg_dur", "pid": 0, "tid": 7, "ts": 8.0, "dur": -1.0},
        {"ph": "X", "cat": "kernel", "name": "no_ts", "pid": 0, "tid": 7, "dur": 1.0},
        {"ph": "X", "cat": "kernel", "name": "str_ts", "pid": 0, "tid": 7, "ts": "9.5", "dur": 1.0},
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "", "tid": "", "ts": 1.0},
        {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 2.0},
        {"ph": "f", "id": 1, "bp": "e", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 4.0},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        {"ph": "Q", "name": "weird"},
        "not an object",
    ]
    t = tracekit.load(write_trace(tmp_path / "q.json", evs), cache=False)
    rep = t.report
    assert rep.records_read == len(evs)
    assert rep.events_kept + sum(rep.not_events.values()) + sum(rep.dropped.values()) == rep.records_read
    names = set(t.events["name"].astype(str))
    assert {
        "PyTorch Profiler (0)",
        "aten::mm",
        "no_args",
        "amd",
        "hipMemcpyWithStream",
        "str_ts",
        "Iteration Start: PyTorch Profiler",
    } <= names
    assert not names & {"missing_dur", "neg_dur", "no_ts", "weird"}
    assert sum(rep.dropped.values()) == 5  # missing dur, negative dur, no ts, unknown phase, not an object
    assert rep.not_events == {"flow record (ph 's')": 1, "flow record (ph 'f')": 1, "metadata record (ph 'M')": 1}
    assert t.meta["thread_names"] == {"0:7": "stream 7 "}
    ev = t.events.set_index(t.events["name"].astype(str))
    assert ev.loc["PyTorch Profiler (0)", "pid"] == -1
    assert ev.loc["no_args", "stream"] == 7 and ev.loc["no_args", "correlation"] == -1  # lane tid stands in
    assert ev.loc["amd", "device"] == 2
    assert ev.loc["str_ts", "start_ns"] == 9500
    assert ev.loc["Iteration Start: PyTorch Profiler", "kind"] == "instant"
    assert ev.loc["hipMemcpyWithStream", "stream"] == -1  # a CPU event keeps stream -1 whatever its args say
    assert any("dropped 5 unusable" in w for w in rep.warnings)


def test_truncated_json_is_salvaged(tmp_path):
    evs = [kernel(f"k{i}", float(i * 10), 5.0) for i in range(50)]
    full = write_trace(tmp_path / "full.json", evs, baseTimeNanoseconds=123).read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(full[: len(full) * 2 // 3])
    t = tracekit.load(cut, cache=False)
    assert t.report.salvaged and t.report.bytes_lost > 0
    n = len(t.events)
    assert 20 < n < 50
    assert t.events["name"].astype(str).tolist() == [f"k{i}" for i in range(n)]
    assert any("truncated" in w for w in t.report.warnings)


def test_truncated_gzip_is_salvaged(tmp_path):
    evs = [kernel(f"k{i}", float(i * 10), 5.0) for i in range(3000)]
    data = write_trace(tmp_path / "a.json.gz", evs, compress="gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    t = tracekit.load(cut, cache=False)
    assert 100 < len(t.events) < 3000
    assert any("gzip stream ends early" in w for w in t.report.warnings)


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "is empty"),
        (b"hello world", "not JSON"),
        (b'{"foo": 1}', "no 'traceEvents'"),
        (b'{"traceEvents": []}', "no usable trace events"),
        (b'{"traceEvents": [{"ph": "M", "name": "process_name", "args": {"name": "x"}}]}', "no usable trace events"),
        (b'{"traceEvents": [{"ph": "X" "cat": 1}]}', "not valid JSON"),
    ],
)
def test_bad_inputs_raise_input_error(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(InputError) as exc:
        tracekit.load(p, cache=False)
    assert needle in str(exc.value) and str(p) in str(exc.value)
    assert exc.value.exit_code == 3


def test_not_gzip_and_corrupt_gzip(tmp_path):
    p = tmp_path / "x.json.gz"
    p.write_bytes(b"plain text, not gzip")
    with pytest.raises(InputError, match="not gzip"):
        tracekit.load(p, cache=False)
    good = gzip.compress(json.dumps({"traceEvents": [kernel("k", 1.0, 1.0)] * 200}).encode())
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF  # flips bits in the deflate stream
    p.write_bytes(bytes(bad))
    try:
        t = tracekit.load(p, cache=False)
    except InputError as exc:  # nothing complete survived: one clear sentence
        assert str(p) in str(exc)
    else:  # or the complete part survived, with the loss reported
        assert t.report.warnings


def test_missing_path_and_directories(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        tracekit.load(tmp_path / "nope.json")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="no trace file"):
        tracekit.load(tmp_path)
    write_trace(tmp_path / "one.json", [kernel("k", 1.0, 1.0)])
    assert len(tracekit.load(tmp_path, cache=False).events) == 1
    write_trace(tmp_path / "two.json", [kernel("k", 1.0, 1.0)])
    with pytest.raises(InputError, match="holds 2 trace files"):
        tracekit.load(tmp_path)
    # a trace named like one wins over other JSON files beside it (results, ground truth)
    d = tmp_path / "run"
    d.mkdir()
    write_trace(d / "1758612345.12-TP-0.trace.json", [kernel("k", 1.0, 1.0), kernel("k", 3.0, 1.0)])
    (d / "1758612345.12-TP-0.truth.json").write_text("{}")
    assert len(tracekit.load(d, cache=False).events) == 2


def test_metadata(tmp_path):
    p = write_trace(
        tmp_path / "m.json",
        [kernel("k", 1.0, 1.0, device=1)],
        deviceProperties=[{"id": 0, "numSms": 132, "name": "H100"}, {"id": 1, "numSms": 148, "name": "B200"}],
        distributedInfo={"backend": "nccl", "rank": 3, "world_size": 16},
        baseTimeNanoseconds=1711964646000000000,
    )
    t = tracekit.load(p, cache=False)
    assert (t.meta["rank"], t.meta["world_size"], t.meta["num_sms"]) == (3, 16, 148)
    assert t.meta["base_time_ns"] == 1711964646000000000


def test_cache_roundtrip_and_invalidation(tmp_path):
    cdir = tmp_path / "cache"
    p = write_trace(tmp_path / "c.json", [kernel("k", 1.0, 1.0), kernel("k2", 3.0, 1.0)])
    first = tracekit.load(p, cache_dir=cdir)
    assert not first.report.from_cache
    second = tracekit.load(p, cache_dir=cdir)
    assert second.report.from_cache
    assert second.events.equals(first.events)
    assert second.meta == first.meta
    assert [f.name for f in cdir.iterdir() if f.name.startswith(".tmp")] == []  # atomic: no leftovers
    write_trace(p, [kernel("k", 1.0, 1.0)])  # changed source: size and mtime differ
    os.utime(p, ns=(1, 1))
    third = tracekit.load(p, cache_dir=cdir)
    assert not third.report.from_cache and len(third.events) == 1
    # a damaged cache file is ignored, not fatal
    tk_cache.cache_path(p, cdir).write_bytes(b"garbage")
    assert len(tracekit.load(p, cache_dir=cdir).events) == 1


def test_same_stream_overlap_is_kept_and_reported(tmp_path):
    from tracekit.analyses import trace_info

    p = write_trace(
        tmp_path / "o.json",
        [kernel("a", 1.0, 10.0), kernel("b", 5.0, 2.0), kernel("c", 8.0, 1.0), kernel("d", 20.0, 1.0, stream=8)],
    )
    res = trace_info(tracekit.load(p, cache=False))
    assert res.summary["same_stream_overlaps"] == 2
    assert res.summary["gpu_busy_ns"] == 11_000
    assert res.summary["span_ns"] == 20_000
    assert any("same-stream overlap" in w for w in res.warnings)


@pytest.mark.slow
def test_concurrent_loads_share_the_cache_safely(tmp_path):
    import subprocess
    import sys

    evs = [kernel(f"k{i % 50}", float(i), 0.5) for i in range(20000)]
    p = write_trace(tmp_path / "big.json", evs)
    cdir = tmp_path / "cache"
    code = (
        "import sys, tracekit; t = tracekit.load(sys.argv[1], cache_dir=sys.argv[2]); "
        "print(len(t.events), t.report.from_cache)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(p), str(cdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outs = [pr.communicate(timeout=120) for pr in procs]
    assert all(pr.returncode == 0 for pr in procs), outs
    assert all(o.split()[0] == "20000" for o, _ in outs)
    assert [f.name for f in cdir.iterdir() if f.name.startswith(".tmp")] == []
    again = tracekit.load(p, cache_dir=cdir)
    assert again.report.from_cache and len(again.events) == 20000
