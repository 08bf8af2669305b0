"""The multi-rank generator (fixtures/synthlib/multirank.py) against its own truth, reading only the files.

No tracekit here: the written Kineto files are parsed with json/gzip and every check recomputes what the truth
says from them — recorded times map back to true time through the declared clocks, each barrier collective ends
at one true time on every rank, waits are last arrival - own arrival, the imbalance per step is the sum over its
instances of (last - lower-median arrival), and file names and distributedInfo give the declared ranks.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures.synthlib.multirank import build_run, write_run  # noqa: E402

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

COLL = (
    ("dispatch", re.compile(r"deep_ep::\w+::(notify_)?dispatch<")),
    ("combine", re.compile(r"deep_ep::\w+::(cached_notify_)?combine<")),
    ("allreduce", re.compile(r"^ncclDevKernel_AllReduce")),
    ("allgather", re.compile(r"^ncclDevKernel_AllGather")),
    ("reducescatter", re.compile(r"^ncclDevKernel_ReduceScatter")),
)
RANK_RES = (re.compile(r"-TP-(\d+)(?:-|\.)"), re.compile(r"(?:^|[/_-])rank[-_]?(\d+)(?:[/._]|$)"))
SCENARIOS = {
    "dp8": ("dp_attn_deepep8", {}),
    "dp8_windows": (
        "dp_attn_deepep8",
        {"late_start": {4: 1}, "stop_early": {6: 1}, "mid_step_start": [1], "naming": "rank_folders", "shuffle": True},
    ),
    "dp8_normal_stages": ("dp_attn_deepep8", {"deepep_mode": "normal", "naming": "sglang_stages", "seed": 3}),
    "dp16": ("dp_attn_deepep16", {"intra_node_offset_ns": 400, "late_start": {9: 1}}),
    "dp16_opaque": ("dp_attn_deepep16", {"naming": "opaque", "gzip": False, "stop_early": {0: 1}}),
    "dp16_normal": ("dp_attn_deepep16", {"deepep_mode": "normal", "mid_step_start": [12], "dense_layers": 1}),
    "dp8_ll_split": (
        "dp_attn_deepep8",
        {"deepep_mode": "ll_split", "mid_step_start": [5], "seed": 7, "dense_layers": 2, "layers": 5},
    ),
    "train4": ("nccl_train4", {"mid_step_start": [3]}),
    "train4_underscore": ("nccl_train4", {"naming": "rank_underscore", "late_start": {1: 2}}),
}


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)


def _ns(us: float) -> int:
    return int(round(us * 1000))


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def written(request, tmp_path_factory):
    preset, knobs = SCENARIOS[request.param]
    out = tmp_path_factory.mktemp(request.param)
    paths, tp = write_run(preset, out, **knobs)
    truth = json.loads(tp.read_text())
    docs = {p.relative_to(out).as_posix(): _load(p) for p in paths}
    return request.param, truth, docs


class Clock:
    """The truth's declared clock of one rank: true absolute ns <-> that file's relative ns."""

    def __init__(self, truth: dict, rank: int, base: int):
        m = truth["meta"]
        self.off, self.ppb, self.t0, self.base = m["offset_ns"][rank], m["drift_ppb"][rank], m["t0_ns"], base

    def rec(self, t: int) -> int:
        return t + self.off + (self.ppb * (t - self.t0)) // 1_000_000_000 - self.base

    def true(self, rel: int) -> int:
        t = rel + self.base - self.off
        for _ in range(4):
            t = rel + self.base - self.off - (self.ppb * (t - self.t0)) // 1_000_000_000
        assert self.rec(t) == rel
        return t


def _ref_true(truth: dict, v: int) -> int:
    """A truth value (reference clock, relative to the reference file's base) as true absolute ns."""
    m = truth["meta"]
    ref = truth["summary"]["reference_rank"]
    assert m["offset_ns"][ref] == 0 and m["drift_ppb"][ref] == 0  # true time is the reference clock
    return v + m["reference_base_time_ns"]


def _collectives_in(doc: dict) -> list[tuple[str, int, int]]:
    """The collective instances of one file: consecutive kernels of one kind (DeepEP notify + dispatch, a
    low-latency send half + recv half) are one instance, from the first kernel's start to the last one's end."""
    ks = []
    for ev in doc["traceEvents"]:
        if ev.get("cat") != "kernel":
            continue
        for kind, rx in COLL:
            if rx.search(ev["name"]):
                ks.append((kind, _ns(ev["ts"]), _ns(ev["ts"]) + _ns(ev["dur"])))
    out: list = []
    for kind, s, e in sorted(ks, key=lambda x: x[1]):
        if out and out[-1][0] == kind and kind in ("dispatch", "combine"):
            out[-1] = (kind, out[-1][1], max(out[-1][2], e))
        else:
            out.append((kind, s, e))
    return out


def _by_rank(truth: dict, docs: dict) -> dict:
    """rank -> [(file name, doc)] (sglang per-stage files: several per rank)."""
    out: dict = {}
    for name, doc in docs.items():
        out.setdefault(truth["meta"]["file_rank"][name], []).append((name, doc))
    return out


def test_names_and_distributed_info_give_the_declared_ranks(written):
    scen, truth, docs = written
    fr = truth["meta"]["file_rank"]
    assert sorted(fr) == sorted(docs)
    assert sorted(set(fr.values())) == list(range(truth["summary"]["ranks"]))
    for name, doc in docs.items():
        assert doc["distributedInfo"]["rank"] == fr[name]
        assert doc["distributedInfo"]["world_size"] == truth["summary"]["ranks"]
        if truth["meta"]["knobs"]["naming"] == "opaque":
            continue
        ranks = {int(m.group(1)) for rx in RANK_RES for m in rx.finditer(name)}
        assert ranks == {fr[name]}, name
    for row in truth["ranks"]:
        files = row["file"] if isinstance(row["file"], list) else [row["file"]]
        assert all(fr[f] == row["rank"] for f in files)


def test_recorded_collectives_map_to_truth_through_the_declared_clock(written):
    scen, truth, docs = written
    rows: dict = {}
    for c in truth["collectives"]:
        rows.setdefault(c["rank"], []).append(c)
    for rank, files in _by_rank(truth, docs).items():
        seen = []
        for name, doc in files:
            clk = Clock(truth, rank, doc["baseTimeNanoseconds"])
            seen += [(kind, clk.true(s), clk.true(e)) for kind, s, e in _collectives_in(doc)]
        seen.sort(key=lambda x: x[1])
        mine = sorted(rows.get(rank, []), key=lambda c: c["start_ns"])
        assert len(seen) == len(mine), (rank, len(seen), len(mine))
        for (kind, s, e), c in zip(seen, mine):
            assert kind == c["kind"]
            assert s == _ref_true(truth, c["start_ns"]) and e == _ref_true(truth, c["end_ns"])


def test_barriers_end_together_and_waits_are_last_arrival_minus_arrival(written):
    scen, truth, docs = written
    inst: dict = {}
    for c in truth["collectives"]:
        inst.setdefault((c["step"], c["kind"], c["seq"]), []).append(c)
    per = {(p["step"], p["kind"], p["seq"]): p for p in truth["per_collective"]}
    assert set(inst) == set(per)
    tol = truth["meta"]["tie_tolerance_ns"]
    for key, cs in inst.items():
        assert len({c["end_ns"] for c in cs}) == 1, key  # one true end on every rank
        last = max(c["start_ns"] for c in cs)
        for c in cs:
            assert c["wait_ns"] == last - c["start_ns"] and c["transfer_ns"] == c["end_ns"] - last
        arr = sorted(c["start_ns"] for c in cs)
        p = per[key]
        assert p["margin_ns"] == arr[-1] - arr[-2] and p["spread_ns"] == arr[-1] - arr[0]
        assert p["tie"] == (p["margin_ns"] < tol)
        if not p["tie"]:
            assert p["last_rank"] == max(cs, key=lambda c: c["start_ns"])["rank"] == p["cause_rank"]
            assert p["cause"] in ("batch", "prefill", "hot_expert", "compute")
        else:
            assert p["last_rank"] is None and p["cause"] is None
    for row in truth["steps"]:
        assert row["wait_ns"] == sum(
            c["wait_ns"] for c in truth["collectives"] if c["rank"] == row["rank"] and c["step"] == row["step"]
        )
    # times_last: over the straggler claim's instances, the steps recorded whole (all where none is; issue 40)
    partial = {b["step"] for b in truth["by_step"] if b["partial"]}
    claim = [p for p in truth["per_collective"] if p["step"] not in partial] or truth["per_collective"]
    for row in truth["ranks"]:
        assert row["total_wait_ns"] == sum(c["wait_ns"] for c in truth["collectives"] if c["rank"] == row["rank"])
        assert row["times_last"] == sum(1 for p in claim if p["last_rank"] == row["rank"])


def test_imbalance_per_step_recomputed_from_the_collectives(written):
    scen, truth, docs = written
    inst: dict = {}
    for c in truth["collectives"]:
        inst.setdefault((c["step"], c["kind"], c["seq"]), []).append(c["start_ns"])
    imb: dict = {}
    for (s, _, _), arr in inst.items():
        arr.sort()
        imb[s] = imb.get(s, 0) + arr[-1] - arr[(len(arr) - 1) // 2]
    assert {b["step"]: b["imbalance_ns"] for b in truth["by_step"]} == imb
    full = sorted(b["imbalance_ns"] for b in truth["by_step"] if not b["partial"])
    assert truth["summary"]["imbalance_ns_per_step"] == full[(len(full) - 1) // 2]
    assert truth["summary"]["collectives"] == len(inst)
    assert truth["summary"]["partial_steps"] == len(truth["meta"]["partial_steps"])


def test_step_markers_in_the_files_are_the_truth_steps(written):
    scen, truth, docs = written
    want: dict = {}
    for row in truth["steps"]:
        want.setdefault(row["rank"], []).append(row)
    for rank, files in _by_rank(truth, docs).items():
        got = []
        for name, doc in files:
            clk = Clock(truth, rank, doc["baseTimeNanoseconds"])
            for ev in doc["traceEvents"]:
                if ev.get("cat") == "gpu_user_annotation" and re.match(r"step\[|ProfilerStep#", ev["name"]):
                    s = clk.true(_ns(ev["ts"]))
                    got.append((s, clk.true(_ns(ev["ts"]) + _ns(ev["dur"])), ev["name"]))
        got.sort()
        rows = sorted(want.get(rank, []), key=lambda r: r["start_ns"])
        assert len(got) == len(rows), rank
        for (s, e, name), row in zip(got, rows):
            assert s == _ref_true(truth, row["start_ns"]) and e - s == row["wall_ns"]
            m = re.match(r"step\[(\w+) bs=(\d+)", name)
            if m:
                assert int(m.group(2)) == row["bs"]
                assert {"DECODE": "decode", "EXTEND": "prefill", "IDLE": "idle"}[m.group(1)] == row["phase"]
            else:
                assert row["phase"] == "train" and row["bs"] is None
        assert [r["local_step"] for r in rows] == list(range(len(rows)))


def test_recording_windows_are_honoured(written):
    scen, truth, docs = written
    m = truth["meta"]
    status = m["step_status"]
    late, early = m["late_start"], m["stop_early"]
    S = truth["summary"]["steps"]
    for r in range(truth["summary"]["ranks"]):
        st = status[str(r)]
        n_late, n_early = late.get(str(r), 0), early.get(str(r), 0)
        assert st[:n_late] == ["missing"] * n_late
        assert st[S - n_early :] == ["missing"] * n_early
        first = st[n_late]
        assert first == ("partial" if r in m["mid_step_start"] else "full")
        assert all(x == "full" for x in st[n_late + 1 : S - n_early])
        assert {row["step"] for row in truth["steps"] if row["rank"] == r} == {s for s in range(S) if st[s] == "full"}
    assert m["partial_steps"] == [s for s in range(S) if any(status[str(r)][s] != "full" for r in range(len(status)))]
    # every recorded event of a rank lies inside its declared window
    for rank, files in _by_rank(truth, docs).items():
        lo, hi = m["recording_ns"][rank]
        for name, doc in files:
            clk = Clock(truth, rank, doc["baseTimeNanoseconds"])
            assert doc["baseTimeNanoseconds"] % 1_000_000_000 == 0
            for ev in doc["traceEvents"]:
                if ev.get("ph") == "X":
                    s = clk.true(_ns(ev["ts"]))
                    assert _ref_true(truth, lo) <= s and clk.true(_ns(ev["ts"]) + _ns(ev["dur"])) <= _ref_true(
                        truth, hi
                    )


def test_dp16_two_nodes_clock_offsets():
    docs, truth = build_run("dp_attn_deepep16")
    m = truth["meta"]
    assert m["node_offsets_ns"] == [0, 3_700_000] and m["drift_ppb"][8:] == [4000] * 8
    assert [r["clock_offset_ns"] for r in truth["ranks"]] == [0] * 8 + [3_700_000] * 8
    assert [r["node"] for r in truth["ranks"]] == [0] * 8 + [1] * 8
    # the node-1 files start a second later on their own clock (base floored to the second)
    assert len(set(m["base_time_ns"])) == 2
    s = truth["summary"]
    assert s["straggler"]["rank"] == 10 and s["partial_steps"] == 0 and s["steps"] == 4
    b = {x["step"]: x for x in truth["by_step"]}
    assert b[0]["straggler"] == 10 and b[0]["straggler_bs"] == 64 and b[0]["median_bs"] == 16
    assert b[2]["straggler"] == 9  # the prefill rank
    causes = {(p["kind"], p["cause"]) for p in truth["per_collective"] if not p["tie"]}
    assert ("dispatch", "batch") in causes and ("dispatch", "prefill") in causes and ("combine", "hot_expert") in causes


def test_tie_run_names_no_straggler_and_nccl_annotations_are_not_collectives():
    _, truth = build_run("dp_attn_deepep8", tie=True)
    assert all(p["tie"] and p["margin_ns"] == 0 for p in truth["per_collective"])
    assert truth["summary"]["straggler"] is None and truth["summary"]["imbalance_ns_per_step"] == 0
    assert all(b["straggler"] is None for b in truth["by_step"])
    docs, truth = build_run("nccl_train4")
    assert truth["summary"]["straggler"]["rank"] == 2
    assert truth["summary"]["straggler"]["times_last"] == truth["summary"]["straggler"]["of"] == 16
    for name, doc in docs.items():
        evs = doc["traceEvents"]
        kern = [(e["ts"].ns, e["dur"].ns) for e in evs if e.get("cat") == "kernel" and "AllReduce" in e["name"]]
        ann = [
            (e["ts"].ns, e["dur"].ns)
            for e in evs
            if e.get("cat") == "gpu_user_annotation" and e["name"] == "nccl:all_reduce"
        ]
        assert kern == ann and len(kern) == 16  # the annotation covers the kernel exactly: one collective
    assert len(truth["collectives"]) == 4 * 16


def test_max_wait_rank_and_its_margin(written):
    scen, truth, docs = written
    for b in truth["by_step"]:
        waits: dict = {}
        for c in truth["collectives"]:
            if c["step"] == b["step"]:
                waits[c["rank"]] = waits.get(c["rank"], 0) + c["wait_ns"]
        top = sorted(waits.values())
        assert b["max_wait_rank"] == min(waits, key=lambda r: (-waits[r], r))
        assert b["max_wait_margin_ns"] == top[-1] - top[-2]


def test_truth_path_keeps_the_run_directory_traces_only(tmp_path):
    paths, tp = write_run("nccl_train4", tmp_path / "run", truth_path=tmp_path / "run.truth.json", steps=2)
    assert tp == tmp_path / "run.truth.json" and tp.exists()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [f"rank-{r}.json.gz" for r in range(4)]


def test_same_seed_same_bytes_and_knobs_are_checked(tmp_path):
    a, ta = write_run("dp_attn_deepep8", tmp_path / "a", layers=2, steps=2)
    b, tb = write_run("dp_attn_deepep8", tmp_path / "b", layers=2, steps=2)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b] and ta.read_text() == tb.read_text()
    with pytest.raises(ValueError):
        build_run("dp_attn_deepep8", nonsense=1)
    with pytest.raises(ValueError):
        build_run("dp_attn_deepep8", late_start={2: 3}, stop_early={2: 1})


def _tables(truth: dict, drop=()) -> dict:
    return {
        k: [{c: v for c, v in row.items() if c not in drop} for row in truth[k]]
        for k in ("steps", "collectives", "per_collective", "by_step")
    }


def test_invariances_names_clocks_and_a_dropped_first_step():
    _, base = build_run("dp_attn_deepep8")
    _, renamed = build_run("dp_attn_deepep8", naming="rank_folders", shuffle=True)
    assert _tables(renamed) == _tables(base)
    assert [r["file"] for r in renamed["ranks"]] == [f"rank{r}/trace.json.gz" for r in range(8)]
    # shifting node 1's clock changes only node 1's offsets (and its files' bases)
    _, a = build_run("dp_attn_deepep16")
    _, b = build_run("dp_attn_deepep16", node_offset_ns=-9_250_000)
    assert _tables(a) == _tables(b) and a["summary"] == b["summary"]
    assert [r["clock_offset_ns"] for r in b["ranks"]] == [0] * 8 + [-9_250_000] * 8
    assert [{k: v for k, v in r.items() if k != "clock_offset_ns"} for r in a["ranks"]] == [
        {k: v for k, v in r.items() if k != "clock_offset_ns"} for r in b["ranks"]
    ]
    # dropping rank 4's first step removes only rank 4's rows there: later steps are unchanged (rank 4's local
    # steps renumbered), and so is every instance of step 0 that rank 4 did not end by arriving last (a tie may)
    _, late = build_run("dp_attn_deepep8", late_start={4: 1})
    keep = {(p["step"], p["kind"], p["seq"]) for p in base["per_collective"] if p["step"] > 0 or not p["tie"]}
    assert all(p["last_rank"] != 4 for p in base["per_collective"])
    # (``partial``, issue 40, flags step 0 in the late run: rank 4 did not record it)
    assert [{**c, "partial": False} for c in late["collectives"] if (c["step"], c["kind"], c["seq"]) in keep] == [
        c
        for c in base["collectives"]
        if (c["step"], c["kind"], c["seq"]) in keep and not (c["rank"] == 4 and c["step"] == 0)
    ]
    assert not any(c["rank"] == 4 and c["step"] == 0 for c in late["collectives"])
    assert [r for r in late["steps"] if r["step"] > 0] == [
        {**r, "local_step": r["local_step"] - (r["rank"] == 4)} for r in base["steps"] if r["step"] > 0
    ]
    assert late["summary"]["partial_steps"] == 1 and late["meta"]["step_status"]["4"][0] == "missing"
    # every rank missing the first step: global steps are numbered from the first one recorded
    _, all_late = build_run("dp_attn_deepep8", late_start={r: 1 for r in range(8)})
    assert all_late["summary"]["steps"] == 3 and all_late["meta"]["first_simulated_step"] == 1
    d = all_late["meta"]["reference_base_time_ns"] - base["meta"]["reference_base_time_ns"]
    assert d == 1_000_000_000  # rank 0's profile now starts after a second boundary: its file's base moves on
    shifted = [
        {**row, "step": row["step"] - 1, "start_ns": row["start_ns"] - d, "end_ns": row["end_ns"] - d}
        for row in base["collectives"]
        if row["step"] > 0
    ]
    assert all_late["collectives"] == shifted
