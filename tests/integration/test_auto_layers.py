"""Automatic layers, the suggested annotation and the one-step table, against exact ground truth.

* Synthetic presets (fixtures/synth.py): every automatic layer's start and end equal the generator's layer window
  (a layer = a unit ``L<i>`` or ``draft<i>`` of the schedule: from its first main-stream kernel to the next unit's,
  or to the step's end), and two layers share an automatic type iff they share the schedule's attention x FFN
  type (draft layers apart). The schedule is the truth: ``build()`` writes the same ``simulate()`` schedule.
* Real: the sglang Qwen3-8B decode trace's automatic layers equal the shipped annotation's 36 attention + MLP
  pairs; every corpus trace with a decoder stack has its model's layer count.
* ``suggest`` -> ``blocks -a`` reproduces ``layers``; the one-step table sums to the wall everywhere, and its idle
  time equals the truth's.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import tracekit
from tracekit.analyses.structure.blocks import block_stats
from tracekit.analyses.structure.layers import find_layers, layers
from tracekit.analyses.time.onestep import one_step_table
from tracekit.analyses.steps.resolve import find_steps
from tracekit.analyses.structure.suggest import strip_docs, suggest
from tracekit.annotation import load_annotation
from tracekit.annotation.spec import parse_annotation
from tracekit.errors import MissingDataError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from fixtures.synthlib import build_trace, get_preset, simulate, write_trace  # noqa: E402 - after sys.path

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

SYN = ROOT / "fixtures" / "synthetic"
CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_DIRS = (CORPUS / "hta" / "tests" / "data", CORPUS / "tracelens" / "tests" / "traces")
NO_CORPUS = (
    f"the ../shared corpus is not present ({CORPUS} holds no *.json.gz under hta/tests/data or"
    " tracelens/tests/traces); these tests need the shared trace corpus next to the repository"
)
QWEN3 = "tracelens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
# corpus traces of decoder stacks: the layers the finder must report per step, and why
KNOWN = {
    QWEN3: ({"attn+mlp": 36}, "Qwen3-8B has 36 decoder layers (dense attention + MLP)"),
    "tracelens/tests/traces/inference/vllm_decode_full/graph_execution.json.gz": (
        {"attn:kernel_unified_attention_2d+moe": 12, "attn:kernel_unified_attention_3d+moe": 12},
        "gpt-oss-20b has 24 layers alternating sliding-window and full attention; vLLM's unified attention runs"
        " them as its 2d and 3d kernels",
    ),
    "tracelens/tests/traces/b200/eager_trace.json.gz": (
        {"attn+moe": 18, "attn:SlidingOrChunked+moe": 18},
        "gpt-oss-120b has 36 layers, half of them sliding-window attention (TRT-LLM's SlidingOrChunked fmha)",
    ),
    "tracelens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz": (
        {"attn+mlp": 4},
        "bert-small has 4 encoder layers",
    ),
    "tracelens/tests/traces/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": (
        {"attn+mlp": 24},
        "Qwen1.5-0.5B has 24 decoder layers (HF eager; an elementwise kernel repeats in each)",
    ),
    "tracelens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": (
        {"attn+mlp": 24},
        "Qwen1.5-0.5B has 24 decoder layers (HF eager)",
    ),
}

# (preset, bs, steps, committed fixture or None, step marker, noise): the committed ones are read from disk
PRESETS = [
    ("dp16", 4, 3, "dp16_bs4", "run_batch", False),
    ("dp2dcp8", 64, 3, "dp2dcp8_bs64", "run_batch", False),
    ("dsv3", 32, 3, "dsv3_bs32", "decode", True),
    ("swa", 16, 2, None, "run_batch", False),
    ("first_missing", 8, 2, None, "run_batch", False),
    ("eager_norm", 1, 2, None, "run_batch", False),
]
TRUTH_TYPES = {
    "dp16": {("KDA", "Dense"), ("KDA", "MoE"), ("MLA", "MoE"), ("draft",)},
    "dp2dcp8": {("KDA", "Dense"), ("KDA", "MoE"), ("MLA", "MoE"), ("draft",)},
    "dsv3": {("MLA", "Dense"), ("MLA", "MoE")},
    "swa": {("SWA", "MoE"), ("FullAttn", "MoE")},
    "first_missing": {("Attn", "MLP")},
    "eager_norm": {("Attn", "MLP")},
}


def truth_layers(sch) -> dict[int, list[tuple[str, int, int, tuple]]]:
    """Per step: (unit, start, end, attention x FFN type) of every decoder layer of the schedule."""
    first: dict[tuple[int, str], int] = {}
    types: dict[tuple[int, str], list[str]] = defaultdict(list)
    for b in sch.blocks:
        key = (b.step, b.unit)
        first[key] = min(first.get(key, b.start), b.start)
        types[key].append(b.type)
    out = {}
    for st in sch.steps:
        keys = sorted((k for k in first if k[0] == st.step), key=lambda k: first[k])
        rows = []
        for i, k in enumerate(keys):
            end = first[keys[i + 1]] if i + 1 < len(keys) else st.end
            if k[1].startswith("L") or k[1].startswith("draft"):
                typ = ("draft",) if k[1].startswith("draft") else tuple(types[k])
                rows.append((k[1], first[k], end, typ))
        out[st.step] = rows
    return out


@pytest.fixture(scope="module", params=PRESETS, ids=[f"{p[0]}_bs{p[1]}" for p in PRESETS])
def synthetic(request, tmp_path_factory):
    preset, bs, steps, committed, marker, noise = request.param
    sch = simulate(get_preset(preset, bs), steps=steps, seed=0)
    if committed:
        path = SYN / f"{committed}.trace.json.gz"
        truth = json.loads((SYN / f"{committed}.truth.json").read_text())
    else:
        path = tmp_path_factory.mktemp(preset) / f"{preset}_bs{bs}.trace.json.gz"
        write_trace(path, build_trace(sch, noise=noise, step_marker=marker))
        truth = None
    trace = tracekit.load(path, cache=False)
    return preset, trace, sch, truth


def test_layers_align_with_the_truth_windows(synthetic):
    preset, trace, sch, _ = synthetic
    found = find_layers(trace)
    lay = found.layers
    for step, rows in truth_layers(sch).items():
        mine = lay[lay["step"] == step]
        assert list(zip(mine["start_ns"], mine["end_ns"])) == [(s, e) for _, s, e, _ in rows], (preset, step)


def test_layer_types_partition_equals_the_truth(synthetic):
    preset, trace, sch, _ = synthetic
    lay = find_layers(trace).layers
    auto_to_truth, truth_to_auto = defaultdict(set), defaultdict(set)
    for step, rows in truth_layers(sch).items():
        mine = lay[lay["step"] == step]
        for t_auto, (_, _, _, t_truth) in zip(mine["layer_type"], rows):
            auto_to_truth[t_auto].add(t_truth)
            truth_to_auto[t_truth].add(t_auto)
    assert all(len(v) == 1 for v in auto_to_truth.values()), dict(auto_to_truth)
    assert all(len(v) == 1 for v in truth_to_auto.values()), dict(truth_to_auto)
    assert set(truth_to_auto) == TRUTH_TYPES[preset]
    drafts = [t for t, v in auto_to_truth.items() if v == {("draft",)}]
    assert all(t.startswith("draft:") for t in drafts)


NAMES = {
    "dp16": {"kda+mlp", "kda+moe", "mla+moe", "draft:attn+mlp"},
    "dp2dcp8": {"kda+mlp", "kda+moe", "mla+moe", "draft:attn+mlp"},
    "dsv3": {"mla+mlp", "mla+moe"},
    "swa": {"attn+moe/fast", "attn+moe/slow"},
    "first_missing": {"attn+mlp"},
    "eager_norm": {"attn+mlp"},
}


def test_readable_names_and_the_duration_split(synthetic):
    """Names from the categories; sliding vs full attention (one kernel name and grid, another duration) are two
    types, the sliding (even) layers the fast one."""
    preset, trace, sch, _ = synthetic
    lay = find_layers(trace).layers
    assert set(lay["layer_type"]) == NAMES[preset]
    if preset == "swa":
        first = lay[lay["step"] == 0]
        assert first["layer_type"].tolist() == ["attn+moe/fast", "attn+moe/slow"] * 12


def test_layers_result_contract(synthetic):
    preset, trace, sch, _ = synthetic
    res = layers(trace)
    s = res.summary
    for key in ("steps", "layers_per_step", "types", "head_kernels", "tail_kernels", "period_kernels"):
        assert key in s
    assert s["layers_per_step"] == len(truth_layers(sch)[0])
    assert list(res.tables["layers"].columns) == [
        "step",
        "layer",
        "layer_type",
        "start_ns",
        "end_ns",
        "kernels",
        "kernel_ns",
    ]
    assert list(res.tables["layer_types"].columns) == ["step", "layer_type", "layers", "kernel_ns", "wall_ns"]
    walls = find_steps(trace).table.set_index("step")["dur_ns"]
    lt = res.tables["layer_types"].groupby("step")["wall_ns"].sum()
    assert (lt == walls.loc[lt.index]).all()  # head + layers + between + tail windows partition each step
    one = res.tables["one_step"]
    assert set(one["group_by"]) == {"category", "layer_type"}
    sums = one.groupby(["step", "group_by"])["wall_ns"].sum()
    for (step, _), v in sums.items():
        assert v == walls[step]


def test_one_step_idle_equals_the_truths_idle(synthetic):
    preset, trace, sch, truth = synthetic
    if truth is None:
        pytest.skip("only the committed fixtures carry a truth file")
    t = one_step_table(trace.events, find_steps(trace))
    idle = t[t["name"] == "idle"].set_index("step")["wall_ns"]
    for row in truth["steps"]:
        assert idle[row["step"]] == row["ptop"]["idle_ns"]


def _round_trip(trace):
    ann_dict, res = suggest(trace)
    ann = parse_annotation(json.dumps(ann_dict).encode(), "<suggested>")
    found = find_layers(trace)
    blocks = block_stats(trace, ann).tables["blocks"]
    w = found.windows[found.windows["kernels"] > 0]
    assert res.summary["verified"]
    for step in found.steps.table["step"]:
        mine = w[w["step"] == step]
        theirs = blocks[blocks["step"] == step]
        assert list(zip(mine["start_ns"], mine["end_ns"], mine["base_type"])) == list(
            zip(theirs["start_ns"], theirs["end_ns"], theirs["block_type"].astype(str))
        ), step
    return ann_dict, res, found


def test_suggest_round_trip_on_the_presets(synthetic):
    preset, trace, sch, _ = synthetic
    ann, res, found = _round_trip(trace)
    if preset == "dp16":
        sizes = ann["allgather"]["sizes"]
        assert sorted(sizes.values()) == [387_916_800, 627_048_448, 675_282_944]
        assert ann["allgather"]["group_size"] == 8
    if preset == "swa":  # duration-only types cannot be told apart by a contains rule: one block type, said so
        assert any("differ only in kernel durations" in w for w in res.warnings)
    assert all(r["tag"] for r in ann["op_tags"])


def test_suggested_annotation_loads_from_a_file(tmp_path):
    trace = tracekit.load(SYN / "dsv3_bs32.trace.json.gz", cache=False)
    ann, _ = suggest(trace, name="my_model")
    f = tmp_path / "mine.json"
    f.write_text(json.dumps(ann))
    loaded = load_annotation(f)
    assert loaded.name == "my_model" and loaded.blocks is not None
    assert strip_docs({"a": 1, "_doc": "x", "b": [{"_doc": "y", "c": 2}]}) == {"a": 1, "b": [{"c": 2}]}


def test_no_stack_no_layers_and_suggest_says_why(tmp_path):
    evs = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{i % 5}_{i}",
            "pid": 0,
            "tid": 7,
            "ts": 10 + i * 3,
            "dur": 2,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
        for i in range(30)
    ]  # nothing repeats
    p = tmp_path / "flat.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": evs}))
    trace = tracekit.load(p, cache=False)
    with pytest.raises(MissingDataError, match="no decoder stack") as exc:
        layers(trace)  # exit 4, one sentence
    assert str(exc.value).count(". ") == 0
    res = layers(trace, missing_ok=True)  # report on any trace: no layers, said in a warning
    assert res.summary["layers_per_step"] == 0 and res.tables["layers"].empty
    assert any("no decoder stack" in w for w in res.warnings)
    with pytest.raises(MissingDataError, match="no layers were found"):
        suggest(trace)


# --------------------------------------------------------------------------------------------------
# the real traces
# --------------------------------------------------------------------------------------------------


def _corpus() -> list[Path]:
    out: list[Path] = []
    for d in CORPUS_DIRS:
        if d.is_dir():
            out += sorted(d.rglob("*.json.gz"))
    return out


def _named(rel: str) -> Path:
    p = CORPUS / rel
    if not _corpus():
        pytest.skip(NO_CORPUS)
    if not p.is_file():
        pytest.skip(f"{rel} is not in the ../shared corpus ({CORPUS})")
    return p


def test_qwen3_automatic_layers_equal_the_shipped_annotation():
    trace = tracekit.load(_named(QWEN3), cache=False)
    blocks = block_stats(trace, load_annotation("qwen3_dense_sglang_rocm")).tables["blocks"]
    att = blocks[blocks["block_type"] == "attention"].reset_index(drop=True)
    mlp = blocks[blocks["block_type"] == "mlp"].reset_index(drop=True)
    lay = find_layers(trace).layers
    assert len(lay) == len(att) == 36
    assert list(zip(lay["start_ns"], lay["end_ns"])) == list(zip(att["start_ns"], mlp["end_ns"]))


def _corpus_params():
    files = _corpus()
    if not files:
        return [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason=NO_CORPUS))]
    return [pytest.param(p, id=p.relative_to(CORPUS).as_posix()) for p in files]


@pytest.mark.parametrize("path", _corpus_params())
def test_corpus_layers_counts_and_the_one_step_table(path):
    rel = path.relative_to(CORPUS).as_posix()
    trace = tracekit.load(path, cache=False)
    try:
        res = layers(trace)
    except MissingDataError as exc:  # e.g. a trace with no GPU activity
        pytest.skip(f"{rel}: {exc}")
    s = res.summary
    print(f"{rel}: {s['layers_per_step']} layers per step, types {s['types']}")
    walls = find_steps(trace).table.set_index("step")["dur_ns"]
    sums = res.tables["one_step"].groupby(["step", "group_by"])["wall_ns"].sum()
    assert all(v == walls[st] for (st, _), v in sums.items())
    if rel in KNOWN:
        want, why = KNOWN[rel]
        assert s["types"] == want, why
        assert s["check"]["agrees"], s["check"]  # one attention -> MLP/MoE transition per layer, counted apart
        _round_trip(trace)


# --------------------------------------------------------------------------------------------------
# edges and one-offs, on hand-written kernel sequences
# --------------------------------------------------------------------------------------------------

NORM, QKV, ATTN, O, UP, ACT, DOWN = (
    "void flashinfer::norm::FusedAddRMSNormKernel<8u>(x)",
    "nvjet_qkv_TNT",
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<x>(p)",
    "nvjet_o_TNT",
    "nvjet_up_TNT",
    "void flashinfer::activation::act_and_mul_kernel<x>(y)",
    "nvjet_down_TNT",
)
LAYER = [NORM, QKV, ATTN, O, NORM, UP, ACT, DOWN]
HEAD_K = ["_compute_position_kernel", "void at::native::indexSelectLargeIndex<x>(y)"]
TAIL_K = [NORM, "nvjet_lm_head_TNN", "void at::native::reduce_kernel<ArgMaxOps<float>>(x)"]


def _sequence_trace(tmp_path, names, name="seq"):
    evs, t = [], 100.0
    for i, n in enumerate(names):
        evs.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": n,
                "pid": 0,
                "tid": 7,
                "ts": round(t, 3),
                "dur": 4.0,
                "args": {"device": 0, "stream": 7, "correlation": i},
            }
        )
        t += 5.0
    evs.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "step[DECODE bs=4]",
            "pid": 0,
            "tid": 7,
            "ts": 99.0,
            "dur": t - 98.0,
            "args": {},
        }
    )
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": evs}))
    return tracekit.load(p, cache=False)


def _starts(trace, names):
    """Start of each kernel by position (the sequence is the main stream)."""
    return [100_000 + 5_000 * i for i in range(len(names))]


def test_last_layer_missing_a_kernel_and_a_middle_layer_with_one_added(tmp_path):
    body = LAYER * 2 + LAYER[:6] + ["extra_elementwise_kernel"] + LAYER[6:] + LAYER * 2 + LAYER[:-1]
    names = HEAD_K + body + TAIL_K
    lay = find_layers(_sequence_trace(tmp_path, names)).layers
    starts = _starts(None, names)
    assert len(lay) == 6 and set(lay["layer_type"]) == {"attn+mlp"}
    firsts = [2, 10, 18, 27, 35, 43]  # index of each layer's first kernel (the one-off adds a kernel to layer 2)
    assert lay["start_ns"].tolist() == [starts[i] for i in firsts]
    assert lay["end_ns"].iloc[-1] == starts[len(names) - len(TAIL_K)]  # the tail starts at the final norm


def test_first_layer_with_a_kernel_added_and_a_draft_run(tmp_path):
    draft_layer = [
        NORM,
        "nvjet_dq_TNT",
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<x>(p)",
        "nvjet_do_TNT",
        NORM,
        UP,
        ACT,
        DOWN,
    ]
    names = (
        HEAD_K
        + ["nvjet_first_layer_extra_TNT"]
        + LAYER * 4
        + TAIL_K
        + ["void at::native::indexSelectLargeIndex<x>(y)"]
        + draft_layer * 3
    )
    lay = find_layers(_sequence_trace(tmp_path, names)).layers
    starts = _starts(None, names)
    types = lay["layer_type"].tolist()
    assert types == ["attn+mlp"] * 4 + ["draft:attn+mlp"] * 3
    # the draft run takes the embedding before it; the target's extra first kernel stays in the head
    first_draft = len(HEAD_K) + 1 + 4 * len(LAYER) + len(TAIL_K)
    assert lay["start_ns"].iloc[4] == starts[first_draft]
    assert lay["start_ns"].iloc[0] == starts[len(HEAD_K) + 1]


def test_first_layer_missing_a_kernel_inside(tmp_path):
    names = HEAD_K + [NORM, QKV, ATTN] + LAYER[4:] + LAYER * 4 + TAIL_K  # layer 0 has no o_proj
    lay = find_layers(_sequence_trace(tmp_path, names)).layers
    assert len(lay) == 5 and lay["start_ns"].iloc[0] == _starts(None, names)[len(HEAD_K)]
    assert set(lay["layer_type"]) == {"attn+mlp"}


def test_cli_layers_suggest_then_blocks(cli, tmp_path):
    trace = SYN / "dsv3_bs32.trace.json.gz"
    code, out, err = cli("layers", trace, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "tracekit.layers/1" and doc["summary"]["types"] == {"mla+mlp": 3, "mla+moe": 58}
    assert {"layers", "layer_types", "one_step"} <= set(doc["tables"])
    ann = tmp_path / "ann.json"
    code, out, err = cli("suggest", trace, "-o", ann, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["summary"]["verified"] is True and ann.is_file()
    code, out, err = cli("blocks", trace, "-a", ann, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["summary"]["blocks_per_step"] == {"head": 1, "mla+mlp": 3, "mla+moe": 58, "tail": 1}
    bad = tmp_path / "bad.json"
    bad.write_text('{"rules": [{"category": "gemm", "pattern": "("}]}')
    code, out, err = cli("layers", trace, "--categories", bad)
    assert code == 3 and "$.rules[0].pattern" in err
