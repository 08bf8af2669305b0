"""The rules both rocprofv3 readers share (tracekit/ingest/rocprof_rules.py), on hand-written values."""

from __future__ import annotations

import numpy as np

from tracekit.ingest.rocprof_rules import Parts, add_copies, add_kernels, kernel_symbols


def test_kernel_names_and_vgprs():
    names, vgprs = kernel_symbols(
        ["gemm<float>", "", "", ""],
        ["_Z4gemmIfEvv", "_Z3addv", "", ""],
        np.array([3, 4, 5, 6]),
        np.array([64, 32, 0, -1]),
        np.array([8, -1, 16, 0]),
    )
    # demangled, else the symbol, else unknown (never empty); arch + accum VGPRs where arch is known, else -1
    assert names == ["gemm<float>", "_Z3addv", "unknown kernel (kernel_id 5)", "unknown kernel (kernel_id 6)"]
    assert vgprs.tolist() == [72, 32, -1, -1]


def test_kernel_grid_in_workgroups_and_stream_else_queue():
    parts, dropped = Parts(), {}
    keep, common = parts.take(np.array([0, 10, 30]), np.array([5, 8, 40]), np.array([1, 2, 3]), dropped)
    assert keep.tolist() == [0, 2] and sum(dropped.values()) == 1 and parts.rows == 3
    add_kernels(
        parts,
        common,
        name=np.array([0, 0], dtype=np.int32),
        device=np.array([0, 1]),
        stream=np.array([-1, 7]),
        queue=np.array([2, 3]),
        registers=np.array([-1, 64]),
        lds=np.array([0, 4096]),
        workgroup=np.array([[256, 1, 1], [0, 1, 1]]),
        grid_items=np.array([[1000, 1, 1], [512, 1, 1]]),
    )
    assert parts.get("grid", (0, 3)).tolist() == [[4, 1, 1], [-1, 1, 1]]  # ceil(1000 / 256) workgroups
    assert parts.get("block", (0, 3)).tolist() == [[256, 1, 1], [-1, 1, 1]]
    assert parts.get("stream").tolist() == [2, 7] and parts.get("row").tolist() == [0, 2]


def test_copies_named_by_direction_a_peer_copy_on_the_sender():
    parts = Parts()
    _, common = parts.take(np.zeros(3, dtype=np.int64), np.ones(3, dtype=np.int64), np.arange(3), {})
    add_copies(
        parts,
        common,
        op=np.array([0, 1, 1]),
        op_names=["MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_DEVICE"],
        src_dev=np.array([-1, 0, 1]),
        dst_dev=np.array([0, 0, 0]),
        stream=np.array([1, 1, 2]),
        nbytes=np.array([10, 20, 30]),
    )
    names = [parts.names[c] for c in parts.get("name").tolist()]
    assert names == ["Memcpy HtoD (Host -> Device)", "Memcpy DtoD (Device -> Device)", "Memcpy PtoP (Device -> Device)"]
    assert parts.get("device").tolist() == [0, 0, 1]
    assert sorted(parts.kind_arg.values()) == ["DtoD", "HtoD", "PtoP"]
