"""One synthetic deployment written as Kineto JSON, rocprofv3 JSON and a rocpd SQLite database
(fixtures/synthlib/rocprof.py and rocpd.py, from the same trace document): info, kernels, wall and layers give the
same answers on all three, times exact. Steps come from the CPU step ranges (``--step-source cpu``): rocprofv3
records no GPU-side user annotations."""

from __future__ import annotations

import json

import pytest

from fixtures.synth import build, write_trace
from fixtures.synthlib.rocpd import write_rocpd
from fixtures.synthlib.rocprof import write_rocprof

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rocpd_parity")
    trace, _ = build("dp16", 4, steps=3, seed=0)
    return (
        write_trace(d / "k.trace.json.gz", trace),
        write_rocprof(d / "r.json", trace),
        write_rocpd(d / "results.db", trace),
    )


def _run(cli, *args):
    code, out, err = cli(*args, "-f", "json", "--no-cache")
    assert code == 0, err
    return json.loads(out)


def test_info_same_counts_and_times(cli, files):
    k, j, d = (_run(cli, "info", f)["summary"] for f in files)
    assert (k["profiler"], j["profiler"], d["profiler"]) == ("kineto", "rocprofv3", "rocprofv3")
    for key in (
        "kernels",
        "memcpys",
        "comm_kernels",
        "first_gpu_start_ns",
        "last_gpu_end_ns",
        "span_ns",
        "gpu_busy_ns",
    ):
        assert k[key] == j[key] == d[key], key


def test_info_whole_same_as_rocprof_json(cli, files):
    """The whole info document of the database is the JSON's but for the path and the profiler's label."""
    _, j, d = (_run(cli, "info", f) for f in files)
    assert "rocpd" in d["summary"].pop("profiler_label") and "rocpd" not in j["summary"].pop("profiler_label")
    assert [i.pop("path") for i in d["inputs"]] == [str(files[2])]
    for i in j["inputs"]:
        i.pop("path")
    assert d == j


def test_kernels_same(cli, files):
    k, j, d = (_run(cli, "kernels", f) for f in files)
    assert k["summary"] == j["summary"] == d["summary"] and k["tables"] == j["tables"] == d["tables"]


@pytest.mark.parametrize("command", ["wall", "layers"])
def test_wall_and_layers_same(cli, files, command):
    k, j, d = (_run(cli, command, f, "--step-source", "cpu") for f in files)
    assert k["summary"]["steps"] == 3
    assert k["summary"] == j["summary"] == d["summary"] and k["tables"] == j["tables"] == d["tables"]
