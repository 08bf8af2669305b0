"""Each shipped K3 annotation on the deployment it names, as a real run varies it (issue 39): the generator's DP16
and DP2xDCP8 deployments (the study's tables: fixtures/synthlib/presets.py, ``study_variant``) at bs 4/24/128 with
one layer more or less and an extra kernel in every block. The right annotation fits with no warning and every
AllGather matched by its own sizes (no --ag-size); the other deployment's annotation ranks below it and does not
fit."""

from __future__ import annotations

import json

import pytest

import tracekit
from fixtures.synthlib import build_trace, simulate
from fixtures.synthlib.presets import study_variant
from tracekit.analyses.comm.allgather import allgathers
from tracekit.analyses.structure.fit import annotation_fit, fits_above

RIGHT = {"dp16": "k3_dp16", "dp2dcp8": "k3_dp2_dcp8"}
CASES = [  # bs 4, 24 and 128, each layer variation on each deployment (about 9 s a case on a loaded 2-core box)
    ("dp16", 4, -1),
    ("dp16", 24, 1),
    ("dp2dcp8", 24, -1),
    ("dp2dcp8", 128, 1),
]


@pytest.mark.slow
@pytest.mark.parametrize("base,bs,layers", CASES, ids=[f"{b}-bs{n}-L{d:+d}" for b, n, d in CASES])
def test_the_right_annotation_fits_its_varied_deployment(tmp_path, base, bs, layers):
    sch = simulate(study_variant(base, bs, layers=layers, extra_kernel=True), steps=2, seed=bs)
    path = tmp_path / f"{base}_bs{bs}.trace.json"
    path.write_text(json.dumps(build_trace(sch)))
    trace = tracekit.load(path, cache=False)
    res = annotation_fit(trace)
    table = res.tables["annotations"].set_index("name")
    right = RIGHT[base]
    (wrong,) = set(RIGHT.values()) - {right}
    assert res.summary["best"] == right and res.warnings == []
    row = table.loc[right]
    assert row["fits"] and row["score"] > fits_above()
    assert row["reason"] in ("", None)  # no engine warning: the expect counts met within fit.json's tolerance
    assert row["expect"] == 1.0 and row["allgather"] == 1.0
    assert not table.loc[wrong, "fits"] and table.loc[wrong, "rank"] > row["rank"]
    assert table.loc[wrong, "allgather"] == 0.0  # the other deployment's sizes match none of these AllGathers
    ag = allgathers(trace, right)  # the annotation's own sizes, no --ag-size
    assert ag.summary["unmatched"] == 0 and ag.summary["allgathers"] > 0
    assert not any("match no size" in w for w in ag.warnings)
