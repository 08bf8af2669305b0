"""Severity relative to the step (issues 39 and 40): major/minor from the share of the whole a finding is part of, the
absolute floor only as a second condition, one rule (``rules.is_major``) for every source — trace findings, memory
findings, the ranks of a run, and a comparison of two deployments (docs/findings.md, "Severity")."""

from __future__ import annotations

import pandas as pd
import pytest

from tracekit.analyses.findings.imbalance_findings import rank_findings_of
from tracekit.analyses.findings.rules import finding, finding_rules, is_major, rank_findings
from tracekit.result import Result

MS = 1_000_000


def _time_row(kind: str, gain_ms: float, step_ms: float | None, source: str = "idle") -> dict:
    w = {"title": kind, "how": "", "command": "", "suggestion": "", "basis": "measured"}
    step = None if step_ms is None else step_ms * MS
    return finding(None, kind, source, gain_ns=gain_ms * MS, step_ns=step, words=w)


def _mem_row(kind: str, gib: float, whole: float | None) -> dict:
    w = {"title": kind, "how": "", "command": "", "suggestion": "", "basis": "estimated"}
    return finding(None, kind, "memory", gain_gib=gib, whole_gib=whole, words=w)


def _ranked(rows: list[dict]) -> dict[str, bool]:
    r = finding_rules()
    t = rank_findings(rows, min_ms=float(r["min_ms"]), min_gib=float(r["min_gib"]), min_pct=float(r["min_pct"]))
    return dict(zip(t["kind"], t["minor"]))


def test_the_rule():
    # the share decides; the floor is a second condition only; unknown share: the floor without a step decides
    assert is_major(0.35, 17.5, floor=0.02, min_pct=1.0)
    assert not is_major(0.35, 0.9, floor=0.02, min_pct=1.0)
    assert not is_major(0.015, 50.0, floor=0.02, min_pct=1.0)  # 50 % of a 30 µs step: under the floor
    assert not is_major(0.3, None, floor=0.02, min_pct=1.0, floor_without_share=0.5)
    assert is_major(0.6, None, floor=0.02, min_pct=1.0, floor_without_share=0.5)
    assert not is_major(0.6, None, floor=1.0, min_pct=1.0, floor_without_share=0.5)  # --min-ms still floors it


def test_trace_findings_are_relative_to_the_step():
    """A 2 ms decode step: 17–20 % of it was 'minor' under the old 0.5 ms floor; a 38.5 ms training step: 0.4 % is
    minor however many µs it is."""
    got = _ranked(
        [
            _time_row("decode_17pct", 0.35, 2.0),
            _time_row("decode_20pct", 0.40, 2.0),
            _time_row("train_0_4pct", 0.168, 38.5),
            _time_row("train_2pct", 0.77, 38.5),
            _time_row("tiny_step", 0.012, 0.03),  # 40 % of a 30 µs step, under the 20 µs floor
            _time_row("no_step_small", 0.3, None),
            _time_row("no_step_large", 0.7, None),
        ]
    )
    assert got == {
        "decode_17pct": False,
        "decode_20pct": False,
        "train_2pct": False,
        "no_step_large": False,
        "train_0_4pct": True,
        "tiny_step": True,
        "no_step_small": True,
    }


def test_memory_findings_are_relative_to_the_gpus_memory():
    got = _ranked(
        [
            _mem_row("kv_4pct", 3.84, 80.0),  # 4.8 % of the GPU: major
            _mem_row("buffer_0_4pct", 0.58, 141.0),  # 0.4 % of an H200: minor
            _mem_row("floor", 0.2, 10.0),  # 2 % of a small GPU, under the 0.25 GiB floor
            _mem_row("unknown_gpu", 0.3, None),  # no GPU memory known: the floor alone
        ]
    )
    assert got == {"kv_4pct": False, "unknown_gpu": False, "buffer_0_4pct": True, "floor": True}


def _imbalance(step_ms: float, imb_ms: list[float], stragglers: list[int | None], partial=None) -> Result:
    """A hand-built ``tracekit.imbalance`` result of a 4-rank training run (no batch sizes)."""
    n = len(imb_ms)
    partial = partial or [False] * n
    by = pd.DataFrame(
        {
            "step": range(n),
            "imbalance_ns": [int(v * MS) for v in imb_ms],
            "straggler": pd.array(stragglers, dtype="Int64"),
            "straggler_bs": pd.array([None] * n, dtype="Int64"),
            "median_bs": pd.array([None] * n, dtype="Int64"),
            "max_wait_rank": pd.array([0] * n, dtype="Int64"),
            "partial": partial,
        }
    )
    steps = pd.DataFrame(
        [
            {
                "step": g,
                "rank": r,
                "local_step": g,
                "phase": "train",
                "bs": None,
                "start_ns": 0,
                "wall_ns": step_ms * MS,
            }
            for g in range(n)
            for r in range(4)
        ]
    )
    per = pd.DataFrame(
        {
            "step": range(n),
            "kind": "allreduce",
            "seq": 0,
            "last_rank": pd.array(stragglers, dtype="Int64"),
            "tie": [s is None for s in stragglers],
            "cause": ["compute: x" if s is not None else None for s in stragglers],
        }
    )
    from tracekit.analyses.fleet.multirank.per_step import per_step_summary

    summary = {
        "ranks": 4,
        "steps": n,
        "clock": "aligned",
        "imbalance_ns_per_step": int(sorted(imb_ms)[(n - 1) // 2] * MS),
        "straggler": {"rank": 3, "times_last": 2, "of": 4},
        **per_step_summary(by),
    }
    return Result(
        command="imbalance",
        inputs=[{"path": f"run/rank-{r}.json", "rank": r} for r in range(4)],
        params={},
        summary=summary,
        tables={"by_step": by, "steps": steps, "per_collective": per},
        warnings=[],
    )


def test_rank_findings_are_relative_to_the_step_and_per_step():
    """Issue 40: a 4-rank run losing 12.3 ms in each of two steps of 38.5 ms read '168 µs per step (0.4 %) [minor]'
    from the median; it is the mean, 16 % of the step, major, with the worst steps named."""
    imb = _imbalance(38.5, [0.1, 12.3, 12.3, 0.168], [1, 3, 3, 2])
    f = rank_findings_of(imb).tables["findings"].iloc[0]
    assert f["gain_ms_per_step"] == pytest.approx((0.1 + 12.3 + 12.3 + 0.168) / 4, rel=1e-6)
    assert f["gain_pct"] == pytest.approx(100 * 6.217 / 38.5, rel=1e-3) and not f["minor"]
    assert "steps 1–2 lost 12.3 ms each (rank 3 last)" in f["title"]
    # the same imbalance on a step 40× longer is under 1 %: minor, whatever its ms
    f = rank_findings_of(_imbalance(1540.0, [0.1, 12.3, 12.3, 0.168], [1, 3, 3, 2])).tables["findings"].iloc[0]
    assert f["minor"]
    # a 2 ms decode step losing 0.35 ms per step: 17.5 %, major (the 0.5 ms floor made it minor)
    f = rank_findings_of(_imbalance(2.0, [0.35] * 4, [3] * 4)).tables["findings"].iloc[0]
    assert f["gain_pct"] == pytest.approx(17.5) and not f["minor"]


def test_a_partial_step_is_out_of_the_gain_and_the_claims():
    imb = _imbalance(10.0, [0.5, 0.5, 0.5, 9.0], [3, 3, 3, 1], partial=[False, False, False, True])
    assert imb.summary["imbalance_ns_mean_per_step"] == int(0.5 * MS)
    assert [w["step"] for w in imb.summary["worst_steps"]] == [0, 1, 2]
    f = rank_findings_of(imb).tables["findings"].iloc[0]
    assert f["gain_ms_per_step"] == pytest.approx(0.5) and "rank 1" not in f["title"]
    assert "partial step(s) 3 left out" in f["evidence"]
