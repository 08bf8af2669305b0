"""`tracekit imbalance`'s whole answer on two generated runs with partial ranks (a late start, an early stop, a
mid-step start; per-rank folders), pinned: the digests were taken with the code before issue 28's parent was made
lean (kinds as integer codes, packed sort keys, no whole-table copies) and the code after gives the same bytes. A
change of these digests is a change of the answer: say why in the commit, and re-pin."""

from __future__ import annotations

import hashlib
import json

import pytest

from fixtures.synthlib.multirank import write_run
from tracekit.fan_out import imbalance

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier

PINNED = [
    (
        "dp_attn_deepep16",
        {"late_start": {3: 1}, "stop_early": {12: 1}, "mid_step_start": [9]},
        # issue 40: ranks.times_last counted over the steps recorded whole, the summary straggler's rows (one rank's
        # count moves, 12 -> 4); before, one median (median_wait_ns)
        "8d1fe581e6ff74e2b6df3af3a8aed600249821b5f00385d533c09b429579d866",
    ),
    (
        "nccl_train4",
        {"naming": "rank_folders", "mid_step_start": [1]},
        "b19099fe79c28fd182f535c9dd1c1b9f9238e63e965e538806e966dea1f91c8e",  # issue 40: times_last, whole steps
    ),
]


@pytest.mark.parametrize("preset,knobs,digest", PINNED)
def test_the_answer_is_pinned(tmp_path, preset, knobs, digest):
    write_run(preset, tmp_path / "run", truth_path=tmp_path / "truth.json", **knobs)
    doc = imbalance(tmp_path / "run", jobs=1, gpus_per_node=8, cache=False).to_dict()
    body = json.dumps({"summary": doc["summary"], "tables": doc["tables"], "warnings": doc["warnings"]}, sort_keys=True)
    assert hashlib.sha256(body.encode()).hexdigest() == digest
