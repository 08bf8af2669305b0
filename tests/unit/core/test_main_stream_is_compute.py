"""The main stream is a compute stream: the one with the most kernel time outside communication kernels (issue 42's
review: on the rocprofv3 MI350X file the RCCL stream, 1,309 kernels, was taken for the main one). One function,
``tracekit.events.main_stream``, for every command."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.events import comm_mask, main_stream

from tests.conftest import CORPUS, kernel, load_events


def _rccl_heavy(tmp_path):
    """Stream 5: three long RCCL kernels (3 ms); stream 7: compute (30 × 20 µs = 0.6 ms)."""
    ev = [
        kernel("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", 10 + i * 1000, 1000, stream=5)
        for i in range(3)
    ]
    ev += [kernel("Cijk_gemm_MT64x64", 12 + i * 30, 20, stream=7, corr=100 + i) for i in range(30)]
    return load_events(tmp_path, ev)


def test_a_communication_stream_is_never_the_main_one(tmp_path):
    tr = _rccl_heavy(tmp_path)
    assert comm_mask(tr.events).sum() == 3
    assert main_stream(tr.events) == (0, 7)
    assert tracekit.communication(tr).summary["main_stream"] == 7  # the same answer through a command


def test_collectives_alone_the_most_kernel_time(tmp_path):
    ev = [kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 10 + i * 100, 50, stream=5) for i in range(3)]
    ev += [kernel("ncclDevKernel_AllGather_RING_LL", 20 + i * 100, 10, stream=9, corr=50 + i) for i in range(3)]
    assert main_stream(load_events(tmp_path, ev).events) == (0, 5)


def test_a_hand_built_table_too():
    ev = pd.DataFrame(
        {
            "kind": ["kernel"] * 4,
            "device": [0.0, 0.0, 0.0, 0.0],  # floats: the groupby path
            "stream": [1.0, 1.0, 2.0, 2.0],
            "dur_ns": [900.0, 900.0, 100.0, 100.0],
            "comm_class": ["nccl", "nccl", None, None],
        }
    )
    assert main_stream(ev) == (0, 2)
    assert main_stream(ev.drop(columns="comm_class")) == (0, 1)  # no column: no communication kernel known
    assert main_stream(ev, 1) == (0, 1)  # a stream named is the main one
    assert np.array_equal(comm_mask(ev), [True, True, False, False])


@pytest.mark.slow
def test_rocprof_mi350x_main_stream_is_the_compute_stream():
    path = CORPUS / "tracelens/tests/rocprof/908_results.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} is not here (the shared corpus)")
    tr = tracekit.load(path, cache=False)
    assert main_stream(tr.events) == (0, 567)  # 37,300 compute kernels; 565 is RCCL's (1,309 kernels)
    ev = tr.events
    on = (ev["stream"] == 567).to_numpy() & (ev["kind"] == "kernel").to_numpy()
    assert on.sum() > 30_000 and not comm_mask(ev)[on].any()
    w = tracekit.kernel_waves(tr)
    assert "nccl" not in w.summary["top_name"].lower()
    assert w.summary["communication_names"] == 1 and w.summary["lost_ns"] < w.summary["total_ns"] < 10**9
