"""Options as objects (issue 27): AllGatherOptions is one hashable value, and the flat keywords of earlier
releases still work through options_as_objects, with a DeprecationWarning and the same meaning."""

import inspect
import warnings

import pytest

import tracekit
from tracekit.analyses.options import AllGatherOptions, parse_sizes
from tracekit.analyses.steps.keywords import options_as_objects
from tracekit.analyses.steps.model import StepOptions, step_options
from tracekit.errors import UsageError

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
def _analysis(trace, ann=None, *, steps=None, ag=None, q_len=None):
    return {"steps": steps, "ag": ag, "q_len": q_len}


def test_signature_is_the_new_one():
    assert list(inspect.signature(_analysis).parameters) == ["trace", "ann", "steps", "ag", "q_len"]


def test_new_keywords_pass_through_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _analysis("t", steps=StepOptions(name="x"), ag=AllGatherOptions(group_size=4), q_len=2)
    assert out["steps"] == StepOptions(name="x") and out["ag"].group_size == 4 and out["q_len"] == 2


def test_old_keywords_warn_and_become_the_objects():
    with pytest.warns(DeprecationWarning, match=r"step_name=, min_step_ns=, group_size=, ag_size=, qlen="):
        out = _analysis("t", step_name="decode", min_step_ns=5, group_size=8, ag_size=["KDA=7"], qlen=3)
    assert out["steps"] == step_options(None, step_name="decode", min_step_ns=5)
    assert out["ag"] == AllGatherOptions(group_size=8, sizes={"KDA": 7})
    assert out["q_len"] == 3


def test_old_step_keywords_merge_with_the_annotation_as_before():
    with pytest.warns(DeprecationWarning):
        out = _analysis("t", "k3_dp16", min_step_ns=7)
    assert out["steps"] == step_options("k3_dp16", min_step_ns=7)
    assert out["steps"].name == step_options("k3_dp16").name  # the annotation's marker kept


def test_old_and_new_for_one_option_is_a_usage_error():
    with pytest.raises(UsageError), pytest.warns(DeprecationWarning):
        _analysis("t", steps=StepOptions(), step_name="x")
    with pytest.raises(UsageError), pytest.warns(DeprecationWarning):
        _analysis("t", ag=AllGatherOptions(), group_size=8)
    with pytest.raises(UsageError), pytest.warns(DeprecationWarning):
        _analysis("t", q_len=1, qlen=2)
    with pytest.raises(UsageError), pytest.warns(DeprecationWarning):
        _analysis("t", ag_size=["A=1"], sizes=["A=2"])


def test_an_old_keyword_the_function_never_had_is_a_type_error():
    @options_as_objects
    def f(trace, *, steps=None):
        return steps

    with pytest.raises(TypeError), pytest.warns(DeprecationWarning):
        f("t", group_size=8)


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
