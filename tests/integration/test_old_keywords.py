"""The keywords of earlier releases (issue 27, "Parameters as objects in signatures"): a call with the flat step
keywords (``step_name=``, ``min_step_ns=``, ``phase=``, ``step_source=``, ``steps_file=``), the flat AllGather
keywords (``group_size=``, ``ag_size=``/``sizes=``, ``local_copy=``/``local_copy_pattern=``) or an alias (``qlen=``,
``var=``, ``main=``) still works for one release: it says so with a DeprecationWarning and gives exactly the JSON of
the call with ``steps=`` / ``ag=`` / the one name. The only place in the suite that calls public functions so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.analyses.options import AllGatherOptions
from tracekit.analyses.steps.model import step_options
from tracekit.annotation import load_annotation
from tracekit.errors import UsageError
from tests.conftest import comparable_doc

ROOT = Path(__file__).resolve().parents[2]
DP16 = ROOT / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"


def _old(call):
    """The old call's result, and that it warned (naming the function) as a deprecation."""
    with pytest.warns(DeprecationWarning, match=r"\(\): .* of earlier releases, removed in the next") as got:
        res = call()
    ours = [w for w in got if "of earlier releases" in str(w.message)]
    assert len(ours) == 1 and ours[0].filename == __file__, [(w.filename, str(w.message)) for w in ours]  # one
    # warning, pointing at the caller's line (stacklevel): nothing inside tracekit calls with an old keyword
    return res


@pytest.fixture(scope="module")
def dp16():
    return tracekit.load(DP16, cache=False)


@pytest.fixture(scope="module")
def k3():
    return load_annotation("k3_dp16")


@pytest.mark.slow
def test_findings(dp16, k3):
    old = _old(
        lambda: tracekit.findings(
            dp16,
            k3,
            step_name="scheduler.run_batch",
            min_step_ns=5_000_000,
            phase="all",
            group_size=8,
            ag_size=["X=1"],
            local_copy=k3.allgather.local_copy,
        )
    )
    new = tracekit.findings(
        dp16,
        k3,
        steps=step_options(k3, step_name="scheduler.run_batch", min_step_ns=5_000_000, phase="all"),
        ag=AllGatherOptions(group_size=8, sizes=["X=1"], local_copy=k3.allgather.local_copy),
    )
    assert comparable_doc(old) == comparable_doc(new)
    assert new.params["sizes"]["X"] == 1 and new.params["group_size"] == 8 and new.params["phase"] == "all"


@pytest.mark.slow
def test_report(dp16, k3):
    old = _old(lambda: tracekit.report(dp16, k3, min_step_ns=0, step_source="gpu", group_size=8, ag_size={"X": 1}))
    new = tracekit.report(
        dp16, k3, steps=step_options(k3, min_step_ns=0, source="gpu"), ag=AllGatherOptions(group_size=8, sizes={"X": 1})
    )
    assert comparable_doc(old) == comparable_doc(new)
    assert new.params["min_step_ns"] == 0 and list(new.params["sizes"]) == [*k3.allgather.sizes, "X"]


@pytest.mark.slow
def test_exposure_under_both_older_names(dp16, k3):
    new = comparable_doc(
        tracekit.exposure(
            dp16, k3, ag=AllGatherOptions(group_size=8, sizes=["X=1"], local_copy=k3.allgather.local_copy)
        )
    )
    cli_names = _old(
        lambda: tracekit.exposure(dp16, k3, ag_size=["X=1"], group_size=8, local_copy=k3.allgather.local_copy)
    )
    older = _old(
        lambda: tracekit.exposure(dp16, k3, sizes=["X=1"], group_size=8, local_copy_pattern=k3.allgather.local_copy)
    )
    assert comparable_doc(cli_names) == comparable_doc(older) == new
    with pytest.raises(UsageError, match="one of them"), pytest.warns(DeprecationWarning):
        tracekit.exposure(dp16, k3, ag_size=["X=1"], sizes=["Y=2"])
    with pytest.raises(UsageError, match="pass ag= only"), pytest.warns(DeprecationWarning):
        tracekit.exposure(dp16, k3, ag=AllGatherOptions(), group_size=8)


@pytest.mark.slow
def test_roofline_and_hbm_aliases(dp16, k3):
    old = _old(lambda: tracekit.roofline(dp16, k3, "b200", bs=4, qlen=1, var=["context=100000"], phase="all"))
    new = tracekit.roofline(
        dp16, k3, "b200", bs=4, q_len=1, variables=["context=100000"], steps=step_options(k3, phase="all")
    )
    assert (
        comparable_doc(old) == comparable_doc(new)
        and new.params["q_len"] == 1
        and new.params["vars"] == {"context": 100000.0}
    )
    old = _old(lambda: tracekit.hbm_bytes(dp16, k3, "b200", bs=4, var="context=100000", min_step_ns=0))
    new = tracekit.hbm_bytes(
        dp16, k3, "b200", bs=4, variables={"context": 100000.0}, steps=step_options(k3, min_step_ns=0)
    )
    assert comparable_doc(old) == comparable_doc(new)


@pytest.mark.slow
def test_layers_steps_and_comm(dp16, k3):
    old = _old(lambda: tracekit.layers(dp16, step_name="scheduler.run_batch", min_step_ns=0))
    new = tracekit.layers(dp16, steps=step_options(step_name="scheduler.run_batch", min_step_ns=0))
    assert comparable_doc(old) == comparable_doc(new)
    old = _old(lambda: tracekit.steps_result(dp16, k3, phase="all"))
    assert comparable_doc(old) == comparable_doc(tracekit.steps_result(dp16, k3, steps=step_options(k3, phase="all")))
    old = _old(lambda: tracekit.communication(dp16, k3, main=7, local_copy_pattern="^memcpy128$"))
    new = tracekit.communication(dp16, k3, main_stream=7, ag=AllGatherOptions(local_copy="^memcpy128$"))
    assert comparable_doc(old) == comparable_doc(new) and new.params["main_stream"] == 7
    old = _old(lambda: tracekit.wall(dp16, ag="ptop+local", min_step_ns=0))  # wall's ag= is another option
    assert comparable_doc(old) == comparable_doc(
        tracekit.wall(dp16, ag="ptop+local", steps=step_options(min_step_ns=0))
    )
    with pytest.raises(TypeError), pytest.warns(DeprecationWarning):
        tracekit.wall(dp16, group_size=8)  # wall never took the AllGather options


@pytest.mark.slow
def test_imbalance(tmp_path):
    sys.path.insert(0, str(ROOT))
    from fixtures.synth import build, write_trace

    for rank in (0, 1):
        tr, _ = build("dsv3", 4, steps=2, seed=rank, step_marker="decode")
        write_trace(tmp_path / f"1758612345.12-TP-{rank}.trace.json.gz", tr)
    old = _old(
        lambda: tracekit.imbalance(
            tmp_path, jobs=1, step_name="scheduler.run_batch", min_step_ns=1000, step_source="cpu", cache=False
        )
    )
    new = tracekit.imbalance(
        tmp_path,
        jobs=1,
        cache=False,
        steps=step_options(step_name="scheduler.run_batch", min_step_ns=1000, source="cpu"),
    )
    assert comparable_doc(old) == comparable_doc(new)
    assert (new.params["step_name"], new.params["min_step_ns"], new.params["step_source"]) == (
        "scheduler.run_batch",
        1000,
        "cpu",
    )
