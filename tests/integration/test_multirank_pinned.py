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
        # issue 40: the clock_uncertain column and ranks.times_last counted over the steps recorded whole (the summary
        # straggler's rows: one rank's count moves, 12 -> 4); before, one median (median_wait_ns)
        "a0e6c91987c69c755df06a47723a391bae1da2d00ffec5e88a5948bb3144871d",
    ),
    (
        "nccl_train4",
        {"naming": "rank_folders", "mid_step_start": [1]},
        "b0f16924ed236f78da59f312154e16ebbb629538eac05a147fa4ea919d7c83e3",  # issue 40: the clock_uncertain column; times_last over the steps recorded whole
    ),
]


@pytest.mark.parametrize("preset,knobs,digest", PINNED)
def test_the_answer_is_pinned(tmp_path, preset, knobs, digest):
    write_run(preset, tmp_path / "run", truth_path=tmp_path / "truth.json", **knobs)
    doc = imbalance(tmp_path / "run", jobs=1, gpus_per_node=8, cache=False).to_dict()
    body = json.dumps({"summary": doc["summary"], "tables": doc["tables"], "warnings": doc["warnings"]}, sort_keys=True)
    assert hashlib.sha256(body.encode()).hexdigest() == digest
