"""tracekit.analyses.structure.fit (`tracekit annotations`): the listing, the fit of each annotation, best_fit."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.analyses.structure.fit import (
    FIT_COLUMNS,
    LIST_COLUMNS,
    PARTS,
    annotation_fit,
    best_fit,
    declared_frameworks,
    declared_hardware,
    fits_above,
)
from tracekit.annotation import load_annotation
from tracekit.annotation.spec import parse_annotation, shipped
from tracekit.result import to_json_obj

ROOT = Path(__file__).resolve().parents[3]
SYN = ROOT / "fixtures" / "synthetic"


@pytest.fixture(scope="module")
def dp16():
    return tracekit.load(SYN / "dp16_bs4.trace.json.gz", cache=False)


def _table(res):
    return res.tables["annotations"]


def test_the_threshold_is_data():
    doc = json.loads((ROOT / "tracekit" / "data" / "fit.json").read_text())
    assert fits_above() == doc["fits_above"] and 0 < fits_above() < 1
    assert set(doc["weights"]) == set(PARTS)


def test_without_a_trace_it_lists_every_shipped_annotation():
    res = annotation_fit()
    t = _table(res)
    assert list(t.columns) == LIST_COLUMNS
    files = {p.stem for p in shipped().values()}
    assert set(t["name"]) == files and res.summary["annotations"] == len(files)
    assert res.summary["best"] is None and res.summary["best_score"] is None
    row = t.set_index("name").loc["qwen3_dense_sglang_rocm"]
    assert row["hardware"] == ["AMD"] and row["frameworks"] == ["sglang"] and row["blocks_per_step"] == 72
    assert "Qwen3-8B" in row["description"] and row["file"].endswith("qwen3_dense_sglang_rocm.json")
    k3 = t.set_index("name").loc["k3_dp16"]
    assert k3["hardware"] == ["NVIDIA"] and "sgl_b_k3_decode_dp16" in k3["aliases"]


def test_what_an_annotation_declares():
    assert declared_hardware(load_annotation("deepseek_v3")) == ["NVIDIA"]  # "Blackwell"
    assert declared_hardware(load_annotation("decode_sample")) == []
    assert declared_frameworks(load_annotation("k3_dp2_dcp8")) == ["sglang"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "fixture, best",
    [
        ("dp16_bs4", "k3_dp16"),
        ("dp16_bs24", "k3_dp16"),
        ("dp2dcp8_bs64", "k3_dp2_dcp8"),
        ("dp2dcp8_bs128", "k3_dp2_dcp8"),
        ("dsv3_bs32", "deepseek_v3"),
    ],
)
def test_each_synthetic_fixture_picks_its_annotation(fixture, best):
    res = annotation_fit(tracekit.load(SYN / f"{fixture}.trace.json.gz", cache=False))
    t = _table(res)
    assert list(t.columns) == FIT_COLUMNS
    assert res.summary["best"] == best and t["name"].iloc[0] == best
    assert res.summary["best_score"] == t["score"].iloc[0] > fits_above()
    assert list(t["rank"]) == list(range(1, len(t) + 1))
    scored = t["score"].dropna()  # the unscored (null) rank last
    assert scored.is_monotonic_decreasing and scored.between(0, 1).all() and t["score"].iloc[len(scored) :].isna().all()
    top = t.iloc[0]
    assert top["marker"] == 1 and top["typed"] > 0.99 and top["tags"] == 1 and top["expect"] == 1
    assert top["hardware"] == 1 and top["framework"] == 1 and top["layers"] > 0.95
    assert bool(top["fits"]) and (t["fits"] == (t["score"] > fits_above())).all()
    # an annotation for AMD whose boundary kernels are not here cuts no block: unscored (null), with the reason
    q = t.set_index("name").loc["qwen3_dense_sglang_rocm"]
    assert pd.isna(q["score"]) and not q["fits"] and "cuts no block" in q["reason"] and q[list(PARTS)].isna().all()


@pytest.mark.slow
def test_dp16_is_not_fitted_by_the_dp2_dcp8_annotation(dp16):
    t = _table(annotation_fit(dp16)).set_index("name")
    assert t.loc["k3_dp2_dcp8", "score"] < fits_above() < t.loc["k3_dp16", "score"]
    assert t.loc["k3_dp2_dcp8", "comm"] == 0  # its DCP all-to-all is not in a DP16 trace
    assert t.loc["k3_dp2_dcp8", "typed"] < 0.9  # the MLA blocks are untyped under it


def test_an_annotation_the_engine_refuses_is_unscored_with_the_reason(dp16, tmp_path):
    no_blocks = parse_annotation(b'{"name": "no_blocks"}', "no_blocks.json")
    far_stream = parse_annotation(
        json.dumps({"name": "far", "main_stream": 999, "blocks": {"boundary": ["x"]}}).encode(), "far.json"
    )
    res = annotation_fit(dp16, annotations=[no_blocks, far_stream, "k3_dp16"])
    t = _table(res).set_index("name")
    assert res.summary["annotations"] == 3 and res.summary["best"] == "k3_dp16"
    assert pd.isna(t.loc["no_blocks", "score"]) and "no 'blocks' section" in t.loc["no_blocks", "reason"]
    assert pd.isna(t.loc["far", "score"]) and "999" in t.loc["far", "reason"]
    assert t.loc[["no_blocks", "far"], list(PARTS[:6])].isna().all().all()


@pytest.mark.slow
def test_a_path_and_a_name_give_the_same_fit(dp16):
    by_name = to_json_obj(annotation_fit(dp16, annotations=["k3_dp16"]))
    by_path = to_json_obj(annotation_fit(dp16, annotations=[str(shipped()["k3_dp16"])]))
    by_path["params"] = by_name["params"]
    assert by_name == by_path


def test_the_same_steps_for_every_annotation(dp16):
    from tracekit.analyses.steps.resolve import find_steps

    st = find_steps(dp16)
    res = annotation_fit(dp16, steps=st)
    assert res.summary["best"] == "k3_dp16" and res.params["phase"] == st.options.phase


@pytest.mark.slow
def test_best_fit_reuses_the_layers_and_says_none_when_nothing_fits(dp16, tmp_path):
    from tracekit.analyses.structure.layers import layers
    from tracekit.analyses.steps.resolve import find_steps
    from tests.conftest import kernel, load_events

    st = find_steps(dp16)
    name, score = best_fit(dp16, st, layers=layers(dp16, steps=st))
    assert name == "k3_dp16" and score > fits_above()
    assert best_fit(dp16, st) == (name, score)
    toy = load_events(tmp_path, [kernel(f"toy_kernel_{i % 3}", 10 * i, 5) for i in range(30)])
    assert best_fit(toy, None) is None
    res = annotation_fit(toy)
    assert res.summary["best"] is None and any("no annotation fits" in w for w in res.warnings)


@pytest.mark.slow
def test_the_cli_gives_the_api_s_json(cli, dp16):
    code, out, err = cli("annotations", SYN / "dp16_bs4.trace.json.gz", "--no-cache", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    api = json.loads(
        json.dumps(to_json_obj(annotation_fit(tracekit.load(SYN / "dp16_bs4.trace.json.gz", cache=False))))
    )
    for x in (doc, api):
        for inp in x["inputs"]:
            inp.pop("from_cache", None)
    assert doc == api and doc["schema"] == "tracekit.annotations/1"
    code, out, err = cli("annotations", "--format", "json")
    assert code == 0 and json.loads(out) == json.loads(json.dumps(to_json_obj(annotation_fit())))
    code, out, err = cli(
        "annotations",
        SYN / "dp16_bs4.trace.json.gz",
        "-a",
        "k3_dp16",
        "-a",
        "deepseek_v3",
        "--no-cache",
        "--format",
        "json",
    )
    assert code == 0 and [r["name"] for r in json.loads(out)["tables"]["annotations"]] == ["k3_dp16", "deepseek_v3"]
    for fmt in ("table", "csv", "md", "html"):
        code, out, err = cli("annotations", SYN / "dp16_bs4.trace.json.gz", "--no-cache", "--format", fmt)
        assert code == 0 and out.strip(), (fmt, err)
