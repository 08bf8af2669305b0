"""Causes that add up (issue 40): a last rank's lateness against the median rank's, split in four shares — late
start of its segment, own work, GPU idle, expert GEMMs — whose largest is the cause, printed with that share as
its evidence. Hand-built aligned tables here (the answer known by construction); the generator's shapes with their
true cause and the real runs in test_causes_truth.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analyses.fleet.multirank.attribute import CAUSE_CODES, MIN_SHARE_NS, SHARE_COLS, attribute

US = 1_000


def _run(per_rank: dict[int, list[dict]], bs=None, phase=None, step_start=None):
    """Aligned tables of one step: per rank its collectives in time order, each {kind, start, end, work, attn,
    expert} in µs (work includes attn and expert); the step starts at ``step_start[rank]`` µs (default 0)."""
    rows = []
    for r, colls in per_rank.items():
        seen: dict = {}
        for c in colls:
            seq = seen.get(c["kind"], 0)
            seen[c["kind"]] = seq + 1
            rows.append(
                {
                    "step": 0,
                    "kind": c["kind"],
                    "seq": seq,
                    "rank": r,
                    "start_ns": c["start"] * US,
                    "end_ns": c["end"] * US,
                    "work_ns": c.get("work", 0) * US,
                    "attention_ns": c.get("attn", 0) * US,
                    "expert_ns": c.get("expert", 0) * US,
                }
            )
    coll = pd.DataFrame(rows)
    ranks = sorted(per_rank)
    steps = pd.DataFrame(
        {
            "step": 0,
            "rank": ranks,
            "phase": [(phase or {}).get(r, "decode") for r in ranks],
            "bs": pd.array([(bs or {}).get(r) for r in ranks], dtype="Int64"),
            "start_ns": [(step_start or {}).get(r, 0) * US for r in ranks],
            "end_ns": 10_000 * US,
        }
    )
    return attribute(coll, steps, {r: 0 for r in ranks})["per_collective"]


def _dispatch_combine(r: int, *, attn=100.0, expert=50.0, recv_extra=0.0, gap=0.0, start=0.0):
    """Attention, a dispatch ending at 130 (+ recv_extra on this rank), expert GEMMs (after a host gap), a combine."""
    d_arrive = start + attn
    d_end = max(130.0, d_arrive + 10) + recv_extra
    c_arrive = d_end + gap + expert
    return [
        {"kind": "dispatch", "start": d_arrive, "end": d_end, "work": attn, "attn": attn},
        {"kind": "combine", "start": c_arrive, "end": 400.0, "work": expert, "expert": expert},
    ]


def _combine(per):
    return per[per["kind"] == "combine"].iloc[0]


def test_the_shares_add_up_to_the_lateness_against_the_median_rank():
    per = _run(
        {
            0: _dispatch_combine(0),
            1: _dispatch_combine(1, expert=52.0),
            2: _dispatch_combine(2, recv_extra=31.0, expert=50.5, gap=1.5),
        }
    )
    c = _combine(per)
    # median arrival: rank 1 (130 + 52); last: rank 2 (161 + 1.5 + 50.5)
    assert c["last_rank"] == 2
    shares = [int(c[k]) for k in SHARE_COLS]
    assert shares == [31_000, 0, 1_500, -1_500]
    assert sum(shares) == (161.0 + 1.5 + 50.5 - 182.0) * US
    assert c["cause"] == "communication: its previous collective ended 31.0 µs after the median rank's"


def test_extra_expert_gemms_are_a_hot_expert_and_print_them():
    per = _run({0: _dispatch_combine(0), 1: _dispatch_combine(1), 2: _dispatch_combine(2, expert=80.0)})
    c = _combine(per)
    assert c["cause"] == "hot_expert: expert GEMMs 80.0 µs vs median 50.0 µs before arriving"
    assert (int(c["started_late_ns"]), int(c["expert_ns"])) == (0, 30_000)


def test_a_launch_gap_is_the_host():
    per = _run({0: _dispatch_combine(0), 1: _dispatch_combine(1), 2: _dispatch_combine(2, gap=25.0)})
    assert _combine(per)["cause"] == "host: GPU idle 25.0 µs vs median 0.0 µs before arriving"


@pytest.mark.parametrize(
    "bs,phase,step_start,want",
    [
        ({0: 8, 1: 8, 2: 32}, None, None, "batch: bs 32 vs median 8; attention 160.0 µs vs median 100.0 µs"),
        ({0: 8, 1: 8, 2: 8}, {2: "prefill"}, None, "prefill: bs 8 vs median 8; attention 160.0 µs vs median 100.0"),
        ({0: 8, 1: 8, 2: 8}, None, None, "compute: bs 8 vs median 8; attention 160.0 µs vs median 100.0 µs"),
        # the step began late: a larger batch that the host prepared, else the host itself
        ({0: 8, 1: 8, 2: 32}, None, {2: 90}, "batch: bs 32 vs median 8; its step began 90.0 µs after the median"),
        ({0: 8, 1: 8, 2: 8}, None, {2: 90}, "host: its step began 90.0 µs after the median rank's"),
    ],
)
def test_own_work_names_the_batch_and_phase(bs, phase, step_start, want):
    late = 60.0 if step_start is None else 0.0
    per = _run(
        {
            r: _dispatch_combine(r, attn=100.0 + (late if r == 2 else 0), start=(step_start or {}).get(r, 0))
            for r in (0, 1, 2)
        },
        bs=bs,
        phase=phase,
        step_start=step_start,
    )
    d = per[per["kind"] == "dispatch"].iloc[0]
    assert d["last_rank"] == 2 and d["cause"].startswith(want)


def test_no_share_above_the_floor_is_unknown_with_its_numbers():
    # 4.5 µs late, 1.5 µs each from its previous collective, its own work and a launch gap: none is evidence
    per = _run(
        {
            0: _dispatch_combine(0),
            1: _dispatch_combine(1),
            2: _dispatch_combine(2, recv_extra=1.5, expert=51.5, gap=1.5),
        }
    )
    c = _combine(per)
    assert c["last_rank"] == 2 and c["margin_ns"] == 4_500
    assert c["cause"] == (
        "unknown: no share above 2.0 µs against the median rank: late start 1.5 µs, own work 0.0 µs, GPU idle"
        " 1.5 µs, expert GEMMs 1.5 µs"
    )


def test_ties_and_unknown_segments_have_no_shares():
    per = _run({0: _dispatch_combine(0), 1: _dispatch_combine(1), 2: _dispatch_combine(2)})
    assert per["tie"].all() and per["cause"].isna().all()
    for col in SHARE_COLS:
        assert per[col].dtype == "Int64" and per[col].isna().all()


def _oracle(share, after, bs, med_bs, phase) -> str:
    """The rule of :func:`attribute._causes`, one instance at a time (the code only)."""
    vals = [(-np.inf if np.isnan(v) else v) for v in share]
    best = int(np.argmax(vals))
    if vals[best] <= MIN_SHARE_NS:
        return "unknown"
    bigger = not (np.isnan(bs) or np.isnan(med_bs)) and bs > med_bs
    if best == 0:
        if after:
            return "communication"
        return "prefill" if phase == "prefill" else "batch" if bigger else "host"
    if best == 1:
        return "prefill" if phase == "prefill" else "batch" if bigger else "compute"
    return "host" if best == 2 else "hot_expert"


@pytest.mark.parametrize("seed", [0, 1])
def test_the_vectorised_rule_is_the_per_instance_rule(seed):
    from tracekit.analyses.fleet.multirank.attribute import _causes

    rng = np.random.default_rng(seed)
    n = 2000
    share = rng.integers(-50_000, 50_000, (4, n)).astype(float)
    share[:, ::9] = rng.integers(-3_000, 2_500, (4, len(range(0, n, 9))))  # near the floor
    share[0, ::7] = np.nan
    share[2, ::7] = np.nan
    after = rng.random(n) < 0.5
    vals = {k: rng.integers(0, 10**6, n).astype(float) for k in ("own", "attention", "expert", "idle")}
    bs = rng.integers(0, 64, n).astype(float)
    bs[::3] = np.nan
    mbs = rng.integers(0, 64, n).astype(float)
    phase = rng.choice(np.array(["prefill", "decode", None, "idle", "train"], dtype=object), n)
    got = _causes(share, after, vals, vals, bs, mbs, phase)
    codes = [s.split(":")[0] for s in got.tolist()]
    want = [_oracle(share[:, i], after[i], bs[i], mbs[i], phase[i]) for i in range(n)]
    assert codes == want
    assert set(codes) == set(CAUSE_CODES)  # every branch taken


def test_every_cause_code_has_its_advice_in_the_data_file():
    from tracekit.analyses.findings.rules import finding_rules

    advice = finding_rules()["rank_advice"]
    assert set(CAUSE_CODES) <= set(advice)
    assert "EPLB" in advice["hot_expert"] and "EPLB" not in advice["communication"]
    assert "link, NIC and topology" in advice["communication"] and "CUDA graphs" in advice["host"]
