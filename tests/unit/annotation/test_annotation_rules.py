"""The annotation rules of issue 15 on small hand-built traces with obvious answers, and on synthetic deployments
against their exact truth:

* type rules by the duration of a matching kernel (``duration: short|long`` clustered per step, ``min_us`` /
  ``max_us``), by its launch ``grid``, by ``parity`` among the step's blocks that match the rest of the rule;
* the boundary rule ``after`` (the previous main-stream kernel must match);
* no clear duration gap: a warning, and no block typed by duration (never a guess);
* the ``swa`` preset (sliding-window and full attention, one kernel name and grid, only the duration differs)
  typed by duration equals the schedule's truth; ``first_missing`` (layer 0 has no input norm) cut by ``after``;
* docs/annotations.md names every field of the type and boundary rules.

That the shipped annotations give the blocks they gave before is what tests/unit/structure/test_blocks.py and
tests/integration (parity with the synthetic truth) check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec
import pytest

from tests.conftest import gpu_ann, kernel, load_events
from tracekit.analyses.steps.resolve import find_steps
from tracekit.annotation import annotate, spec
from tracekit.annotation.spec import parse_annotation
from tracekit.errors import DataFileError

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ATTN = "attention_kernel"


def ann(types=(), boundary=("^norm$",), position=None, **blocks) -> spec.Annotation:
    doc = {
        "name": "rules",
        "step": {"name": "scheduler.run_batch", "min_ms": 0},
        "blocks": {"boundary": list(boundary), "types": list(types), **blocks},
    }
    if position is not None:
        doc["blocks"]["position"] = position
    return parse_annotation(json.dumps(doc).encode(), "rules.json")


def step(t0: float, kernels: list, ext: int = 1) -> list:
    """One step marker around main-stream kernels (name, dur µs[, args]) laid end to end with 1 µs gaps."""
    evs, t = [], t0 + 1.0
    for k in kernels:
        name, dur, args = k if len(k) == 3 else (*k, {})
        evs.append(kernel(name, t, dur, **args))
        t += dur + 1.0
    return [gpu_ann("scheduler.run_batch", t0, t - t0 + 1.0, ext=ext)] + evs


def run(tmp_path, events, annotation):
    trace = load_events(tmp_path, events)
    a = annotate(trace, annotation, find_steps(trace, ann=annotation).table)
    return a


def types_of(a, s=0) -> list[str]:
    b = a.blocks
    return b[b["step"] == s]["block_type"].astype(str).tolist()


def layers(attn_us: list, **attn_args) -> list:
    """A block per attention duration: norm, attention, gemm."""
    out = []
    for d in attn_us:
        out += [("norm", 2.0), (ATTN, d, dict(attn_args)), ("gemm", 3.0)]
    return out


# ------------------------------------------------------------------------------------------------
# duration
# ------------------------------------------------------------------------------------------------

SHORT_LONG = [
    {"type": "swa", "contains": ATTN, "duration": "short"},
    {"type": "full", "contains": ATTN, "duration": "long"},
]


def test_duration_short_and_long_clusters_per_step(tmp_path):
    # step 0 around 5 and 50 µs; step 1 around 20 and 200 µs: 20 is long in step 0's scale but short in its own
    evs = step(0.0, layers([5.0, 50.0, 5.2, 51.0, 4.9])) + step(1000.0, layers([200.0, 20.0, 21.0, 198.0]), ext=2)
    a = run(tmp_path, evs, ann(SHORT_LONG))
    assert types_of(a, 0) == ["swa", "full", "swa", "full", "swa"]
    assert types_of(a, 1) == ["full", "swa", "swa", "full"]
    assert a.warnings == []


def test_duration_is_the_blocks_time_in_the_matching_kernels(tmp_path):
    # two 3 µs attention kernels make 6 µs; one 6.5 µs is close to that, the 30 µs one is long
    evs = step(0.0, [("norm", 2.0), (ATTN, 3.0), (ATTN, 3.0), ("norm", 2.0), (ATTN, 6.5), ("norm", 2.0), (ATTN, 30.0)])
    a = run(tmp_path, evs, ann(SHORT_LONG))
    assert types_of(a) == ["swa", "swa", "full"]


def test_no_clear_gap_is_a_warning_not_a_guess(tmp_path):
    evs = step(0.0, layers([5.0, 6.0, 7.0, 8.0])) + step(1000.0, layers([5.0, 50.0]), ext=2)
    a = run(tmp_path, evs, ann(SHORT_LONG + [{"type": "attn", "contains": ATTN}]))
    assert types_of(a, 0) == ["attn"] * 4  # the next rule types them: no duration rule matched
    assert types_of(a, 1) == ["swa", "full"]  # the other step has its gap
    w = [x for x in a.warnings if "no clear short/long gap" in x]
    assert len(w) == 1  # one warning for the short and the long rule of one pattern
    assert "1 of 2 step(s)" in w[0] and "step 0" in w[0] and "gap_ratio 3" in w[0]


def test_equal_durations_and_a_lone_block_are_not_split(tmp_path):
    evs = step(0.0, layers([5.0, 5.0, 5.0])) + step(1000.0, layers([5.0]), ext=2)
    a = run(tmp_path, evs, ann(SHORT_LONG))
    assert set(types_of(a, 0)) == {"untyped"} and types_of(a, 1) == ["untyped"]
    w = [x for x in a.warnings if "no clear" in x]
    assert len(w) == 1 and "2 of 2 step(s)" in w[0]


def test_gap_ratio_decides_what_a_clear_gap_is(tmp_path):
    # clusters 10..11 and 20..21: gap 9 µs against a range of 1 µs
    evs = step(0.0, layers([10.0, 20.0, 11.0, 21.0]))
    assert types_of(run(tmp_path, evs, ann(SHORT_LONG))) == ["swa", "full", "swa", "full"]  # 9 > 3 x 1
    strict = [dict(r, gap_ratio=10) for r in SHORT_LONG]
    a = run(tmp_path, evs, ann(strict))  # 9 is not more than 10 x 1
    assert set(types_of(a)) == {"untyped"} and any("no clear" in w for w in a.warnings)


def test_an_outlier_is_no_cluster(tmp_path):
    # one slow kernel far from four that spread widely: the largest gap (40) is not 3x the others' range (18)
    evs = step(0.0, layers([2.0, 8.0, 14.0, 20.0, 60.0]))
    a = run(tmp_path, evs, ann(SHORT_LONG))
    assert set(types_of(a)) == {"untyped"} and any("no clear" in w for w in a.warnings)


def test_min_and_max_us_thresholds(tmp_path):
    evs = step(0.0, layers([5.0, 10.0, 50.0, 10.5]))
    rules = [
        {"type": "small", "contains": ATTN, "max_us": 6},
        {"type": "big", "contains": ATTN, "min_us": 40},
        {"type": "mid", "contains": ATTN, "min_us": 10, "max_us": 10.5},
    ]  # both ends inclusive
    assert types_of(run(tmp_path, evs, ann(rules))) == ["small", "mid", "big", "mid"]


def test_duration_and_thresholds_combine(tmp_path):
    # long = 50 and 52; of them only >= 51 is "huge"
    evs = step(0.0, layers([5.0, 50.0, 52.0, 5.1]))
    rules = [{"type": "huge", "contains": ATTN, "duration": "long", "min_us": 51}, *SHORT_LONG]
    assert types_of(run(tmp_path, evs, ann(rules))) == ["swa", "full", "huge", "swa"]


def test_duration_clusters_ignore_blocks_without_the_kernel(tmp_path):
    evs = step(0.0, layers([5.0, 50.0]) + [("norm", 2.0), ("moe", 400.0)] + layers([5.1, 49.0]))
    rules = SHORT_LONG + [{"type": "moe", "contains": "^moe$"}]
    assert types_of(run(tmp_path, evs, ann(rules))) == ["swa", "full", "moe", "swa", "full"]


# ------------------------------------------------------------------------------------------------
# grid
# ------------------------------------------------------------------------------------------------


def test_grid_matches_the_launch_grid_null_is_any(tmp_path):
    evs = step(
        0.0,
        [
            ("norm", 2.0),
            (ATTN, 5.0, {"grid": [2, 80, 1]}),
            ("norm", 2.0),
            (ATTN, 5.0, {"grid": [2, 40, 1]}),
            ("norm", 2.0),
            (ATTN, 5.0, {"grid": [4, 40, 1]}),
            ("norm", 2.0),
            (ATTN, 5.0),
        ],
    )  # no grid recorded: -1, matches no number
    rules = [
        {"type": "wide", "contains": ATTN, "grid": [2, 80, 1]},
        {"type": "two", "contains": ATTN, "grid": [2, None, None]},
        {"type": "y40", "contains": ATTN, "grid": [None, 40, None]},
    ]
    assert types_of(run(tmp_path, evs, ann(rules))) == ["wide", "two", "y40", "untyped"]


def test_grid_picks_which_kernels_the_duration_is_of(tmp_path):
    # every block also runs a long attention kernel of another grid; the grid-[1, 1, 1] ones alone split 5 / 50
    blocks = []
    for d in (5.0, 50.0, 5.1):
        blocks += [("norm", 2.0), (ATTN, d, {"grid": [1, 1, 1]}), (ATTN, 300.0 + d, {"grid": [9, 9, 9]})]
    rules = [dict(r, grid=[1, 1, 1]) for r in SHORT_LONG]
    assert types_of(run(tmp_path, step(0.0, blocks), ann(rules))) == ["swa", "full", "swa"]


# ------------------------------------------------------------------------------------------------
# parity
# ------------------------------------------------------------------------------------------------


def test_parity_counts_the_blocks_that_match_the_rest_of_the_rule_per_step(tmp_path):
    one = layers([5.0]) + [("norm", 2.0), ("moe", 9.0)]
    evs = step(0.0, one * 4) + step(1000.0, one * 3, ext=2)
    rules = [
        {"type": "even_attn", "contains": ATTN, "parity": "even"},
        {"type": "odd_attn", "contains": ATTN, "parity": "odd"},
        {"type": "moe", "contains": "^moe$"},
    ]
    a = run(tmp_path, evs, ann(rules))
    # the MoE blocks in between do not count: attention blocks 0, 2 are even, 1, 3 odd; step 1 starts again at 0
    assert types_of(a, 0) == ["even_attn", "moe", "odd_attn", "moe"] * 2
    assert types_of(a, 1) == ["even_attn", "moe", "odd_attn", "moe", "even_attn", "moe"]


def test_parity_comes_after_the_other_conditions(tmp_path):
    # parity among the long ones only: 50 (0, even), 51 (1, odd), 52 (2, even)
    evs = step(0.0, layers([5.0, 50.0, 5.1, 51.0, 52.0]))
    rules = [
        {"type": "long_even", "contains": ATTN, "duration": "long", "parity": "even"},
        {"type": "other", "contains": ATTN},
    ]
    assert types_of(run(tmp_path, evs, ann(rules))) == ["other", "long_even", "other", "other", "long_even"]


def test_a_rule_matches_whatever_earlier_rules_typed(tmp_path):
    # the first rule wins, but the parity rule still counts the block the first rule took
    evs = step(0.0, [("norm", 2.0), (ATTN, 5.0), ("special", 1.0)] + layers([5.0, 5.0]))
    rules = [
        {"type": "special", "contains": "special"},
        {"type": "even", "contains": ATTN, "parity": "even"},
        {"type": "odd", "contains": ATTN},
    ]
    assert types_of(run(tmp_path, evs, ann(rules))) == ["special", "odd", "even"]


# ------------------------------------------------------------------------------------------------
# boundary: after
# ------------------------------------------------------------------------------------------------


def mla_stack(n_layers: int) -> list:
    """Head, then layers opened by ``layer_in`` with the same norm inside each, then a tail opened by that norm
    right after the last layer's ``moe_sum``."""
    out = [("embed", 3.0)]
    for _ in range(n_layers):
        out += [("layer_in", 1.0), ("norm", 2.0), ("mla", 5.0), ("moe_sum", 1.5)]
    return out + [("norm", 2.0), ("lm_head", 9.0)]


@pytest.mark.parametrize("n_layers", [3, 5])
def test_after_tells_the_tail_norm_by_what_precedes_it(tmp_path, n_layers):
    boundary = ["^layer_in$", {"pattern": "^norm$", "after": "^moe_sum$"}]
    a = run(
        tmp_path,
        step(0.0, mla_stack(n_layers)),
        ann(
            boundary=boundary, position={"first": "head", "last": "tail"}, types=[{"type": "MLA", "contains": "^mla$"}]
        ),
    )
    assert types_of(a) == ["head"] + ["MLA"] * n_layers + ["tail"]
    assert a.blocks["kernels"].tolist() == [1] + [4] * n_layers + [2]
    # what skip did instead holds for one layer count only
    fixed = ["^layer_in$", {"pattern": "^norm$", "skip": 3}]
    b = run(tmp_path, step(0.0, mla_stack(n_layers)), ann(boundary=fixed))
    assert (len(b.blocks) == len(a.blocks)) == (n_layers == 3)


def test_after_looks_at_the_main_stream_only_and_not_across_steps(tmp_path):
    evs = step(0.0, [("moe_sum", 1.0), ("norm", 2.0), ("x", 3.0), ("norm", 2.0), ("y", 1.0)])
    evs.append(kernel("norm", 5.0, 0.5, stream=20))  # a side-stream norm: never a boundary
    evs.append(kernel("moe_sum", 7.5, 0.2, stream=20))  # a side-stream moe_sum right before the 2nd norm
    evs += step(1000.0, [("norm", 2.0), ("moe_sum", 1.0), ("norm", 2.0)], ext=2)
    a = run(tmp_path, evs, ann(boundary=[{"pattern": "^norm$", "after": "^moe_sum$"}]))
    b = a.blocks
    # only the first norm follows a main-stream moe_sum: one block from it, holding the side-stream kernels too
    assert b[b["step"] == 0]["kernels"].tolist() == [1, 6]
    # step 1's first norm has nothing before it in the step (step 0's last kernel does not count)
    assert b[b["step"] == 1]["kernels"].tolist() == [2, 1]


def test_skip_counts_the_matches_that_pass_after(tmp_path):
    ks = [("a", 1.0), ("n", 1.0), ("b", 1.0), ("n", 1.0), ("a", 1.0), ("n", 1.0), ("a", 1.0), ("n", 1.0)]
    a = run(tmp_path, step(0.0, ks), ann(boundary=[{"pattern": "^n$", "after": "^a$", "skip": 1}]))
    # the n after a: kernels 2, 6, 8; skip the first: blocks start at the 6th and the 8th
    assert a.blocks["kernels"].tolist() == [5, 2, 1]


# ------------------------------------------------------------------------------------------------
# validation and docs
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule,where",
    [
        ({"type": "t", "contains": "x", "duration": "medium"}, "$.blocks.types[0].duration"),
        ({"type": "t", "contains": "x", "parity": "third"}, "$.blocks.types[0].parity"),
        ({"type": "t", "contains": "x", "grid": [1, 2]}, "$.blocks.types[0].grid"),
        ({"type": "t", "contains": "x", "grid": [1, "a", 3]}, "$.blocks.types[0].grid"),
        ({"type": "t", "contains": "x", "min_us": 5, "max_us": 2}, "$.blocks.types[0]: min_us"),
        ({"type": "t", "contains": "x", "min_us": -1}, "$.blocks.types[0].min_us"),
        ({"type": "t", "contains": "x", "gap_ratio": 0}, "$.blocks.types[0].gap_ratio"),
    ],
)
def test_bad_type_rules_name_the_field(rule, where):
    with pytest.raises(DataFileError, match=r"rules\.json") as exc:
        ann([rule])
    assert where in str(exc.value)


def test_bad_after_regex_names_the_field():
    with pytest.raises(DataFileError, match=r"\$\.blocks\.boundary\[0\]\.after"):
        ann(boundary=[{"pattern": "n", "after": "(open"}])


def test_docs_name_every_rule_field():
    text = (ROOT / "docs" / "annotations.md").read_text()
    for struct in (spec.TypeRule, spec.BoundaryRule):
        missing = [f.encode_name for f in msgspec.structs.fields(struct) if f"`{f.encode_name}" not in text]
        assert missing == [], struct.__name__


# ------------------------------------------------------------------------------------------------
# synthetic deployments against their truth
# ------------------------------------------------------------------------------------------------


def synthetic(tmp_path, preset: str, bs: int, steps: int = 2, noise: bool = False):
    import tracekit
    from fixtures.synthlib import build_trace, get_preset, simulate, write_trace

    sch = simulate(get_preset(preset, bs), steps=steps, seed=0)
    path = write_trace(tmp_path / f"{preset}.trace.json.gz", build_trace(sch, noise=noise))
    return tracekit.load(path, cache=False), sch


def truth_blocks(sch, s: int) -> list[tuple[int, str]]:
    """(start, type) of each of the schedule's blocks of step ``s`` after the head."""
    rows = sorted((b.start, b.type) for b in sch.blocks if b.step == s)
    return [r for r in rows if r[1] != "head"]


GQA_ATTN = "BatchDecodeWithPagedKVCacheKernel"
SWA_DOC = {
    "boundary": ["FusedAddRMSNormKernel"],
    "types": [
        {"type": "SWA", "contains": GQA_ATTN, "duration": "short"},
        {"type": "FullAttn", "contains": GQA_ATTN, "duration": "long"},
        {"type": "MoE", "contains": "fused_moe_kernel"},
    ],
    "position": {"first": "head", "last": "tail"},
    "expect": {"SWA": 12, "FullAttn": 12, "MoE": 24},
}


@pytest.mark.parametrize("bs,noise", [(8, False), (64, True)])
def test_swa_preset_typed_by_duration_equals_the_truth(tmp_path, bs, noise):
    from fixtures.synthlib.presets import SWA_LAYERS

    trace, sch = synthetic(tmp_path, "swa", bs, noise=noise)
    a = run_doc(trace, SWA_DOC)
    assert a.warnings == []
    for s in range(2):
        b = a.blocks[a.blocks["step"] == s]
        mine = list(zip(b["start_ns"].tolist()[1:], b["block_type"].astype(str).tolist()[1:]))
        assert mine == truth_blocks(sch, s)
        attn = [t for _, t in mine if t in ("SWA", "FullAttn")]
        assert attn == ["SWA" if i % 2 == 0 else "FullAttn" for i in range(SWA_LAYERS)]  # the preset's notes
    # one grid for both, so a grid rule cannot tell them apart; parity can, and agrees
    grids = a.events.loc[a.events["name"].astype(str).str.contains(GQA_ATTN), ["grid_x", "grid_y", "grid_z"]]
    assert len(grids.drop_duplicates()) == 1
    by_parity = dict(
        SWA_DOC,
        types=[
            {"type": "SWA", "contains": GQA_ATTN, "parity": "even"},
            {"type": "FullAttn", "contains": GQA_ATTN, "parity": "odd"},
            SWA_DOC["types"][2],
        ],
    )
    assert run_doc(trace, by_parity).blocks["block_type"].tolist() == a.blocks["block_type"].tolist()


def test_swa_preset_without_the_duration_rule_is_one_type(tmp_path):
    trace, _ = synthetic(tmp_path, "swa", 8, steps=1)
    plain = dict(
        SWA_DOC, types=[{"type": "Attn", "contains": GQA_ATTN}, SWA_DOC["types"][2]], expect={"Attn": 24, "MoE": 24}
    )
    a = run_doc(trace, plain)
    assert a.warnings == [] and set(a.blocks["block_type"]) == {"head", "Attn", "MoE", "tail"}


def test_first_missing_layer_0_opened_by_after(tmp_path):
    # layer 0's attention has no input norm: its QKV GEMM opens it because the embedding ran right before it
    from fixtures.synthlib.presets import DENSE_LAYERS

    trace, sch = synthetic(tmp_path, "first_missing", 8)
    doc = {
        "boundary": [
            "FusedAddRMSNormKernel",
            {"pattern": "^nvjet_tst_128x16_64x6_1x1_v_bz_TNT$", "after": "indexSelectLargeIndex"},
        ],
        "types": [{"type": "Attn", "contains": GQA_ATTN}, {"type": "MLP", "contains": "act_and_mul_kernel"}],
        "position": {"first": "head", "last": "tail"},
        "expect": {"Attn": DENSE_LAYERS, "MLP": DENSE_LAYERS},
    }
    a = run_doc(trace, doc)
    assert a.warnings == []
    for s in range(2):
        b = a.blocks[a.blocks["step"] == s]
        assert list(zip(b["start_ns"].tolist()[1:], b["block_type"].astype(str).tolist()[1:])) == truth_blocks(sch, s)
    # without the after rule layer 0's attention falls into the head: one Attn block short in every step (within
    # fit.json's expect_tolerance of one layer, so the engine does not warn of it)
    a0 = run_doc(trace, dict(doc, boundary=["FusedAddRMSNormKernel"]))
    attn = a0.blocks[a0.blocks["block_type"] == "Attn"].groupby("step").size()
    assert attn.tolist() == [DENSE_LAYERS - 1] * 2


def run_doc(trace, blocks: dict):
    annotation = parse_annotation(
        json.dumps({"name": "synthetic", "step": {"name": "scheduler.run_batch"}, "blocks": blocks}).encode(),
        "synthetic.json",
    )
    return annotate(trace, annotation, find_steps(trace, ann=annotation).table)
