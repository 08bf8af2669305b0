"""The annotation engine (A3) and kernel statistics (A4) on hand-built traces, and annotation validation."""

from __future__ import annotations

import json

import pytest

import tracekit
from tracekit.analyses.structure.blocks import block_stats, kernel_selection_stats
from tracekit.annotation import load_annotation, shipped
from tracekit.annotation.spec import parse_annotation
from tracekit.errors import DataFileError, InputError, MissingDataError
from tests.conftest import kernel, memcpy, write_trace

GEMM = "void deep_gemm::fp8_gemm<0u>"


def ann_doc(**over) -> dict:
    doc = {
        "name": "toy",
        "step": {"name": "scheduler.run_batch", "min_ms": 0},
        "blocks": {
            "boundary": ["^norm$"],
            "types": [{"type": "KDA", "contains": "kda_state"}, {"type": "MoE", "contains": "moe_gemm"}],
            "position": {"first": "head", "last": "tail", "default": "MLA"},
            "expect": {"KDA": 1, "MLA": 1, "MoE": 2},
        },
        "op_tags": [
            {"tag": "qkv_proj", "block_type": "KDA", "pattern": "fp8_gemm", "ordinal": 1},
            {"tag": "o_proj", "block_type": "KDA", "pattern": "fp8_gemm", "ordinal": 2},
            {"tag": "mla_gemm", "block_type": "MLA", "pattern": "fp8_gemm"},
        ],
        "allgather": {"sizes": {"KDA": 4000}},
    }
    doc.update(over)
    return doc


def load_ann(tmp_path, doc, name="a.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return load_annotation(p)


def step_events(t0: float) -> list:
    """head | KDA (2 GEMMs, a state kernel, a side-stream local copy) | MoE | MLA (untyped) | MoE | tail."""
    t = t0
    ev = [
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "scheduler.run_batch",
            "pid": 0,
            "tid": 7,
            "ts": t0,
            "dur": 1000.0,
        }
    ]

    def k(name, dur, stream=7):
        nonlocal t
        ev.append(kernel(name, t, dur, stream=stream))
        if stream == 7:
            t += dur + 1.0

    k("embed", 10.0)
    k("norm", 5.0)
    k(GEMM, 20.0)
    k("memcpy128", 4.0, stream=20)
    k("kda_state", 30.0)
    k(GEMM, 10.0)
    ev.append(memcpy("Memcpy PtoP (Device -> Device)", t - 20.0, 8.0, nbytes=1000, stream=20))
    k("norm", 5.0)
    k("moe_gemm", 40.0)
    k("norm", 5.0)
    k(GEMM, 25.0)
    k("mla_decode", 60.0)
    k("norm", 5.0)
    k("moe_gemm", 40.0)
    k("norm", 5.0)
    k("lm_head", 15.0)
    return ev


def test_blocks_types_positions_tags(tmp_path):
    trace = tracekit.load(write_trace(tmp_path / "t.json", step_events(0.0) + step_events(2000.0)), cache=False)
    r = block_stats(trace, load_ann(tmp_path, ann_doc()))
    b = r.tables["blocks"]
    assert b[b["step"] == 0]["block_type"].tolist() == ["head", "KDA", "MoE", "MLA", "MoE", "tail"]
    assert b[b["step"] == 0]["type_layer"].tolist() == [0, 0, 0, 0, 1, 0]
    per = r.tables["per_step_type"].set_index(["step", "block_type"])
    # KDA block: norm 5 + GEMM 20 + side-stream local copy 4 + state 30 + GEMM 10; the PtoP copy is not a kernel
    assert per.loc[(0, "KDA"), "kernel_ns"] == 69_000 and per.loc[(0, "KDA"), "kernels"] == 5
    assert per.loc[(0, "MoE"), "blocks"] == 2 and per.loc[(0, "MoE"), "kernel_ns"] == 90_000
    assert per.loc[(0, "MLA"), "kernel_ns"] == 90_000
    tags = r.tables["per_tag"].set_index("op_tag")
    assert tags.loc["qkv_proj", "mean_ns"] == 20_000 and tags.loc["o_proj", "mean_ns"] == 10_000
    assert tags.loc["qkv_proj", "count"] == 2  # one per KDA block, two steps
    assert tags.loc["mla_gemm", "mean_ns"] == 25_000
    assert r.summary["median_kernel_ns_by_type"]["KDA"] == 69_000
    assert r.summary["untyped_blocks"] == 0 and not [w for w in r.warnings if "expected" in w]


def test_untyped_blocks_are_counted_and_expectations_checked(tmp_path):
    doc = ann_doc()
    doc["blocks"]["position"] = {"first": "head", "last": "tail"}  # no default: the MLA block stays untyped
    doc["blocks"]["expect"] = {"KDA": 2}
    trace = tracekit.load(write_trace(tmp_path / "t.json", step_events(0.0)), cache=False)
    r = block_stats(trace, load_ann(tmp_path, doc))
    assert r.summary["untyped_blocks"] == 1
    assert any("untyped" in w for w in r.warnings)
    assert any("expected 2 KDA" in w for w in r.warnings)


def test_stats_overlap_split_is_exact(tmp_path):
    # three state kernels; a PtoP copy overlaps the first and touches nothing of the others
    evs = [
        kernel("kda_state", 0.0, 10.0),
        kernel("kda_state", 20.0, 30.0),
        kernel("kda_state", 60.0, 20.0),
        memcpy("Memcpy PtoP (Device -> Device)", 5.0, 10.0, stream=20),
        memcpy("Memcpy PtoP (Device -> Device)", 50.0, 10.0, stream=20),
    ]  # ends exactly where #3 starts
    trace = tracekit.load(write_trace(tmp_path / "t.json", evs), cache=False)
    r = kernel_selection_stats(trace, select="name:kda_state", overlap_with="copy:PtoP")
    s = r.summary
    assert (s["overlapping_events"], s["overlapping_mean_ns"]) == (1, 10_000.0)
    assert (s["alone_events"], s["alone_mean_ns"]) == (2, 25_000.0)
    assert r.tables["stats"]["p90_ns"].iloc[0] == pytest.approx(28_000.0)
    same = kernel_selection_stats(trace, select="kind:kernel", overlap_with="kind:kernel")
    assert same.summary["overlapping_events"] == 0  # a kernel never overlaps itself


def test_block_and_tag_selectors_need_an_annotation(tmp_path):
    trace = tracekit.load(write_trace(tmp_path / "t.json", step_events(0.0)), cache=False)
    with pytest.raises(MissingDataError, match="annotation"):
        kernel_selection_stats(trace, select="block:KDA")
    r = kernel_selection_stats(trace, select="block:KDA;kind:kernel", by="op_tag", ann=load_ann(tmp_path, ann_doc()))
    t = r.tables["stats"].set_index("op_tag")
    assert set(t.index) == {"qkv_proj", "o_proj", "(none)"}
    assert t.loc["(none)", "count"] == 3  # the norm, the local copy and the state kernel carry no tag


@pytest.mark.parametrize(
    "mutate,where",
    [
        (lambda d: d["blocks"].update(boundary=[]), "$.blocks.boundary"),
        (lambda d: d["blocks"].update(boundary=["(unclosed"]), "$.blocks.boundary[0]"),
        (lambda d: d["blocks"]["types"][0].update(contains="[bad"), "$.blocks.types[0].contains"),
        (lambda d: d["blocks"]["types"][0].pop("type"), "$.blocks.types[0]"),
        (lambda d: d["blocks"]["position"].update(middle="x"), "$.blocks.position"),
        (lambda d: d["op_tags"][0].update(ordinal=0), "$.op_tags[0].ordinal"),
        (lambda d: d["op_tags"][1].update(pattern="*"), "$.op_tags[1].pattern"),
        (lambda d: d["allgather"].update(sizes={"KDA": "big"}), "$.allgather.sizes"),
        (lambda d: d.update(main_stream="fast"), "$.main_stream"),
        (lambda d: d.update(colour="red"), "colour"),
    ],
)
def test_bad_annotation_names_file_and_field(tmp_path, mutate, where):
    doc = ann_doc()
    mutate(doc)
    with pytest.raises(DataFileError) as exc:
        load_ann(tmp_path, doc, "bad.json")
    msg = str(exc.value)
    assert "bad.json" in msg and where in msg


def test_not_json_and_unknown_name(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{nope")
    with pytest.raises(DataFileError, match="not valid JSON"):
        load_annotation(p)
    with pytest.raises(InputError, match="neither a file nor a shipped annotation"):
        load_annotation("no_such_model")


def test_shipped_annotations_load_by_name_and_alias():
    names = shipped()
    assert "decode_sample" in names
    for name in names:
        ann = load_annotation(name)
        assert ann.name
    assert parse_annotation(b'{"name": "x"}', "inline").blocks is None
