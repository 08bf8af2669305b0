"""rocprofv3 JSON reader (tracekit/ingest/rocprof_json.py) on small hand-built documents."""

from __future__ import annotations

import gzip
import json

import pytest

import tracekit
from tracekit.errors import InputError
from tracekit.ingest.rocprof_json import is_rocprof_json

GPU, CPU = 20, 10


def _doc(dispatches=None, copies=None, hip=None, extra_buffers=None):
    ops = [{"kind": "NONE", "operations": []}] * 5 + [
        {"kind": "HIP_RUNTIME_API", "operations": ["hipApiName", "hipLaunchKernel", "hipMemcpyAsync"]}
    ]
    ops += [{"kind": "X", "operations": []}] * 4
    ops += [{"kind": "MEMORY_COPY", "operations": ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST",
                                                   "MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST",
                                                   "MEMORY_COPY_DEVICE_TO_DEVICE"]}]  # fmt: skip
    proc = {
        "metadata": {"pid": 77},
        "agents": [
            {"id": {"handle": CPU}, "type": 1, "name": "EPYC"},
            {
                "id": {"handle": GPU},
                "type": 2,
                "name": "gfx942",
                "product_name": "AMD Instinct MI300X",
                "cu_count": 304,
                "wave_front_size": 64,
                "max_waves_per_cu": 32,
                "lds_size_in_kb": 64,
                "gfx_target_version": 90402,
                "logical_node_type_id": 0,
            },  # fmt: skip
        ],
        "strings": {"buffer_records": ops},
        "kernel_symbols": [
            {
                "kernel_id": 1,
                "kernel_name": "_Z4gemmv.kd",
                "formatted_kernel_name": "gemm()",
                "group_segment_size": 1024,
                "sgpr_count": 48,
                "arch_vgpr_count": 100,
                "accum_vgpr_count": 28,
            },  # fmt: skip
        ],
        "buffer_records": {
            "kernel_dispatch": dispatches or [],
            "memory_copy": copies or [],
            "hip_api": hip or [],
            **(extra_buffers or {}),
        },
    }
    return {"rocprofiler-sdk-tool": [proc]}


def _dispatch(start, end, corr, kernel_id=1, grid=(1024, 1, 1), wg=(256, 1, 1), lds=4096):
    return {
        "kind": 11,
        "operation": 2,
        "thread_id": 77,
        "correlation_id": {"internal": corr, "external": 0},
        "start_timestamp": start,
        "end_timestamp": end,
        "dispatch_info": {
            "agent_id": {"handle": GPU},
            "queue_id": {"handle": 3},
            "kernel_id": kernel_id,
            "group_segment_size": lds,
            "workgroup_size": dict(zip("xyz", wg)),
            "grid_size": dict(zip("xyz", grid)),
        },
        "stream_id": {"handle": 9},
    }


def _write(tmp_path, doc, name="results.json"):
    p = tmp_path / name
    text = json.dumps(doc).encode()
    p.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return p


def test_kernels_copies_and_launches(tmp_path):
    doc = _doc(
        dispatches=[
            _dispatch(1_000_000_000_123, 1_000_000_002_000, 5),
            _dispatch(1_000_000_003_000, 1_000_000_003_500, 6, kernel_id=9),
        ],
        copies=[
            {
                "operation": 2,
                "thread_id": 77,
                "correlation_id": {"internal": 7},
                "start_timestamp": 1_000_000_004_000,
                "end_timestamp": 1_000_000_004_100,
                "src_agent_id": {"handle": CPU},
                "dst_agent_id": {"handle": GPU},
                "bytes": 4096,
                "stream_id": {"handle": 9},
            }
        ],  # fmt: skip
        hip=[
            {
                "kind": 5,
                "operation": 1,
                "thread_id": 78,
                "correlation_id": {"internal": 5},
                "start_timestamp": 999_999_999_000,
                "end_timestamp": 1_000_000_000_050,
            }
        ],  # fmt: skip
    )
    t = tracekit.load(_write(tmp_path, doc, "results.json.gz"), cache=False)
    ev = t.events
    k = ev[ev["kind"] == "kernel"].reset_index(drop=True)
    assert k["start_ns"].tolist() == [1_000_000_000_123, 1_000_000_003_000]  # exact integer ns
    assert k["dur_ns"].tolist() == [1877, 500]
    assert k.loc[0, "name"] == "gemm()" and k.loc[1, "name"] == "unknown kernel (kernel_id 9)"
    assert (k.loc[0, "grid_x"], k.loc[0, "block_x"]) == (4, 256)  # 1024 work-items / 256 = 4 workgroups
    assert k.loc[0, "registers"] == 128 and k.loc[0, "shared_mem"] == 4096  # arch + accum VGPRs; dispatch LDS
    assert k.loc[1, "registers"] == -1  # no symbol: unknown, never 0
    assert (k["device"] == 0).all() and (k["stream"] == 9).all()
    c = ev[ev["kind"] == "memcpy"].iloc[0]
    assert (c["copy_kind"], c["bytes"], c["device"]) == ("HtoD", 4096, 0)
    r = ev[ev["kind"] == "runtime"].iloc[0]
    assert (r["name"], r["correlation"], r["pid"], r["tid"]) == ("hipLaunchKernel", 5, 77, 78)
    assert t.meta["profiler"]["name"] == "rocprofv3" and "kernel_resources" in t.meta["profiler"]["recorded"]
    dev = t.meta["device_properties"][0]
    assert (dev["name"], dev["numSms"], dev["computeMajor"], dev["computeMinor"]) == ("AMD Instinct MI300X", 304, 9, 4)
    assert t.report.records_read == 4 == t.report.events_kept


def test_counts_what_it_does_not_read_and_drops_bad_times(tmp_path):
    doc = _doc(
        dispatches=[_dispatch(100, 200, 1), _dispatch(300, 250, 2)],
        extra_buffers={"memory_allocation": [{"size": 1}, {"size": 2}]},
    )
    t = tracekit.load(_write(tmp_path, doc), cache=False)
    rep = t.report
    assert rep.records_read == 4 and rep.events_kept == 1
    assert sum(rep.not_events.values()) == 2 and sum(rep.dropped.values()) == 1


def test_occupancy_from_registers_and_lds(tmp_path):
    # 256 work-items = 4 waves; 128 VGPRs -> 512 // 128 = 4 waves per SIMD x 4 SIMDs = 16 waves -> 4 workgroups;
    # LDS 4096 B of 64 KiB -> 16 workgroups; so registers limit it to 4
    doc = _doc(dispatches=[_dispatch(100, 200, 1)])
    from tracekit.gpu_specs import ctas_per_sm, sm_limits

    t = tracekit.load(_write(tmp_path, doc), cache=False)
    k = t.events[t.events["kind"] == "kernel"]
    lim = sm_limits(t.meta)
    assert lim.assumed == []  # registers and LDS are known: nothing assumed
    got, why, status = ctas_per_sm(k["block_x"], k["registers"], k["shared_mem"], lim)
    assert (int(got[0]), str(why[0]), str(status[0])) == (4, "registers", "ok")


def test_sniff_by_content():
    assert is_rocprof_json(b'\xef\xbb\xbf {\n  "rocprofiler-sdk-tool": [')
    assert not is_rocprof_json(b'{"traceEvents": []}')


def test_truncated_file_is_salvaged_and_counted(tmp_path):
    doc = _doc(dispatches=[_dispatch(100 * i, 100 * i + 50, i) for i in range(1, 40)])
    text = json.dumps(doc, indent=1)
    cut = text[: text.index('"correlation_id"', len(text) - 3000)]  # inside a late record
    p = tmp_path / "cut.json"
    p.write_text(cut)
    t = tracekit.load(p, cache=False)
    assert t.report.salvaged and t.report.bytes_lost > 0
    assert 0 < t.report.events_kept < 39
    assert t.report.records_read == t.report.events_kept


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"rocprofiler-sdk-tool": "nope"}', "does not fit its schema"),
        ('{"rocprofiler-sdk-tool": []}', "no process"),
        ('{"rocprofiler-sdk-tool": [{"buffer_records": {}}]}', "no kernel, copy or API record"),
        ('{"someOtherTool": {"events": []}}', "not a trace of a profiler tracekit reads"),
        ('{"rocprofiler-sdk-tool"', "not valid JSON"),
    ],
)
def test_hostile_inputs_one_sentence(tmp_path, text, says):
    p = tmp_path / "x.json"
    p.write_text(text)
    with pytest.raises(InputError, match=says):
        tracekit.load(p, cache=False)


def test_cli_exit_3_on_another_tools_json(tmp_path, cli):
    p = tmp_path / "other.json"
    p.write_text('{"rocprofiler-sdk-tool": 5}')
    code, _, err = cli("info", p, "--no-cache")
    assert code == 3 and "Traceback" not in err and str(p) in err and len(err.strip().splitlines()) == 1
