"""Notebooks (issue 17): every analysis that takes an annotation takes it as a name, a path or an Annotation (the
one resolver, tracekit.annotation.as_annotation), and a hardware profile as a name, a file or the profile; the
options are keywords with the CLI's names; a wrong type is one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tracekit.analyses.comm.segments import allgather_options
from tracekit.analyses.options import AllGatherOptions
from tracekit.analyses.structure.blocks import annotated, kernel_selection_stats
from tracekit.analyses.findings.op_compare import compare_findings
from tracekit.analyses.hardware.hbm import hbm_bytes
from tracekit.analyses.fleet.plot_data import PlotInput, exposure_points
from tracekit.analyses.hardware.roofline import roofline
from tracekit.analyses.steps.resolve import step_options
from tracekit.analyses.hardware.waves import kernel_waves
from tracekit.annotation import Annotation, as_annotation, load_annotation
from tracekit.errors import MissingDataError, UsageError
from tracekit.gpu_specs import HardwareProfile, as_profile, load_profile, resolve_profile, with_hbm
from tests.conftest import comparable_doc

ROOT = Path(__file__).resolve().parents[3]
DP16 = ROOT / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"
ANN_PATH = ROOT / "annotations" / "k3_dp16.json"


@pytest.fixture(scope="module")
def trace():
    return tracekit.load(DP16, cache=False)


def _forms():
    """The same annotation three ways: its shipped name, its file (str and Path), the loaded Annotation."""
    return ["k3_dp16", str(ANN_PATH), ANN_PATH, load_annotation("k3_dp16")]


# each analysis that takes an annotation, called with it in the place a notebook puts it
ANALYSES = {
    "step_windows": lambda t, a: tracekit.step_windows(t, a),
    "allgathers": lambda t, a: tracekit.allgathers(t, a),
    "exposure": lambda t, a: tracekit.exposure(t, a),
    "communication": lambda t, a: tracekit.communication(t, a),
    "block_stats": lambda t, a: tracekit.block_stats(t, a),
    "kernel_selection_stats": lambda t, a: kernel_selection_stats(t, a, by="op_tag"),
    "roofline": lambda t, a: roofline(t, a, "b200", bs=4),
    "hbm_bytes": lambda t, a: hbm_bytes(t, a, "b200", bs=4, variables=["context=100000"]),
    "kernel_waves": lambda t, a: kernel_waves(t, a, top=3),
    "findings": lambda t, a: tracekit.findings(t, a),
    "report": lambda t, a: tracekit.report(t, a),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_a_name_a_path_and_an_annotation_give_the_same_result(trace, name):
    fn = ANALYSES[name]
    docs = [comparable_doc(fn(trace, a)) for a in _forms()]
    assert all(d == docs[0] for d in docs[1:]), name


@pytest.mark.slow
def test_compare_findings_and_the_helpers_take_names(trace):
    k3 = load_annotation("k3_dp16")
    assert step_options("k3_dp16") == step_options(k3) == step_options(ANN_PATH)
    assert allgather_options("k3_dp16") == allgather_options(k3)
    assert annotated(trace, "k3_dp16").blocks.equals(annotated(trace, k3).blocks)
    assert PlotInput(trace=trace, deployment="d", bs=4, annotation="k3_dp16").annotation.name == k3.name
    by_name = exposure_points([PlotInput(trace=trace, deployment="d", bs=4, annotation="k3_dp16")])
    assert by_name.equals(exposure_points([PlotInput(trace=trace, deployment="d", bs=4, annotation=k3)]))
    a = compare_findings(trace, trace, ann_a="k3_dp16", ann_b=ANN_PATH)
    b = compare_findings(trace, trace, ann_a=k3, ann_b=k3)
    assert comparable_doc(a) == comparable_doc(b)


@pytest.mark.slow
def test_exposure_of_a_name_is_the_cli_result(trace, cli):
    """`tracekit.exposure(trace, "k3_dp16")` is what `tracekit exposure TRACE -a k3_dp16` prints, and it applies the
    annotation's AllGather and step options (the one merge, AllGatherOptions.with_annotation)."""
    k3 = load_annotation("k3_dp16")
    code, out, err = cli("exposure", DP16, "-a", "k3_dp16", "--no-cache", "--format", "json")
    assert code == 0, err
    cli_doc = comparable_doc(out)
    api = comparable_doc(tracekit.exposure(trace, "k3_dp16"))
    assert api == cli_doc
    old = comparable_doc(tracekit.exposure(trace, ag=AllGatherOptions().with_annotation(k3), steps=step_options(k3)))
    assert api == old
    assert api["params"]["sizes"] == dict(k3.allgather.sizes)
    assert api["params"]["group_size"] == k3.allgather.group_size


@pytest.mark.slow
def test_the_cli_options_are_objects_and_one_name_each(trace):
    """--ag-size/--group-size/--local-copy are one AllGatherOptions (ag=), --qlen/--var are q_len=/variables= (a
    dict or the CLI's NAME=NUMBER items), --hbm-gbps applies to a profile given by name or as the object. The
    keywords of earlier releases are tests/integration/test_old_keywords.py's."""
    k3 = load_annotation("k3_dp16")
    base = comparable_doc(
        tracekit.exposure(
            trace, k3, ag=AllGatherOptions(sizes=["X=1"], group_size=8, local_copy=k3.allgather.local_copy)
        )
    )
    assert base["params"]["sizes"]["X"] == 1 and base["params"]["group_size"] == 8
    cli_like = comparable_doc(tracekit.allgathers(trace, "k3_dp16", ag=AllGatherOptions(sizes={"X": 1})))
    assert cli_like["params"]["sizes"] == {**k3.allgather.sizes, "X": 1}
    assert list(cli_like["params"]["sizes"]) == [*k3.allgather.sizes, "X"]  # the annotation's order, then the user's
    comm = tracekit.communication(trace, "k3_dp16", main_stream=7)
    assert comm.params["main_stream"] == 7
    hw = load_profile("b200")
    assert comparable_doc(roofline(trace, k3, "b200", bs=4, q_len=1, hbm_gbps=7000)) == comparable_doc(
        roofline(trace, k3, with_hbm(hw, 7000), bs=4, q_len=1)
    )
    assert comparable_doc(hbm_bytes(trace, k3, "b200", bs=4, variables="context=100000")) == comparable_doc(
        hbm_bytes(trace, k3, hw, bs=4, variables={"context": 100000.0})
    )
    st = comparable_doc(kernel_selection_stats(trace, k3, select="kind:kernel", by="op_tag"))
    assert st == comparable_doc(kernel_selection_stats(trace, select="kind:kernel", by="op_tag", ann=k3))


def test_a_wrong_type_is_one_sentence(trace):
    for call in (
        lambda: tracekit.block_stats(trace, 3),
        lambda: tracekit.exposure(trace, 3),
        lambda: tracekit.communication(trace, 3),
        lambda: as_annotation(3),
    ):
        with pytest.raises(UsageError) as err:
            call()
        msg = str(err.value)
        assert msg == "ann must be an annotation name, a path to an annotation file or an Annotation, not int"
    with pytest.raises(UsageError, match="^ann_b must be"):
        tracekit.findings(trace, "k3_dp16", ann_b=1.5)
    with pytest.raises(
        UsageError, match="^hw must be a hardware profile name, a path to a profile file or a HardwareProfile, not int$"
    ):
        roofline(trace, "k3_dp16", 200)
    with pytest.raises(MissingDataError, match="blocks needs an annotation"):
        tracekit.block_stats(trace, None)


def test_the_resolvers():
    k3 = load_annotation("k3_dp16")
    assert as_annotation(None) is None and as_annotation(k3) is k3
    assert isinstance(as_annotation("k3_dp16"), Annotation) and as_annotation(ANN_PATH).name == k3.name
    hw = load_profile("b200")
    assert as_profile(None) is None and as_profile(hw) is hw
    assert isinstance(as_profile("b200"), HardwareProfile) and resolve_profile(hw) is hw
