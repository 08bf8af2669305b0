"""Who waits for whom: arrivals, waits and stragglers of matched collective instances (docs/multirank.md).

Arrival = the kernel's start on the reference clock; wait = last arrival − own arrival; transfer = own end − last
arrival; an instance's margin = last − second-last arrival, a tie when within the alignment residual of the two
ranks (a tie names no straggler). Per step: imbalance = Σ over its instances of (last − median arrival, the lower
median); the straggler = the rank most often last; its cause = its own batch and the work it did before arriving
against the median rank's. Medians of ns are lower medians, so every ``*_ns`` is an integer.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# what a rank did before arriving at an instance of a kind, by the column of the mapper's table
MIN_TIE_NS = 2_000  # margins below this are ties whatever the residual: launch jitter, the alignment's own accuracy
WORK_BEFORE = {"dispatch": ("attention_ns", "attention"), "combine": ("expert_ns", "expert GEMMs")}
DEFAULT_WORK = ("work_ns", "compute")

INSTANCE_COLS = ["step", "kind", "seq", "last_rank", "margin_ns", "spread_ns", "median_wait_ns", "transfer_ns", "tie",
                 "cause_rank", "cause"]
COLLECTIVE_COLS = ["step", "kind", "seq", "rank", "start_ns", "end_ns", "wait_ns", "transfer_ns"]
STEP_COLS = ["step", "rank", "local_step", "phase", "bs", "start_ns", "wall_ns", "wait_ns"]
BY_STEP_COLS = ["step", "imbalance_ns", "straggler", "straggler_bs", "median_bs", "max_wait_rank"]


def lower_median(values) -> int | None:
    v = np.sort(np.asarray(values, dtype=np.int64))
    return int(v[(len(v) - 1) // 2]) if len(v) else None


def _us(ns) -> str:
    return f"{ns / 1e3:,.1f} µs"


def attribute(coll: pd.DataFrame, steps: pd.DataFrame, residual: dict[int, int | None]) -> dict[str, pd.DataFrame]:
    """``coll``: step, kind, seq, rank, start_ns, end_ns (reference clock) and the work columns; ``steps``: step,
    rank, local_step, phase, bs, start_ns, end_ns. Returns the tables collectives, per_collective, steps, by_step."""
    key = ["step", "kind", "seq"]
    c = coll[coll.groupby(key)["rank"].transform("size") >= 2]  # an instance seen on one rank says nothing
    c = c.sort_values(["step", "kind", "seq", "start_ns", "rank"], kind="stable").reset_index(drop=True)
    gid = c.groupby(key, sort=False).ngroup().to_numpy()
    n_g = int(gid.max()) + 1 if len(gid) else 0
    first = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]]) if len(gid) else np.zeros(0, np.int64)
    size = np.diff(np.r_[first, len(gid)])
    last_i = first + size - 1
    s = c["start_ns"].to_numpy(np.int64)
    e = c["end_ns"].to_numpy(np.int64)
    rk = c["rank"].to_numpy(np.int64)
    last = s[last_i]
    second = np.where(size >= 2, s[np.maximum(last_i - 1, 0)], last)
    lowmed = s[first + (size - 1) // 2]
    wait = last[gid] - s
    transfer = e - last[gid]
    res = np.array([residual.get(int(r)) or 0 for r in rk], dtype=np.int64)
    margin = last - second
    tie_tol = np.maximum(np.maximum(res[last_i], res[np.maximum(last_i - 1, 0)]), MIN_TIE_NS)
    tie = (size < 2) | (margin < tie_tol)
    # lower median of the waits: waits fall as starts rise, so it is the start at the mirrored position
    med_wait = last - s[first + size - 1 - (size - 1) // 2]
    tr_sorted = transfer[np.lexsort((transfer, gid))]  # groups stay where they are, each sorted by transfer
    med_transfer = tr_sorted[first + (size - 1) // 2] if len(gid) else np.zeros(0, np.int64)
    inst = c.loc[first, key].reset_index(drop=True)
    last_rank = rk[last_i]
    # the batch of each rank in each step, and the work before each arrival
    bs_of = {(int(r), int(g)): b for r, g, b in zip(steps["rank"], steps["step"], steps["bs"]) if pd.notna(b)}
    phase_of = {(int(r), int(g)): p for r, g, p in zip(steps["rank"], steps["step"], steps["phase"])}
    causes = []
    for j in range(n_g):
        if tie[j]:
            causes.append(None)
            continue
        rows = slice(first[j], first[j] + size[j])
        g, kind, lr = int(inst.at[j, "step"]), inst.at[j, "kind"], int(last_rank[j])
        causes.append(_cause(kind, lr, g, rk[rows], c[[WORK_BEFORE.get(kind, DEFAULT_WORK)[0]]].to_numpy(
            np.int64)[rows, 0], int(last_i[j] - first[j]), bs_of, phase_of))
    per = inst.assign(last_rank=pd.array(np.where(tie, 0, last_rank), dtype="Int64"), margin_ns=margin, spread_ns=last - s[first], median_wait_ns=med_wait,
                      transfer_ns=med_transfer, tie=tie,
                      cause_rank=pd.array(np.where(tie, 0, last_rank), dtype="Int64"),
                      cause=pd.array(causes, dtype=object))
    per.loc[per["tie"], ["cause_rank", "last_rank"]] = pd.NA
    per = per[INSTANCE_COLS]
    colls = c.assign(wait_ns=wait, transfer_ns=transfer)[COLLECTIVE_COLS]
    colls = colls.sort_values(["step", "kind", "seq", "rank"], kind="stable").reset_index(drop=True)
    # per rank-step
    wsum = colls.groupby(["step", "rank"])["wait_ns"].sum()
    # the rank-steps recorded whole (a partial one — the profile started or stopped inside it — has no row)
    st = steps[(steps["step"] >= 0) & ~steps.get("partial", pd.Series(False, index=steps.index)).astype(bool)].copy()
    st = st.sort_values(["rank", "start_ns"], kind="stable")
    st["local_step"] = st.groupby("rank").cumcount().astype(np.int64)
    st = st.sort_values(["step", "rank"], kind="stable")
    st["wall_ns"] = (st["end_ns"] - st["start_ns"]).astype(np.int64)
    st["wait_ns"] = wsum.reindex(pd.MultiIndex.from_frame(st[["step", "rank"]])).fillna(0).to_numpy(np.int64)
    st = st[STEP_COLS].reset_index(drop=True)
    # per step
    per_g = per.assign(imb=(last - lowmed))
    rows = []
    all_steps = sorted(set(st["step"]) | set(per["step"]))
    for g in all_steps:
        p = per_g[per_g["step"] == g]
        straggler = most_often_last(p)
        bss = st.loc[(st["step"] == g) & st["bs"].notna(), "bs"]
        w = wsum.loc[g].sort_index() if g in wsum.index.get_level_values(0) else pd.Series(dtype=np.int64)
        rows.append({"step": int(g), "imbalance_ns": int(p["imb"].sum()), "straggler": straggler,
                     "straggler_bs": bs_of.get((straggler, int(g))) if straggler is not None else None,
                     "median_bs": lower_median(bss.astype(np.int64)) if len(bss) else None,
                     "max_wait_rank": int(w.idxmax()) if len(w) else None})
    by_step = pd.DataFrame(rows, columns=BY_STEP_COLS)
    for col in ("straggler", "straggler_bs", "max_wait_rank"):
        by_step[col] = pd.array(by_step[col], dtype="Int64")
    by_step["median_bs"] = pd.array(by_step["median_bs"], dtype="Int64")
    return {"collectives": colls, "per_collective": per.reset_index(drop=True), "steps": st, "by_step": by_step,
            "imbalance": per_g[["step", "last_rank", "tie", "imb"]]}


def most_often_last(per: pd.DataFrame) -> int | None:
    """The rank last most often among the instances that are no tie; among equals the one whose lateness cost more
    (Σ last − median arrival, column ``imb``), then the lowest rank."""
    p = per[~per["tie"]]
    if p.empty:
        return None
    agg = p.groupby("last_rank")["imb"].agg(["size", "sum"]).reset_index()
    agg = agg.sort_values(["size", "sum", "last_rank"], ascending=[False, False, True], kind="stable")
    return int(agg["last_rank"].iloc[0])


def _cause(kind, last, g, ranks, work, pos, bs_of, phase_of) -> str:
    """Why ``last`` arrived last at an instance, as ``code: detail``: ``prefill`` (it ran a prefill while others
    decoded), ``batch`` (a larger batch than the median rank's), ``hot_expert`` (more expert GEMM work before a
    combine than the median rank), else ``compute`` (more work before arriving)."""
    col, what = WORK_BEFORE.get(kind, DEFAULT_WORK)
    mine, med = int(work[pos]), lower_median(work)
    known = [int(bs_of[(int(r), g)]) for r in ranks if (int(r), g) in bs_of]
    my_bs = bs_of.get((last, g))
    parts = []
    if my_bs is not None and known:
        parts.append(f"bs {int(my_bs)} vs median {lower_median(known)}")
    parts.append(f"{what} {_us(mine)} vs median {_us(med)} before arriving")
    if kind == "combine":
        code = "hot_expert" if mine > med else "compute"
    elif phase_of.get((last, g)) == "prefill" and kind == "dispatch":
        code = "prefill"
    elif my_bs is not None and known and my_bs > lower_median(known):
        code = "batch"
    else:
        code = "compute"
    return f"{code}: " + "; ".join(parts)



