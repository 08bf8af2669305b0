"""One synthetic deployment written as Kineto JSON and as rocprofv3 JSON (fixtures/synthlib/rocprof.py, from the
same trace document): info, kernels, wall and layers give the same answers on both, times exact. Steps come from
the CPU step ranges (``--step-source cpu``) on both: rocprofv3 records no GPU-side user annotations."""

from __future__ import annotations

import json

import pytest

from fixtures.synth import build, write_trace
from fixtures.synthlib.rocprof import write_rocprof

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rocprof_parity")
    trace, _ = build("dp16", 4, steps=3, seed=0)
    return write_trace(d / "k.trace.json.gz", trace), write_rocprof(d / "r.json", trace)


def _run(cli, *args):
    code, out, err = cli(*args, "-f", "json", "--no-cache")
    assert code == 0, err
    return json.loads(out)


def test_info_same_counts_and_times(cli, files):
    k, r = (_run(cli, "info", f)["summary"] for f in files)
    assert (k["profiler"], r["profiler"]) == ("kineto", "rocprofv3")
    for key in (
        "kernels",
        "memcpys",
        "comm_kernels",
        "first_gpu_start_ns",
        "last_gpu_end_ns",
        "span_ns",
        "gpu_busy_ns",
    ):
        assert k[key] == r[key], key


def test_kernels_same(cli, files):
    k, r = (_run(cli, "kernels", f) for f in files)
    assert k["summary"] == r["summary"] and k["tables"] == r["tables"]


@pytest.mark.parametrize("command", ["wall", "layers"])
def test_wall_and_layers_same(cli, files, command):
    k, r = (_run(cli, command, f, "--step-source", "cpu") for f in files)
    assert k["summary"]["steps"] == 3
    assert k["summary"] == r["summary"] and k["tables"] == r["tables"]
