"""Per step, then summary (issue 40): the per-step view of a run's imbalance, on hand-built per-step tables and on the
generator's rotating, intermittent and partial-step runs, checked claim by claim against their truth in
`imbalance`, `report RUN_DIR` and `findings RUN_DIR` (JSON and text)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fixtures.synthlib.multirank import write_run
from tracekit.analyses.fleet.multirank.per_step import per_step_summary, steps_text

ROTATING = [[0, 3, 64], [1, 5, 64], [2, 1, 64], [3, 3, 64]]  # the heavy rank and its bs, per step
QUIET = {"big": {}, "idle": [], "prefill": [], "hot_expert": None}


def _by(imb, last, partial=None):
    n = len(imb)
    return pd.DataFrame(
        {
            "step": range(n),
            "imbalance_ns": imb,
            "straggler": pd.array(last, dtype="Int64"),
            "partial": partial or [False] * n,
        }
    )


def test_the_mean_the_worst_steps_and_who_was_last_where_it_cost():
    s = per_step_summary(_by([100, 12_300, 12_300, 150], [0, 3, 3, 1]))
    assert s["imbalance_ns_mean_per_step"] == (100 + 12_300 + 12_300 + 150) // 4
    assert [w["step"] for w in s["worst_steps"]] == [1, 2] and s["worst_steps"][0]["straggler"] == 3
    assert s["stragglers"] == [{"rank": 3, "steps": [1, 2]}] and not s["straggler_rotates"]
    rot = per_step_summary(_by([300, 310, 305, 320], [3, 5, 1, 3]))
    assert rot["straggler_rotates"] and rot["stragglers"][0] == {"rank": 3, "steps": [0, 3]}
    one = per_step_summary(_by([300, 310, 305, 320], [3, 3, 3, 5]))
    assert not one["straggler_rotates"]  # one rank last in most of the steps that cost
    part = per_step_summary(_by([300, 310, 305, 9_000], [3, 3, 3, 1], [False, False, False, True]))
    assert part["worst_steps"][0]["step"] != 3 and all(g["rank"] != 1 for g in part["stragglers"])
    none = per_step_summary(_by([], []))
    assert none["imbalance_ns_mean_per_step"] is None and none["worst_steps"] == []


def test_steps_text():
    assert steps_text([1, 2]) == "1–2" and steps_text([0, 3]) == "0, 3" and steps_text([5, 1, 2, 3]) == "1–3, 5"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("perstep")
    out = {}
    for name, preset, knobs in (
        ("rotating", "dp_attn_deepep8", {**QUIET, "heavy_at": ROTATING}),
        ("intermittent", "nccl_train4", {"straggler_factor": 1.0, "heavy_at": [[1, 3, 2.2], [2, 3, 2.2]]}),
        # rank 6's file ends early in the last step, where rank 6 is the heavy one: its lateness is not recorded
        ("partial", "dp_attn_deepep8", {**QUIET, "big": {2: 32}, "heavy_at": [[3, 6, 96]], "stop_early": {6: 1}}),
    ):
        _, truth = write_run(preset, d / name, truth_path=d / f"{name}.json", **knobs)
        out[name] = (d / name, json.loads(truth.read_text()))
    return out


def _json(cli, *args):
    code, out, err = cli(*args, "-f", "json")
    assert code == 0, err
    return json.loads(out)


def _text(cli, monkeypatch, *args):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli(*args)
    assert code == 0, err
    assert max(len(ln) for ln in out.splitlines()) <= 80
    return out, " ".join(out.split())


def _check_summary(s: dict, ts: dict):
    assert s["imbalance_ns_mean_per_step"] == pytest.approx(ts["imbalance_ns_mean_per_step"], rel=0.01)
    assert [w["step"] for w in s["worst_steps"]] == [w["step"] for w in ts["worst_steps"]]
    assert [w["straggler"] for w in s["worst_steps"]] == [w["straggler"] for w in ts["worst_steps"]]
    assert s["straggler_rotates"] == ts["straggler_rotates"] and s["stragglers"] == ts["stragglers"]


@pytest.mark.slow
def test_a_rotating_straggler_is_said_as_such(runs, cli, monkeypatch):
    run, truth = runs["rotating"]
    ts = truth["summary"]
    heavy = {s: r for s, r, _ in truth["meta"]["heavy_at"]}
    assert ts["straggler_rotates"] and {g["rank"] for g in ts["stragglers"]} == set(heavy.values())
    rep = _json(cli, "report", run)  # its summary.ranks and rank_by_step are imbalance's summary and by_step
    _check_summary(rep["summary"]["ranks"], ts)
    assert [b["straggler"] for b in rep["tables"]["rank_by_step"]] == [heavy[s] for s in sorted(heavy)]
    assert [b["partial"] for b in rep["tables"]["rank_by_step"]] == [False] * 4
    out, text = _text(cli, monkeypatch, "report", run)
    assert "The last rank changes from step to step: rank 3 in steps 0, 3; rank 5 in step 1; rank 1 in step 2" in text
    assert "rank_by_step" in out  # the per-step straggler table, drawn
    (f,) = [x for x in _json(cli, "findings", run)["tables"]["findings"] if x["source"] == "ranks"]
    assert "the last rank changes from step to step: rank 3 in steps 0, 3 (bs 64); rank 5 in step 1" in f["title"]
    assert "against a median" not in f["title"]  # no one rank described by its one heavy step
    assert not f["minor"] and f["gain_ms_per_step"] * 1e6 == pytest.approx(ts["imbalance_ns_mean_per_step"], 0.01)


@pytest.mark.slow
def test_an_intermittent_straggler_is_not_hidden_by_the_median(runs, cli, monkeypatch):
    run, truth = runs["intermittent"]
    ts = truth["summary"]
    assert [w["step"] for w in ts["worst_steps"]] == [2, 1] and ts["stragglers"] == [{"rank": 3, "steps": [1, 2]}]
    assert ts["imbalance_ns_mean_per_step"] > 4 * ts["imbalance_ns_per_step"]  # what the median hid
    _check_summary(_json(cli, "imbalance", run)["summary"], ts)
    _, text = _text(cli, monkeypatch, "report", run)
    worst = ts["worst_steps"]
    assert f"worst step 2 {worst[0]['imbalance_ns'] / 1e6:,.3f} ms (rank 3)" in text
    (f,) = [x for x in _json(cli, "findings", run)["tables"]["findings"] if x["source"] == "ranks"]
    each = (worst[0]["imbalance_ns"] + worst[1]["imbalance_ns"]) / 2e6
    assert f"steps 1–2 lost {each:.3g} ms each (rank 3 last)" in f["title"]
    assert f["gain_ms_per_step"] * 1e6 == pytest.approx(ts["imbalance_ns_mean_per_step"], rel=0.01)
    assert f["gain_pct"] > 10 and not f["minor"]
    _, text = _text(cli, monkeypatch, "findings", run)
    head = text[text.index("1. Rank imbalance costs") :]
    assert f"steps 1–2 lost {each:.3g} ms each (rank 3 last)" in head and "[minor]" not in head[: head.index("]") + 1]


@pytest.mark.slow
def test_a_partial_step_is_flagged_and_kept_out_of_the_claims(runs, cli, monkeypatch):
    run, truth = runs["partial"]
    ts = truth["summary"]
    (g,) = truth["meta"]["partial_steps"]
    tb = {b["step"]: b for b in truth["by_step"]}
    # the step where rank 6 was heavy ends, in rank 6's file, before it arrived: another rank is "last" there
    assert tb[g]["partial"] and tb[g]["straggler"] != 6
    imb = _json(cli, "imbalance", run)
    _check_summary(imb["summary"], ts)
    by = {b["step"]: b for b in imb["tables"]["by_step"]}
    assert by[g]["partial"] and not any(by[s]["partial"] for s in by if s != g)
    for name in ("steps", "collectives", "per_collective"):  # flagged in every table
        assert all(row["partial"] == (row["step"] == g) for row in imb["tables"][name]), name
    assert imb["summary"]["straggler"]["rank"] == ts["straggler"]["rank"] == 2  # bs 32 in every whole step
    assert g not in [w["step"] for w in imb["summary"]["worst_steps"]]
    assert all(g not in x["steps"] for x in imb["summary"]["stragglers"])
    out, text = _text(cli, monkeypatch, "report", run)
    row = [ln.split() for ln in out.splitlines() if ln.split()[:1] == [str(g)] and ln.rstrip().endswith("yes")]
    assert row, "the partial step is flagged in the per-step table"
    assert "1 not recorded whole, left out of the claims" in text
    (f,) = [x for x in _json(cli, "findings", run)["tables"]["findings"] if x["source"] == "ranks"]
    assert f"partial step(s) {g} left out" in f["evidence"] and "rank 2," in f["title"]
    assert f"rank {tb[g]['straggler']}," not in f["title"]
