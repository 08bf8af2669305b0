"""Every rank of a run (issue 28) on small hand-built runs whose answer is known: rank identity, clock alignment,
collective matching and who waits for whom."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import kernel, write_trace
from tracekit.fan_out import imbalance as multirank_imbalance  # `tracekit imbalance`
from tracekit.analyses.fleet.multirank.align import coarse_offsets, robust_fit
from tracekit.analyses.fleet.multirank.discover import find_ranks, name_rank, stage_of
from tracekit.analyses.fleet.multirank.mapper import load_collectives
from tracekit.errors import InputError, MissingDataError, UsageError
from tracekit.ingest.discover import rank_tags

DISPATCH = "void deep_ep::internode_ll::dispatch<true, 3, 10, 7168>(void*, float*)"
COMBINE = "void deep_ep::internode_ll::combine<3, 10, 7168, 9>(void*, void*)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
BASE_US = 1_000_000.0


# --------------------------------------------------------------------------- identity


def test_rank_tags_in_any_order_and_stages():
    assert rank_tags("1758612345.12-TP-3-DP-1-EP-3-DECODE.trace.json.gz") == {"TP": 3, "DP": 1, "EP": 3}
    assert rank_tags("p-DP-1-TP-3.trace.json.gz") == {"DP": 1, "TP": 3}
    assert rank_tags("p-TP-5-ATTN_CP-2-PP-1.trace.json.gz") == {"TP": 5, "ATTN_CP": 2, "PP": 1}
    assert rank_tags("d_bs16_100k.trace.json.gz") == {}
    assert stage_of("x-TP-0-EXTEND.trace.json.gz") == "EXTEND" and stage_of("x-TP-0.trace.json.gz") is None


@pytest.mark.parametrize(
    "rel,rank",
    [
        ("rank-3.json.gz", 3),
        ("rank_3.json", 3),
        ("trace_rank12.json", 12),
        ("rank3/trace.json", 3),
        ("node0/rank_7/x.json", 7),
        ("frank.json", None),
    ],
)
def test_rank_in_file_or_folder_names(tmp_path, rel, rank):
    p = tmp_path / rel
    assert name_rank(p, tmp_path)[0] == rank


def _tiny(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_trace(path, [kernel("attn", BASE_US, 10.0)], hostFile=path.name)  # two ranks never share bytes


def test_stage_files_merge_into_their_rank_and_conflicts_are_one_sentence(tmp_path):
    for n in ("p-TP-0-DECODE.trace.json", "p-TP-0-EXTEND.trace.json", "p-TP-1-DECODE.trace.json"):
        _tiny(tmp_path / "run" / n)
    ranks, _ = find_ranks(tmp_path / "run")
    assert [(r.rank, len(r.files)) for r in ranks] == [(0, 2), (1, 1)]
    _tiny(tmp_path / "dup" / "rank-1.json")
    _tiny(tmp_path / "dup" / "rank_1" / "trace.json")
    with pytest.raises(InputError, match="both name rank 1"):
        find_ranks(tmp_path / "dup")


def test_unnamed_files_take_distributed_info_and_need_it(tmp_path):
    (tmp_path / "ok").mkdir()
    for r in (0, 1):
        write_trace(
            tmp_path / "ok" / f"a{r}.json",
            _run_events(r, offset_us=0.0, ranks=2)[0],
            distributedInfo={"rank": r, "world_size": 2},
        )
    res = multirank_imbalance(tmp_path / "ok", jobs=1)
    assert res.tables["ranks"]["rank"].tolist() == [0, 1]
    (tmp_path / "bad").mkdir()
    for r in (0, 1):
        write_trace(tmp_path / "bad" / f"a{r}.json", _run_events(r, offset_us=0.0, ranks=2)[0], hostFile=r)
    with pytest.raises(MissingDataError, match="which rank is this trace"):
        multirank_imbalance(tmp_path / "bad", jobs=1)


def test_collective_kinds_are_data():
    rules = load_collectives()
    names = [
        DISPATCH,
        COMBINE,
        ALLREDUCE,
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)",
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
        "cross_device_reduce_1stage<__nv_bfloat16, 8>",
        "void deep_ep::intranode::notify_dispatch<8>(int const*)",
        "flash_fwd_kernel",
        "nccl:all_reduce",
        "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
        "ncclKernel_Broadcast_RING_LL_Sum_int8_t",
    ]
    kinds = [rules.kinds[k] if k >= 0 else None for k in rules.kind_codes(names)]
    assert kinds == [
        "dispatch",
        "combine",
        "allreduce",
        "sendrecv",
        "reducescatter",
        "allreduce",
        "dispatch",
        None,
        None,
        "collective",
        "broadcast",
    ]


# --------------------------------------------------------------------------- alignment math


def test_robust_fit_finds_offset_and_drift_and_ignores_outliers():
    x = np.linspace(0, 1e9, 200)  # 1 s of consensus time
    d = 3_000_000 + 5e-6 * x  # 3 ms offset, 5 ppm drift
    d[::37] += 400_000  # a few ends that are not together
    a, b, res, out = robust_fit(x, d)
    assert abs(a - 3_000_000) < 1 and abs(b - 5e-6) < 1e-9 and res < 1 and out == 6
    a, b, res, _ = robust_fit(x, np.full(200, -42_000.0))
    assert a == -42_000 and b == 0 and res == 0


def test_coarse_offsets_with_a_late_start_and_equal_steps():
    ref = np.arange(10) * 10_000_000  # steps of 10 ms, all alike
    late = ref[3:] + 2_000_000  # started 3 steps late, a clock 2 ms ahead
    off, centres, tol, _ = coarse_offsets({0: ref, 1: late}, 0)
    assert off[1] == pytest.approx(2_000_000) and len(centres) == 10


# --------------------------------------------------------------------------- a hand-built run with its truth


def _run_events(
    rank: int,
    *,
    offset_us: float,
    bs_by_step=(8, 8, 8),
    layers: int = 3,
    attn_us_per_req: float = 10.0,
    hot_rank: int | None = None,
    skip_steps: int = 0,
    cut_layers: int = 0,
    drift_ppm: float = 0.0,
    ranks: int = 4,
):
    """One rank of a DP-attention + DeepEP decode run. True time: each step starts at s0 (all ranks together: the
    previous combine ended together); per layer each rank runs attention for bs × attn_us_per_req, arrives at the
    dispatch, every dispatch ends 20 µs after the last arrival, experts run 50 µs (+30 on ``hot_rank``), the combines
    end 15 µs after the last arrival. Recorded time = true × (1 + drift) + offset. Returns (events, truth rows)."""
    ev, truth = [], []
    t = 0.0

    def rec(x):
        return BASE_US + x * (1 + drift_ppm * 1e-6) + offset_us

    for step, bs_all in enumerate(bs_by_step):
        bss = bs_all if isinstance(bs_all, (list, tuple)) else [bs_all] * ranks
        s0 = t
        mine = bss[rank]
        recorded = step >= skip_steps
        for layer in range(layers):
            arrive = {r: t + 5.0 + bss[r] * attn_us_per_req for r in range(ranks)}
            last = max(arrive.values())
            d_end = last + 20.0
            expert = {r: 50.0 + (30.0 if r == hot_rank else 0.0) for r in range(ranks)}
            c_arrive = {r: d_end + expert[r] for r in range(ranks)}
            c_last = max(c_arrive.values())
            c_end = c_last + 15.0
            if recorded and not (step == skip_steps and layer < cut_layers):
                ev.append(kernel("rmsnorm_kernel", rec(t), 5.0))
                ev.append(kernel("flash_mla_decode_kernel", rec(t + 5.0), mine * attn_us_per_req))
                ev.append(kernel(DISPATCH, rec(arrive[rank]), d_end - arrive[rank], stream=24))
                ev.append(kernel("grouped_gemm_masked_expert", rec(d_end), expert[rank]))
                ev.append(kernel(COMBINE, rec(c_arrive[rank]), c_end - c_arrive[rank], stream=24))
                truth.append(
                    {
                        "step": step,
                        "layer": layer,
                        "d_wait": last - arrive[rank],
                        "c_wait": c_last - c_arrive[rank],
                        "d_last": max(arrive, key=lambda r: (arrive[r], r)),
                        "c_last": max(c_arrive, key=lambda r: (c_arrive[r], r)),
                    }
                )
            t = c_end
        t += 30.0  # the scheduler between steps
        if recorded:
            start = s0 if not (step == skip_steps and cut_layers) else None
            if start is not None:
                ev.append(
                    {
                        "ph": "X",
                        "cat": "gpu_user_annotation",
                        "name": f"step[DECODE bs={mine}]",
                        "pid": 0,
                        "tid": 7,
                        "ts": rec(s0),
                        "dur": (t - 30.0 - s0) * (1 + drift_ppm * 1e-6),
                    }
                )
    return ev, truth


def _write_run(root: Path, offsets_us: dict[int, float], names=None, **kw) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    per_rank_kw = kw.pop("per_rank", {})
    for r, off in offsets_us.items():
        ev, _ = _run_events(r, offset_us=off, ranks=len(offsets_us), **{**kw, **per_rank_kw.get(r, {})})
        name = names[r] if names else f"prof-TP-{r}-DP-{r}-EP-{r}.trace.json"
        write_trace(root / name, ev, hostFile=name)  # two ranks' traces never share bytes
    return root


BS = ((8, 8, 8, 32), (8, 16, 8, 8), (4, 4, 4, 4))


def test_offsets_waits_and_straggler_on_two_nodes(tmp_path):
    # two nodes of two GPUs: node 1's clock 3.2 ms ahead; rank 3 holds bs 32 in step 0, rank 1 bs 16 in step 1
    offs = {0: 0.0, 1: 0.0, 2: 3200.0, 3: 3200.0}
    run = _write_run(tmp_path / "run", offs, bs_by_step=BS)
    r = multirank_imbalance(run, jobs=1, gpus_per_node=2)
    assert r.schema == "tracekit.imbalance/2" and r.command == "imbalance"
    s = r.summary
    assert s["ranks"] == 4 and s["reference_rank"] == 0 and s["clock"] == "aligned" and s["steps"] == 3
    assert s["partial_steps"] == 0 and s["unmatched"] == 0 and s["collectives"] == 3 * 3 * 2
    ranks = r.tables["ranks"].set_index("rank")
    assert ranks["clock_offset_ns"].tolist() == [0, 0, 3_200_000, 3_200_000]
    assert ranks["node"].tolist() == [0, 0, 1, 1]
    assert (ranks["residual_ns"] <= 1).all()
    # waits: the dispatch of step 0 waits for rank 3's 32 requests (320 µs of attention against 80)
    c = r.tables["collectives"]
    d0 = c[(c.step == 0) & (c.kind == "dispatch") & (c.seq == 0)].set_index("rank")
    assert d0["wait_ns"].tolist() == [240_000, 240_000, 240_000, 0]
    assert d0["transfer_ns"].tolist() == [20_000] * 4
    assert d0["start_ns"].nunique() == 2  # ranks 0-2 arrive together, on one clock
    per = r.tables["per_collective"]
    p = per[(per.step == 0) & (per.kind == "dispatch")]
    assert p["last_rank"].tolist() == [3, 3, 3] and not p["tie"].any()
    assert p["margin_ns"].tolist() == [240_000] * 3 and p["cause_rank"].tolist() == [3, 3, 3]
    assert "bs 32 vs median 8" in p["cause"].iloc[0] and "attention 320.0 µs" in p["cause"].iloc[0]
    # combines: all ranks arrive together (no hot expert): ties, no straggler
    pc = per[(per.step == 0) & (per.kind == "combine")]
    assert pc["tie"].all() and pc["cause_rank"].isna().all()
    by = r.tables["by_step"].set_index("step")
    assert by.loc[0, "straggler"] == 3 and by.loc[0, "straggler_bs"] == 32 and by.loc[0, "median_bs"] == 8
    assert by.loc[0, "imbalance_ns"] == 3 * 240_000  # Σ (last − lower-median arrival) over the 3 dispatches
    assert by.loc[1, "straggler"] == 1 and by.loc[1, "straggler_bs"] == 16
    assert by.loc[2, "imbalance_ns"] == 0 and by.loc[2, "straggler"] is pd_na()
    # ranks 3 and 1 are each last 3 times: rank 3's lateness cost more (240 µs a dispatch against 80)
    assert s["straggler"] == {"rank": 3, "times_last": 3, "of": 6}
    assert any("last equally often" in w for w in r.warnings)
    st = r.tables["steps"]
    assert list(st.columns) == [
        "step",
        "rank",
        "local_step",
        "phase",
        "bs",
        "start_ns",
        "wall_ns",
        "wait_ns",
        "partial",
    ]
    assert st[(st.step == 0) & (st["rank"] == 0)]["wait_ns"].iloc[0] == 3 * 240_000
    assert st["phase"].eq("decode").all()


def pd_na():
    import pandas as pd

    return pd.NA


def test_hot_expert_makes_the_combine_wait(tmp_path):
    run = _write_run(tmp_path / "run", {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}, bs_by_step=((8, 8, 8, 8),), hot_rank=2)
    r = multirank_imbalance(run, jobs=1)
    per = r.tables["per_collective"]
    pc = per[per.kind == "combine"]
    assert pc["last_rank"].tolist() == [2, 2, 2] and pc["margin_ns"].tolist() == [30_000] * 3
    assert "expert GEMMs 80.0 µs vs median 50.0 µs" in pc["cause"].iloc[0]
    assert per[per.kind == "dispatch"]["tie"].all()


def test_drift_is_fitted(tmp_path):
    offs = {0: 0.0, 1: 0.0, 2: -1500.0, 3: -1500.0}
    run = _write_run(
        tmp_path / "run", offs, bs_by_step=BS * 4, per_rank={2: {"drift_ppm": 40.0}, 3: {"drift_ppm": 40.0}}
    )
    r = multirank_imbalance(run, jobs=1, gpus_per_node=2)
    ranks = r.tables["ranks"].set_index("rank")
    assert abs(ranks.loc[2, "clock_offset_ns"] + 1_500_000) <= 2_000
    c = r.tables["collectives"]
    d0 = c[(c.step == 0) & (c.kind == "dispatch") & (c.seq == 0)].set_index("rank")
    assert (d0["wait_ns"] - np.array([240_000, 240_000, 240_000, 0])).abs().max() <= 2_000


@pytest.mark.slow
def test_invariances_rename_shift_and_a_late_rank(tmp_path):
    offs = {0: 0.0, 1: 0.0, 2: 3200.0, 3: 3200.0}
    base = multirank_imbalance(_write_run(tmp_path / "a", offs, bs_by_step=BS), jobs=1, gpus_per_node=2)
    # renamed files (rank-N in folders), another order on disk
    names = {0: "rank_0/t.json", 1: "rank_1/t.json", 2: "rank_2/t.json", 3: "rank_3/t.json"}
    for n in names.values():
        (tmp_path / "b" / Path(n).parent).mkdir(parents=True, exist_ok=True)
    renamed = multirank_imbalance(_write_run(tmp_path / "b", offs, names=names, bs_by_step=BS), jobs=1, gpus_per_node=2)
    for t in ("steps", "collectives", "per_collective", "by_step"):
        assert renamed.tables[t].equals(base.tables[t]), t
    # node 1's clock shifted by another 7 ms: only its offset changes
    shifted = multirank_imbalance(
        _write_run(tmp_path / "c", {**offs, 2: 10200.0, 3: 10200.0}, bs_by_step=BS), jobs=1, gpus_per_node=2
    )
    assert shifted.tables["ranks"]["clock_offset_ns"].tolist() == [0, 0, 10_200_000, 10_200_000]
    for t in ("steps", "collectives", "per_collective", "by_step"):
        assert shifted.tables[t].equals(base.tables[t]), t
    # rank 2's profile starts one step late: only its rows of step 0 go
    late = multirank_imbalance(
        _write_run(tmp_path / "d", offs, bs_by_step=BS, per_rank={2: {"skip_steps": 1}}), jobs=1, gpus_per_node=2
    )
    assert late.summary["steps"] == 3 and late.summary["partial_steps"] == 1
    st_b, st_l = base.tables["steps"], late.tables["steps"]
    gone = st_b[(st_b["rank"] == 2) & (st_b.step == 0)]
    assert len(st_l) == len(st_b) - len(gone)
    kept = st_b.drop(gone.index)
    assert (
        st_l[["step", "rank", "start_ns", "wall_ns"]].to_numpy()
        == kept[["step", "rank", "start_ns", "wall_ns"]].to_numpy()
    ).all()
    cb, cl = base.tables["collectives"], late.tables["collectives"]
    assert len(cl) == len(cb) - len(cb[(cb["rank"] == 2) & (cb.step == 0)])
    assert late.tables["ranks"].set_index("rank").loc[2, "clock_offset_ns"] == 3_200_000


def test_a_rank_that_starts_mid_step(tmp_path):
    offs = {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}
    r = multirank_imbalance(_write_run(tmp_path / "run", offs, bs_by_step=BS, per_rank={1: {"cut_layers": 2}}), jobs=1)
    assert r.summary["partial_steps"] == 1 and r.summary["unmatched"] == 0
    c = r.tables["collectives"]
    mine = c[(c["rank"] == 1) & (c.step == 0)]
    assert sorted(mine["seq"].unique().tolist()) == [2]  # its one recorded layer is the third, not the first
    assert mine[mine.kind == "dispatch"]["wait_ns"].iloc[0] == 240_000


@pytest.mark.slow
def test_parallel_workers_and_a_list_of_files_give_the_same_answer(tmp_path):
    run = _write_run(tmp_path / "run", {0: 0.0, 1: 0.0, 2: 3200.0, 3: 3200.0}, bs_by_step=BS)
    a = multirank_imbalance(run, jobs=1, gpus_per_node=2)
    b = multirank_imbalance(run, jobs=2, gpus_per_node=2)
    assert a.to_dict() == b.to_dict()
    files = sorted(run.iterdir(), reverse=True)
    c = multirank_imbalance([str(f) for f in files], jobs=1, gpus_per_node=2)
    for t in ("steps", "collectives", "per_collective", "by_step"):
        assert c.tables[t].equals(a.tables[t]), t
    assert c.tables["ranks"]["file"].tolist() == [str(f) for f in sorted(files)]


def test_usage_errors():
    with pytest.raises(UsageError, match="gpus-per-node"):
        multirank_imbalance(".", gpus_per_node=0)
    with pytest.raises(UsageError, match="jobs"):
        multirank_imbalance(".", jobs=0)


@pytest.mark.slow
def test_an_annotation_covering_a_collective_is_not_a_second_one_and_one_rank_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    for r in (0, 1):
        ev = [
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "ProfilerStep#3",
                "pid": 0,
                "tid": 7,
                "ts": BASE_US,
                "dur": 500.0,
            },
            kernel("sm90_xmma_gemm_bf16_kernel", BASE_US + 1, 100.0 + 50 * r),
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "nccl:all_reduce",
                "pid": 0,
                "tid": 24,
                "ts": BASE_US + 101 + 50 * r,
                "dur": 200.0 - 50 * r,
            },
            kernel(ALLREDUCE, BASE_US + 101 + 50 * r, 200.0 - 50 * r, stream=24),
        ]
        write_trace(tmp_path / "run" / f"rank{r}.json", ev)
    res = multirank_imbalance(tmp_path / "run", jobs=1)
    per = res.tables["per_collective"]
    assert res.summary["collectives"] == 1 and per["kind"].tolist() == ["allreduce"]
    assert per["last_rank"].tolist() == [1] and per["margin_ns"].tolist() == [50_000]
    assert "compute: compute 150.0 µs vs median 100.0 µs before arriving" == per["cause"].iloc[0]
    (tmp_path / "run" / "rank1.json").unlink()
    with pytest.raises(MissingDataError, match="at least two ranks"):
        multirank_imbalance(tmp_path / "run", jobs=1)


def test_no_step_marker_and_a_late_rank_is_matched_by_the_shape_of_its_ends(tmp_path):
    """No marker: each rank is one whole-trace step; rank 1 (another node, 5 ms ahead) recorded only the last 7 of
    10 all-reduces. Its kernels are placed where its ends minus rank 0's are constant — without any clock — and
    its offset then comes from them."""
    (tmp_path / "run").mkdir()
    for r, off, skip in ((0, 0.0, 0), (1, 5000.0, 3)):
        ev, t = [], 0.0
        for i in range(10):
            base = 100.0 + 7.0 * (i % 4)
            comp = base + (40.0 if r == 1 and i % 2 else 0.0)
            end = t + base + (40.0 if i % 2 else 0.0) + 30.0
            if i >= skip:
                ev.append(kernel("sm90_gemm_kernel", BASE_US + off + t, comp))
                ev.append(kernel(ALLREDUCE, BASE_US + off + t + comp, end - t - comp, stream=24))
            t = end + 20.0
        write_trace(tmp_path / "run" / f"rank{r}.json", ev)
    res = multirank_imbalance(tmp_path / "run", jobs=1, gpus_per_node=1)
    s = res.summary
    assert s["clock"] == "aligned" and s["unmatched"] == 0 and s["collectives"] == 7 and s["partial_steps"] == 1
    assert res.tables["ranks"]["clock_offset_ns"].tolist() == [0, 5_000_000]
    per = res.tables["per_collective"]
    assert per["seq"].tolist() == list(range(3, 10))
    assert per["last_rank"].tolist()[::2] == [1, 1, 1, 1] and per["tie"].tolist()[1::2] == [True] * 3
    assert s["straggler"] == {"rank": 1, "times_last": 4, "of": 4}


def test_a_sweep_of_batch_sizes_is_not_the_ranks_of_one_run(tmp_path):
    """imbalance/1 once gave 'median imbalance 1.25' for two operating points of one rank: the same rank in two
    folders is refused in one sentence (exit 3), never compared."""
    for bs in (4, 8):
        _tiny(tmp_path / "sweep" / f"d_bs{bs}_100k" / "run-TP-0.trace.json")
    with pytest.raises(InputError, match="both name rank 0"):
        multirank_imbalance(tmp_path / "sweep", jobs=1)


def test_an_eager_send_that_ends_before_its_peer_arrives_waited_nothing():
    """A point-to-point send may end before the receiver's kernel starts (the HTA pair: rank 0 12.1→42.8 ms, rank 1
    from 47.7 ms): it waited 0 for its peer and its whole kernel is its transfer — a wait and a transfer never below
    0; a blocking collective keeps wait = last − own arrival, transfer = own end − last arrival."""
    import pandas as pd

    from tracekit.analyses.fleet.multirank.attribute import attribute

    def row(step, kind, seq, rank, s, e):
        return {
            "step": step,
            "kind": kind,
            "seq": seq,
            "rank": rank,
            "start_ns": s,
            "end_ns": e,
            "work_ns": 0,
            "attention_ns": 0,
            "expert_ns": 0,
        }

    coll = pd.DataFrame(
        [
            row(0, "sendrecv", 0, 0, 12_000, 42_000),
            row(0, "sendrecv", 0, 1, 47_000, 105_000),
            row(0, "allreduce", 0, 0, 200_000, 260_000),
            row(0, "allreduce", 0, 1, 230_000, 260_000),
        ]
    )
    steps = pd.DataFrame(
        {
            "step": [0, 0],
            "rank": [0, 1],
            "local_step": [0, 0],
            "phase": ["train", "train"],
            "bs": [None, None],
            "start_ns": [0, 0],
            "end_ns": [300_000, 300_000],
        }
    )
    out = attribute(coll, steps, {0: 0, 1: 0})
    c = out["collectives"].set_index(["kind", "rank"])
    assert (c.loc[("sendrecv", 0), "wait_ns"], c.loc[("sendrecv", 0), "transfer_ns"]) == (0, 30_000)
    assert (c.loc[("sendrecv", 1), "wait_ns"], c.loc[("sendrecv", 1), "transfer_ns"]) == (0, 58_000)
    assert (c.loc[("allreduce", 0), "wait_ns"], c.loc[("allreduce", 0), "transfer_ns"]) == (30_000, 30_000)
    assert (c.loc[("allreduce", 1), "wait_ns"], c.loc[("allreduce", 1), "transfer_ns"]) == (0, 30_000)
    assert (out["collectives"][["wait_ns", "transfer_ns"]] >= 0).all().all()
