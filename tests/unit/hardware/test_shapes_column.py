"""The cpu_ops' recorded inputs live in the events table (the ``shapes`` column), so shapes work from the table
alone: after a cache round trip, with the trace file gone, through every decode path (streamed, whole document,
the tolerant fallback), and only for cpu_ops."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import tracekit
from tracekit.analyses.hardware.shapes import kernel_shapes, names_at

from conftest import cpu_ann, gpu_ann, kernel, launch, write_trace
from conftest import BF16, op


def _trace(tmp_path, name="s.json", indent=None):
    ev = [
        cpu_ann("ProfilerStep#1", 0.0, 400.0, ext=9),
        gpu_ann("ProfilerStep#1", 10.0, 380.0, ext=9),
        op("aten::mm", 10.0, 30.0, [[64, 1024], [1024, 4096]], [BF16, BF16]),
        launch("cudaLaunchKernel", 15.0, 2),
        kernel("gemm_kernel", 20.0, 20.0, corr=2),
        op("aten::mm", 50.0, 30.0, [[64, 1024], [1024, 4096]], [BF16, BF16]),
        launch("cudaLaunchKernel", 55.0, 3),
        kernel("gemm_kernel", 60.0, 20.0, corr=3),
        op("aten::bmm", 90.0, 30.0, [[8, 16, 32], [8, 32, 64]], ["float", "float"]),
        launch("cudaLaunchKernel", 95.0, 4),
        kernel("bmm_kernel", 100.0, 10.0, corr=4),
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "not_an_op",
            "pid": 100,
            "tid": 100,
            "ts": 1.0,
            "dur": 1.0,
            "args": {"Input Dims": [[1]], "Input type": ["float"]},
        },
    ]
    p = write_trace(tmp_path / name, ev, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}])
    if indent is not None:  # the same trace pretty-printed, as Kineto writes it
        p.write_text(json.dumps(json.loads(p.read_text()), indent=indent))
    return p


def _flops(t) -> dict[str, list]:
    ks = kernel_shapes(t).table
    names = names_at(t.events, ks["row"].to_numpy())
    return {n: sorted(ks.loc[names == n, "flops"].tolist()) for n in set(names)}


WANT = {"gemm_kernel": [2.0 * 64 * 4096 * 1024] * 2, "bmm_kernel": [2.0 * 8 * 16 * 64 * 32]}


def test_the_column_holds_each_cpu_ops_inputs_compactly_and_nothing_else(tmp_path):
    t = tracekit.load(_trace(tmp_path, indent=2), cache=False)
    ev = t.events
    sh = ev["shapes"]
    assert isinstance(sh.dtype, pd.CategoricalDtype)
    ops = ev["kind"] == "cpu_op"
    assert sh[ops].notna().all() and sh[~ops].isna().all()  # the user_annotation's Input Dims are not kept
    assert len(sh.cat.categories) == 2  # the two aten::mm calls share one category, indentation removed
    mm = json.loads(sh[ev["name"] == "aten::mm"].iloc[0])
    assert mm == [[[64, 1024], [1024, 4096]], [BF16, BF16], ["", ""]]
    assert _flops(t) == WANT


def test_shapes_come_from_the_cached_table_without_the_file(tmp_path):
    p = _trace(tmp_path)
    cdir = tmp_path / "cache"
    cold = tracekit.load(p, cache_dir=cdir)
    warm = tracekit.load(p, cache_dir=cdir)
    assert warm.report.from_cache
    assert warm.events["shapes"].astype(object).equals(cold.events["shapes"].astype(object))
    p.rename(tmp_path / "moved.json")  # analyses never go back to the file
    assert _flops(warm) == WANT and kernel_shapes(warm).why is None


@pytest.mark.parametrize("layout", ["oneline", "indented", "loose"])
def test_every_decode_path_keeps_the_inputs(tmp_path, layout):
    p = _trace(tmp_path, indent=1 if layout == "indented" else None)
    if layout == "loose":  # a string pid sends the chunk through the tolerant decoder
        doc = json.loads(p.read_text())
        doc["traceEvents"][0]["ts"] = "0"
        doc["traceEvents"].append(
            {"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"grid": ["x"]}}
        )
        p.write_text(json.dumps(doc))
    t = tracekit.load(p, cache=False)
    assert _flops(t) == WANT


def test_a_trace_replayed_from_cuda_graphs_says_why_it_has_no_shapes(tmp_path):
    from tracekit.analyses.hardware.hbm import hbm_bytes
    from tracekit.analyses.hardware.roofline import roofline
    from tracekit.errors import MissingDataError

    ev = [
        cpu_ann("ProfilerStep#1", 0.0, 400.0, ext=9),
        gpu_ann("ProfilerStep#1", 10.0, 380.0, ext=9),
        op("aten::mm", 10.0, 30.0, [[64, 1024], [1024, 4096]], [BF16, BF16]),  # recorded, launches nothing
        launch("cudaGraphLaunch", 50.0, 7),
        kernel("gemm_kernel", 60.0, 20.0, corr=7),
        kernel("bmm_kernel", 90.0, 10.0, corr=7),
    ]
    p = write_trace(
        tmp_path / "g.json", ev, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]
    )
    t = tracekit.load(p, cache=False)
    ks = kernel_shapes(t)
    assert ks.graph_kernels == 2 and ks.shaped == 0 and ks.summary()["graph_pct"] == 100.0
    assert any("CUDA graphs" in w for w in ks.warnings)
    for fn in (roofline, hbm_bytes):
        with pytest.raises(MissingDataError, match="CUDA graphs"):
            fn(t, None, "h100")
