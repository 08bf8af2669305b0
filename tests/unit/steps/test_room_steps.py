"""The named steps that the long functions of the comm, hardware and fleet rooms were split into (issue 27), each on a
small input whose answer is worked out by hand: the fine clock's node check and residuals, the ranks an imbalance
can use, the hbm table's per-row medians, waves' distinct names and CTAs-per-SM labels."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tracekit.analyses.fleet.multirank.align import LOOSE_NS, fine_clock
from tracekit.analyses.fleet.multirank.api import RunPlan, imbalance_of_run
from tracekit.analyses.fleet.multirank.mapper import MapOptions
from tracekit.analyses.hardware.hbm import _per_row_table
from tracekit.analyses.hardware.waves import _distinct_names, _Labels
from tracekit.errors import InputError, MissingDataError


def _ends(offsets: dict[int, int], n: int = 10, jitter: dict[int, int] | None = None) -> pd.DataFrame:
    """n instances ending every 1 ms (true time) on every rank, read on clocks ``offsets`` ahead (ns)."""
    rows = []
    for inst in range(n):
        for r, off in offsets.items():
            j = (jitter or {}).get(r, 0) * (1 if inst % 2 else -1)
            rows.append({"rank": r, "inst": inst, "end_ns": 1_000_000 * (inst + 1) + off + j})
    return pd.DataFrame(rows)


def test_fine_clock_offsets_and_ranks_of_one_node_that_disagree():
    # ranks 0 and 1 share node 0 but their ends say 50 µs apart; rank 2 (node 1) is 7 µs ahead
    clock = fine_clock(_ends({0: 0, 1: 50_000, 2: 7_000}), {0: 0.0, 1: 0.0, 2: 0.0}, 0, 0, {0: 0, 1: 0, 2: 1})
    assert clock.aligned
    assert [clock.offset_ns(r) for r in (0, 1, 2)] == [0, 50_000, 7_000]
    assert clock.residual == {0: 0, 1: 0, 2: 0}
    assert any(
        "ranks of node 0 disagree on the clock by up to 50.0 µs (rank 0 against rank 1)" in w for w in clock.warnings
    )


def test_fine_clock_loose_ends_on_the_reference_node_share_its_clock():
    # rank 1's ends wander ±300 µs around the reference's: a loose fit; on the reference's node it keeps its clock
    clock = fine_clock(_ends({0: 0, 1: 1_000}, jitter={1: 300_000}), {0: 0.0, 1: 0.0}, 0, 0, {0: 0, 1: 0})
    assert clock.offset_ns(1) == 0 and clock.b[1] == 0.0
    assert clock.residual[1] > LOOSE_NS
    assert any("do not coincide across ranks (rank" in w for w in clock.warnings)


def test_fine_clock_without_shared_instances_takes_the_clocks_as_recorded():
    ends = pd.DataFrame({"rank": [0, 1], "inst": [0, 1], "end_ns": [5, 9]})
    clock = fine_clock(ends, {0: 0.0, 1: 123.0}, 0, 0, {0: 0, 1: 1})
    assert not clock.aligned and clock.a == {0: 0.0, 1: 0.0}
    assert clock.warnings == ["no collective instance is seen on two ranks: the clocks are taken as recorded"]


@pytest.mark.parametrize("codes,error", [((4, 4), MissingDataError), ((4, 3), InputError)])
def test_an_imbalance_with_fewer_than_two_readable_ranks_says_why(codes, error):
    plan = RunPlan(
        source="run",
        ranks=[None, None],
        skipped=[],
        files=[(0, "a.json"), (1, "b.json")],
        opts=MapOptions(),
        gpus_per_node=None,
    )
    results = [{"path": p, "dropped": f"{p} is broken", "exit_code": c} for p, c in zip(("a.json", "b.json"), codes)]
    with pytest.raises(error, match=r"fewer than two ranks of the run could be read \(a.json is broken; b.json is"):
        imbalance_of_run(plan, results)


def test_hbm_per_row_table_medians_shares_and_time_at_peak():
    per_step = pd.DataFrame(
        {"step": [0, 0, 1, 1, 2, 2], "row": ["kv", "w"] * 3, "rule": "bytes", "bytes": [100, 300, 200, 300, 400, 500]}
    )
    hw = SimpleNamespace(hbm_bytes_per_s=1e9)  # 1 GB/s: a byte takes 1 ns
    table, med_total = _per_row_table(per_step, [("kv", "bytes", "KV cache"), ("w", "bytes", "")], hw)
    assert med_total == 500  # totals 400, 500, 900
    assert table["row"].tolist() == ["kv", "w"] and table["bytes"].tolist() == [200, 300]
    assert table["share_pct"].tolist() == [40.0, 60.0] and table["time_at_peak_ns"].tolist() == [200, 300]
    assert table["note"].tolist() == ["KV cache", ""]


def test_waves_distinct_names_sorted_with_each_kernels_index():
    k = pd.DataFrame(
        {"name": pd.Categorical(["gemm", "attn", "gemm", "norm"], categories=["norm", "unused", "gemm", "attn"])}
    )
    uniq, inv = _distinct_names(k)
    assert uniq.tolist() == ["attn", "gemm", "norm"] and uniq[inv].tolist() == ["gemm", "attn", "gemm", "norm"]


def test_labels_code_in_order_of_first_use():
    labels = _Labels()
    codes = np.array([labels.code("option"), labels.code("assumed"), labels.code("option")])
    cat = labels.categorical(codes)
    assert codes.tolist() == [0, 1, 0] and list(cat) == ["option", "assumed", "option"]
    assert list(cat.categories) == ["option", "assumed"] and len(_Labels().categorical(np.zeros(0, int))) == 0
