"""A run whose all-reduce is vLLM's custom all-reduce (``cross_device_reduce_1stage``), not NCCL: the generator's
``nccl_train4`` preset with ``allreduce="custom"`` (fixtures/synthlib/multirank.py). A rank that enters late makes
the others wait inside the custom kernel; ``imbalance`` must see those kernels as all-reduces, the waits in them
and the straggler exactly as the generator's truth (computed from the schedule, never from the names) says."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from fixtures.synthlib.multirank import CUSTOM_ALLREDUCE, write_run
from tracekit.fan_out import imbalance

pytestmark = pytest.mark.slow  # a whole 4-rank run

US2 = 2_000  # waits within 2 µs, as for the NCCL runs (tests/integration/test_multirank_truth.py)


def test_entry_skew_shows_as_wait_inside_the_custom_all_reduce(tmp_path):
    paths, tp = write_run("nccl_train4", tmp_path / "run", allreduce="custom")
    truth = json.loads(tp.read_text())
    tp.rename(tmp_path / "run.truth.json")
    text = "".join((gzip.open(p) if p.suffix == ".gz" else open(p, "rb")).read().decode("utf-8") for p in paths)
    assert "ncclDevKernel" not in text and text.count("cross_device_reduce_1stage") > 0  # the custom kernel only
    res = imbalance(tmp_path / "run", jobs=1, gpus_per_node=truth["meta"]["gpus_per_node"])
    key = ["step", "kind", "seq", "rank"]
    got = res.tables["collectives"].set_index(key).sort_index()
    want = pd.DataFrame(truth["collectives"]).set_index(key).sort_index()
    assert set(got.index.get_level_values("kind")) == {"allreduce"}
    assert got.index.equals(want.index), (len(got), len(want))
    assert (got["wait_ns"] - want["wait_ns"]).abs().max() <= US2
    assert int(want["wait_ns"].max()) > 50_000  # the skew is there to find (the straggler's late entry)
    assert res.summary["straggler"]["rank"] == truth["summary"]["straggler"]["rank"] == 2
    assert res.summary["imbalance_ns_per_step"] == pytest.approx(truth["summary"]["imbalance_ns_per_step"], rel=0.01)


def test_the_custom_kernel_is_an_all_reduce_for_comm_and_exposure():
    from tracekit.data import load_classes

    cls, collective, algo, _ = load_classes().comm_for(CUSTOM_ALLREDUCE)
    assert (cls, collective, algo) == ("custom_all_reduce", "AllReduce", "1stage")
