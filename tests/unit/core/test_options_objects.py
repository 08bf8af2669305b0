"""Options as objects: AllGatherOptions is one hashable value, and options_as_objects takes the CLI's spellings
(paths, annotation names, the long options as keywords) and turns them into the objects, with no warning."""

import inspect
import warnings

import pytest

import tracekit
from tracekit.analyses.options import AllGatherOptions, parse_sizes
from tracekit.analyses.steps.keywords import options_as_objects
from tracekit.analyses.steps.model import StepOptions, step_options
from tracekit.errors import UsageError
from tracekit.trace import Trace

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SAMPLE_TRACE = REPO / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"


def test_allgather_options_normalise_and_hash():
    a = AllGatherOptions(group_size=8, sizes={"KDA": 1, "MLA": 2})
    b = AllGatherOptions(group_size=8.0, sizes=["KDA=1", "MLA=2"])
    assert a == b and hash(a) == hash(b)
    assert a.sizes == (("KDA", 1), ("MLA", 2)) and a.size_map == {"KDA": 1, "MLA": 2}
    assert AllGatherOptions(group_size=8, sizes=a.sizes) == a  # its own sizes give it back


def test_allgather_sizes_keep_their_order_which_breaks_ties():
    """The first listed type wins a full size within the tolerance of two (segments._per_ag), so the order is part
    of the value, and the merge keeps the annotation's order with the user's new types after it (as
    allgather_options always did: params.sizes list them so)."""
    assert AllGatherOptions(sizes={"MLA": 2, "KDA": 1}).sizes == (("MLA", 2), ("KDA", 1))
    assert AllGatherOptions(sizes={"MLA": 2, "KDA": 1}) != AllGatherOptions(sizes={"KDA": 1, "MLA": 2})
    merged = AllGatherOptions(sizes=["X=1", "KDA=5"]).with_annotation("k3_dp16").size_map
    assert list(merged) == ["KDA", "MLA", "draft", "X"] and merged["KDA"] == 5
    assert tracekit.AllGatherOptions is AllGatherOptions


@pytest.mark.parametrize(
    "bad",
    [
        {"group_size": 1},
        {"group_size": 2.5},
        {"group_size": "eight"},
        {"sizes": ["KDA"]},
        {"sizes": ["=5"]},
        {"sizes": {"KDA": -1}},
        {"local_copy": 3},
    ],
)
def test_allgather_options_refuse_nonsense_in_one_sentence(bad):
    with pytest.raises(UsageError):
        AllGatherOptions(**bad)


def test_parse_sizes_forms():
    assert parse_sizes(None) == {} and parse_sizes("A=1_000") == {"A": 1000} and parse_sizes({"B": 3}) == {"B": 3}


@options_as_objects
def _analysis(trace: Trace | None = None, ann=None, *, steps=None, ag=None, q_len=None):
    return {"trace": trace, "ann": ann, "steps": steps, "ag": ag, "q_len": q_len}


def test_signature_is_the_functions_own():
    assert list(inspect.signature(_analysis).parameters) == ["trace", "ann", "steps", "ag", "q_len"]


def test_objects_pass_through_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _analysis(None, steps=StepOptions(name="x"), ag=AllGatherOptions(group_size=4), q_len=2)
    assert out["steps"] == StepOptions(name="x") and out["ag"].group_size == 4 and out["q_len"] == 2


def test_the_clis_spellings_become_the_objects_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _analysis(None, step_name="decode", min_step_ms=5, group_size=8, ag_size=["KDA=7"], qlen=3)
    assert out["steps"] == step_options(None, step_name="decode", min_step_ns=5_000_000)
    assert out["ag"] == AllGatherOptions(group_size=8, sizes={"KDA": 7})
    assert out["q_len"] == 3


def test_step_flags_merge_with_the_annotation_given_by_name():
    out = _analysis(None, annotation="k3_dp16", min_step_ms=7)
    assert out["ann"].name == "k3_dp16"
    assert out["steps"] == step_options("k3_dp16", min_step_ns=7_000_000)
    assert out["steps"].name == step_options("k3_dp16").name  # the annotation's marker kept


def test_a_path_is_loaded_as_the_cli_loads_it():
    out = _analysis(str(SAMPLE_TRACE), no_cache=True)
    assert isinstance(out["trace"], tracekit.Trace) and out["trace"].report.from_cache is False


def test_one_option_twice_is_a_type_error():
    with pytest.raises(TypeError, match="same option"):
        _analysis(None, steps=StepOptions(), step_name="x")
    with pytest.raises(TypeError, match="same option"):
        _analysis(None, ag=AllGatherOptions(), group_size=8)
    with pytest.raises(TypeError, match="same option"):
        _analysis(None, q_len=1, qlen=2)


def test_a_wrong_type_is_one_sentence_naming_what_was_given():
    with pytest.raises(
        TypeError, match=r"^trace must be a path \(str or Path\) or a loaded Trace \(tracekit.load\), not int$"
    ):
        _analysis(3)
    with pytest.raises(TypeError, match=r"^ann must be an annotation name.*not float$"):
        _analysis(None, annotation=1.5)


def test_a_keyword_the_function_never_had_is_a_type_error():
    @options_as_objects
    def f(trace, *, steps=None):
        return steps

    with pytest.raises(TypeError):
        f("t", group_size=8)
    with pytest.raises(TypeError):
        f("t", nonsense=1)


def test_with_annotation_is_the_old_merge():
    from tracekit.analyses.comm.segments import allgather_options

    for kw in ({}, {"group_size": 4}, {"sizes": ["KDA=5", "NEW=9"]}, {"local_copy": "foo.*"}):
        merged = AllGatherOptions(**kw).with_annotation("k3_dp16")
        assert merged.as_keywords() == allgather_options("k3_dp16", **kw)
    assert AllGatherOptions(group_size=4).with_annotation(None) == AllGatherOptions(group_size=4)


@pytest.mark.parametrize("bad", ["ptop", {"group_size": 8}, 8])
def test_ag_of_another_type_is_one_sentence(bad):
    """ag= is an AllGatherOptions for the analyses (wall's and the exports' ag='ptop' is another option)."""
    with pytest.raises(UsageError, match="AllGatherOptions"):
        AllGatherOptions.of(bad)
    t = tracekit.load(SAMPLE_TRACE, cache=False)
    with pytest.raises(UsageError):
        tracekit.exposure(t, "k3_dp16", ag=bad)


def test_an_annotations_bad_size_is_named_in_the_annotation(tmp_path):
    import json as _json

    from tracekit.errors import DataFileError

    doc = _json.loads((REPO / "annotations" / "k3_dp16.json").read_text())
    doc["allgather"]["sizes"]["KDA"] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(_json.dumps(doc))
    with pytest.raises(DataFileError, match=r"\$\.allgather\.sizes\.KDA"):
        tracekit.load_annotation(str(bad))
