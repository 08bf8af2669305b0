"""The streamed reduce of a run's ranks (issue 40, speed): the workers' reductions are taken as they arrive
(``ArrivingReductions``; ``tracekit.fan_out.map_points(on_result=…)``), each rank merged once its files are in, and
the document is the same whatever the order of arrival — checked over permutations of arrival (hypothesis), with
sglang's per-stage files (two files a rank, merged on arrival) and a rank whose file cannot be read, and against
``--jobs 1``, ``--jobs 2`` and a Dask cluster on the same run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures.synthlib import write_run  # noqa: E402
from tracekit.analyses.fleet.multirank import imbalance_of_run, plan_run, reduce_point  # noqa: E402
from tracekit.analyses.fleet.multirank.api import ArrivingReductions  # noqa: E402
from tracekit.fan_out import imbalance, map_points  # noqa: E402

pytestmark = pytest.mark.slow  # a generated run of 8 ranks (10 files) reduced once, then reduced again per order


def _doc(res) -> str:
    doc = json.loads(json.dumps(res.to_dict()))
    for i in doc["inputs"]:
        i.pop("from_cache", None)
    return json.dumps(doc, sort_keys=True)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """An 8-rank run written as sglang's per-stage files (EXTEND and DECODE: two files a rank), one file corrupt (its
    rank is left out with a warning), reduced once in this process: the plan and each file's reduction."""
    d = tmp_path_factory.mktemp("staged")
    paths, _ = write_run(
        "dp_attn_deepep16",
        d / "run",
        truth_path=d / "truth.json",
        ranks=8,
        steps=3,
        layers=2,
        naming="sglang_stages",
        prefill=[[1, 2, 4, 4096], [2, 5, 4, 4096]],  # ranks 2 and 5 prefill: an EXTEND file beside their DECODE one
    )
    bad = sorted(paths)[-1]
    bad.write_bytes(b"\x1f\x8b not gzip")  # a rank whose second file cannot be read
    plan = plan_run(d / "run", cache=False)
    results = [reduce_point(str(f), plan.opts) for _, f in plan.files]
    return d / "run", plan, results


def test_the_run_has_ranks_of_several_files_and_a_dropped_one(staged):
    _, plan, results = staged
    per_rank = [sum(1 for i, _ in plan.files if i == k) for k in range(len(plan.ranks))]
    assert max(per_rank) >= 2  # merged on arrival: the case where arrival order could matter
    assert sum("dropped" in r for r in results) == 1


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_document_is_the_same_in_any_order_of_arrival(staged, data):
    _, plan, results = staged
    want = _doc(imbalance_of_run(plan, list(results)))
    order = data.draw(st.permutations(range(len(results))))
    arriving = ArrivingReductions(plan)
    for i in order:
        arriving.add(i, results[i])
    assert _doc(arriving.result()) == want


def test_a_reduction_arriving_twice_or_not_at_all_is_refused(staged):
    _, plan, results = staged
    arriving = ArrivingReductions(plan)
    arriving.add(0, results[0])
    with pytest.raises(ValueError, match="twice"):
        arriving.add(0, results[0])
    with pytest.raises(ValueError, match="no reduction arrived"):
        arriving.result()


def test_map_points_hands_each_result_over_as_it_arrives(staged):
    run, plan, _ = staged
    paths = [str(f) for _, f in plan.files]
    seen: list[int] = []
    out = map_points(reduce_point, paths, plan.opts, jobs=2, on_result=lambda i, r: seen.append(i), keep=False)
    assert sorted(seen) == list(range(len(paths))) and out == [None] * len(paths)


def test_jobs_1_jobs_2_and_dask_give_the_same_document(staged):
    run, _, _ = staged
    one = _doc(imbalance(run, jobs=1, cache=False))
    assert _doc(imbalance(run, jobs=2, cache=False)) == one
    distributed = pytest.importorskip("dask.distributed")
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as lc,
        distributed.Client(lc) as c,
    ):
        assert _doc(imbalance(run, dask=c, cache=False)) == one
