"""Annotations that fit the deployments they name (issue 39): the tolerance of a fit is data, and the generator's
varied deployments follow the study's tables, not the annotations (the slow checks of each shipped annotation on
its targets: test_annotation_targets_deployments.py and tests/integration/test_annotation_targets_corpus.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fixtures.synthlib.presets import EXTRA_KERNEL, study_variant
from tracekit.annotation import load_annotation
from tracekit.annotation.blocks import expect_met, expect_tolerance

ROOT = Path(__file__).resolve().parents[3]

# the study (seeds/000, "权重 AllGather"): received per rank per step, PtoP bytes = full x 7/8
STUDY_RECEIVED_GB = {"dp16": 48.41, "dp2dcp8": 14.77}


def _units(preset, segment: str):
    return next(s for s in preset.segments if s.name == segment).units


def test_the_expect_tolerance_is_fit_json_data():
    doc = json.loads((ROOT / "tracekit" / "data" / "fit.json").read_text())
    assert expect_tolerance() == doc["expect_tolerance"]
    slack, floor = doc["expect_tolerance"]["layers"], doc["expect_tolerance"]["from_count"]
    # a per-layer type: one layer either way meets it, two do not
    assert expect_met(np.array([69 - slack, 69, 69 + slack]), 69).all()
    assert not expect_met(69 - slack - 1, 69) and not expect_met(69 + slack + 1, 69)
    # a type expected fewer times (head, tail, ReplaySSM) must match exactly
    assert expect_met(floor - 1, floor - 1) and not expect_met(0, 1) and not expect_met(2, 1)


def test_varied_deployments_count_their_layers_from_the_study():
    for base in ("dp16", "dp2dcp8"):
        for delta in (-1, 1):
            p = study_variant(base, 24, layers=delta)
            layers = [u for u in _units(p, "target") if u.name.startswith("L")]
            kda = sum(u.blocks[0].type == "KDA" for u in layers)
            mla = sum(u.blocks[0].type == "MLA" for u in layers)
            # the study: 93 layers (layer 0 dense), 24 of them MLA, the rest KDA; the variant one KDA layer off
            assert (len(layers), kda, mla) == (93 + delta, 69 + delta, 24)
            (replay,) = _units(p, "replay")
            assert len(replay.blocks[0].ops) == kda  # one ReplaySSM commit per KDA layer
            assert len(_units(p, "draft")) == 5


def test_varied_deployments_move_the_study_allgather_bytes():
    # the generator's AllGathers per step equal the study's received bytes (7/8 of the full sizes), layer count as is
    for base, gb in STUDY_RECEIVED_GB.items():
        p = study_variant(base, 24)
        full = sum(u.ag.full_bytes for s in p.segments for u in s.units if u.ag is not None)
        assert abs(full * 7 / 8 / 1e9 - gb) < 0.01


def test_the_extra_kernel_lands_in_every_block():
    p = study_variant("dp16", 4, extra_kernel=True)
    blocks = [b for s in p.segments for u in s.units for b in u.blocks]
    assert all(any(op.kernel == "extra_elementwise" for op in b.ops) for b in blocks)
    assert p.kernels["extra_elementwise"] == EXTRA_KERNEL
    # the plain deployment never launches it: the variation is new to every annotation
    plain = study_variant("dp16", 4)
    assert not any(
        op.kernel == "extra_elementwise" for s in plain.segments for u in s.units for b in u.blocks for op in b.ops
    )


def test_the_k3_annotations_carry_their_deployments_allgather_sizes():
    # the sizes are the study's, in the annotation (no --ag-size): the largest is the launch log's staging capacity
    # (627048448 / 183500800), and the sharded layers' AllGathers (layers 1-92 and, DP16 only, the 5 draft layers)
    # receive the study's bytes per step
    dp16 = load_annotation("k3_dp16").allgather.sizes
    dp2 = load_annotation("k3_dp2_dcp8").allgather.sizes
    assert max(dp16.values()) == 675_282_944 and dp16["KDA"] == 627_048_448 and dp2 == {"MoE": 183_500_800}
    received = {
        "dp16": (68 * dp16["KDA"] + 24 * dp16["MLA"] + 5 * dp16["draft"]) * 7 / 8,
        "dp2dcp8": 92 * dp2["MoE"] * 7 / 8,
    }
    for base, gb in STUDY_RECEIVED_GB.items():
        assert abs(received[base] / 1e9 - gb) < 0.01
