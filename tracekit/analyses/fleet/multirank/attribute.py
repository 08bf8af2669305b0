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

from .numbering import dense_ids, lex_order

# what a rank did before arriving at an instance of a kind, by the column of the mapper's table
MIN_TIE_NS = 2_000  # margins below this are ties whatever the residual: launch jitter, the alignment's own accuracy
WORK_BEFORE = {"dispatch": ("attention_ns", "attention"), "combine": ("expert_ns", "expert GEMMs")}
DEFAULT_WORK = ("work_ns", "compute")

INSTANCE_COLS = [
    "step",
    "kind",
    "seq",
    "last_rank",
    "margin_ns",
    "spread_ns",
    "median_wait_ns",
    "transfer_ns",
    "tie",
    "cause_rank",
    "cause",
]
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
    kcode, knames = _kind_codes(coll["kind"])
    step0, seq0 = coll["step"].to_numpy(np.int64), coll["seq"].to_numpy(np.int64)
    rows = lex_order(coll["rank"].to_numpy(np.int64), coll["start_ns"].to_numpy(np.int64), seq0, kcode, step0)
    # an instance seen on one rank says nothing: only the rows of instances of two ranks or more, in that order
    g0 = _runs(step0[rows], kcode[rows], seq0[rows])
    rows = rows[np.bincount(g0)[g0] >= 2]
    del g0
    kcode = kcode[rows]
    step_a, seq_a = step0[rows], seq0[rows]
    gid = _runs(step_a, kcode, seq_a)
    n_g = int(gid.max()) + 1 if len(gid) else 0
    first = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]]) if len(gid) else np.zeros(0, np.int64)
    size = np.diff(np.r_[first, len(gid)])
    last_i = first + size - 1
    s = coll["start_ns"].to_numpy(np.int64)[rows]
    e = coll["end_ns"].to_numpy(np.int64)[rows]
    rk = coll["rank"].to_numpy(np.int64)[rows]
    last = s[last_i]
    second = np.where(size >= 2, s[np.maximum(last_i - 1, 0)], last)
    lowmed = s[first + (size - 1) // 2]
    # a rank waits for the last one only while its kernel runs: one that ended before the last arrived (an eager
    # point-to-point send) waited 0, and its whole kernel is its own transfer — never a negative transfer
    wait = np.where(e < last[gid], 0, np.clip(last[gid] - s, 0, None))
    transfer = e - s - wait
    res_of = {int(k): (v or 0) for k, v in residual.items()}
    known = np.array(sorted(res_of), dtype=np.int64)
    res_known = np.array([res_of[r] for r in sorted(res_of)] + [0], dtype=np.int64)

    def res(i, rk=rk):  # the residual of the rank of rows i (0 for a rank the clocks do not know)
        p = np.searchsorted(known, rk[i])
        hit = p < len(known)
        hit[hit] = known[p[hit]] == rk[i][hit]
        return np.where(hit, res_known[np.where(hit, p, len(known))], 0)

    margin = last - second
    tie_tol = np.maximum(np.maximum(res(last_i), res(np.maximum(last_i - 1, 0))), MIN_TIE_NS)
    tie = (size < 2) | (margin < tie_tol)
    med_wait = group_lower_median(gid, wait, n_g).astype(np.int64) if len(gid) else np.zeros(0, np.int64)
    med_transfer = _runs_lower_median(gid, transfer, n_g)
    if med_transfer is None:
        tr_sorted = transfer[lex_order(transfer, gid)]  # groups stay where they are, each sorted by transfer
        med_transfer = tr_sorted[first + (size - 1) // 2] if len(gid) else np.zeros(0, np.int64)
    inst = coll.iloc[rows[first]][["step", "kind", "seq"]].reset_index(drop=True)
    if isinstance(inst["kind"].dtype, pd.CategoricalDtype):  # the kinds' names as the ranks' tables gave them
        inst["kind"] = pd.Series(knames.take(kcode[first]))
    last_rank = rk[last_i]
    # each row's rank-step: its batch and phase (from the step marker), and the work it did before arriving
    bs, phase_last = _rank_step_lookup(steps, rk, step_a, last_i)
    kind = knames.to_numpy(object)  # a code's name: kind[kcode[i]]
    work = coll["work_ns"].to_numpy(np.int64)[rows]
    for k, (col, _) in WORK_BEFORE.items():
        m = kcode == (knames.get_loc(k) if k in knames else -1)
        work[m] = coll[col].to_numpy(np.int64)[rows[m]]
    med_work = group_lower_median(gid, work, n_g)
    med_bs = group_lower_median(gid, bs, n_g)
    causes = np.full(n_g, None, dtype=object)
    clear = np.flatnonzero(~tie)  # a sentence per clear instance, built column-wise
    li = last_i[clear]
    causes[clear] = _causes(kind, kcode[li], work[li], med_work[clear], bs[li], med_bs[clear], phase_last[clear])
    del gid, bs, work  # 10^6 rows each: gone before the collectives table is built
    per = inst.assign(
        last_rank=pd.array(np.where(tie, 0, last_rank), dtype="Int64"),
        margin_ns=margin,
        spread_ns=last - s[first],
        median_wait_ns=med_wait,
        transfer_ns=med_transfer,
        tie=tie,
        cause_rank=pd.array(np.where(tie, 0, last_rank), dtype="Int64"),
        cause=pd.array(causes, dtype=object),
    )
    per.loc[per["tie"], ["cause_rank", "last_rank"]] = pd.NA
    per = per[INSTANCE_COLS]
    out = lex_order(rk, seq_a, kcode, step_a)  # by instance then rank
    kind_out = (
        pd.Series(knames.take(kcode[out]))
        if isinstance(coll["kind"].dtype, pd.CategoricalDtype)
        else coll["kind"].iloc[rows[out]].reset_index(drop=True)
    )
    wsum = _wait_sums(step_a, rk, wait)
    cols = {
        "step": step_a,
        "seq": seq_a,
        "rank": rk,
        "start_ns": s,
        "end_ns": e,
        "wait_ns": wait,
        "transfer_ns": transfer,
    }
    del step_a, seq_a, rk, s, e, wait, transfer, rows  # held by cols alone: each let go once taken
    colls = _collectives_frame(out, kind_out, cols)
    st = _rank_steps(steps, wsum)
    imb = per[["step", "tie"]].assign(last_rank=np.where(tie, -1, last_rank), imb=last - lowmed)
    return {
        "collectives": colls,
        "per_collective": per.reset_index(drop=True),
        "steps": st,
        "by_step": _by_step(imb, st, per, wsum),
        "imbalance": imb,
    }


def _collectives_frame(out: np.ndarray, kind: pd.Series, cols: dict[str, np.ndarray]) -> pd.DataFrame:
    """COLLECTIVE_COLS, each int64 column taken in ``out``'s order and kept as it is (no consolidation copy: 10^6
    rows of a 16-rank run); each array of ``cols`` is dropped from it once taken, so that it is freed there where
    ``cols`` held the last reference — the table never stands twice."""
    names = [c for c in COLLECTIVE_COLS if c != "kind"]
    taken = {}
    for c in names:
        taken[c] = cols.pop(c)[out]
    df = pd.DataFrame(taken, columns=names, copy=False)
    df.insert(COLLECTIVE_COLS.index("kind"), "kind", kind)
    return df


def _wait_sums(step: np.ndarray, rank: np.ndarray, wait: np.ndarray) -> pd.Series:
    """Σ wait_ns per (step, rank), indexed by them sorted (what ``groupby(["step", "rank"]).sum()`` gives)."""
    if not len(step):
        return pd.Series(
            np.zeros(0, np.int64),
            name="wait_ns",
            index=pd.MultiIndex.from_arrays([np.zeros(0, np.int64)] * 2, names=["step", "rank"]),
        )
    r0, s0 = int(rank.min()), int(step.min())
    span = int(rank.max()) - r0 + 1
    key = (step - s0) * span + (rank - r0)
    ids = dense_ids(key)
    n = int(ids.max()) + 1
    first = np.full(n, -1, dtype=np.int64)
    first[ids] = np.arange(len(ids))  # a row of each (step, rank): any one gives its step and rank
    sums = np.zeros(n, dtype=np.int64)
    np.add.at(sums, ids, wait)
    return pd.Series(
        sums, name="wait_ns", index=pd.MultiIndex.from_arrays([step[first], rank[first]], names=["step", "rank"])
    )


def _kind_codes(kind: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Each row's kind as a small code into the kinds' names, sorted (code order is name order), and the names: a
    categorical's own codes (the aligner's), else factorised."""
    if isinstance(kind.dtype, pd.CategoricalDtype) and kind.cat.categories.is_monotonic_increasing:
        return kind.cat.codes.to_numpy().astype(np.int16), kind.cat.categories
    codes, names = pd.factorize(kind, sort=True)
    return codes.astype(np.int16), names


def _runs(*keys: np.ndarray) -> np.ndarray:
    """The run number of each row of sorted keys: a new run wherever any key changes."""
    if not len(keys[0]):
        return np.zeros(0, np.int64)
    new = np.zeros(len(keys[0]), bool)
    new[0] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    return np.cumsum(new) - 1


def _rank_step_lookup(steps: pd.DataFrame, rank: np.ndarray, step: np.ndarray, at: np.ndarray):
    """(bs per row as float, NaN where unknown; the phase of the rows ``at``, None where unknown) of the rank-steps
    ``(rank, step)``: one integer key per rank-step, looked up by binary search (no merge of the whole table)."""
    sk = steps[["rank", "step", "bs", "phase"]].drop_duplicates(["rank", "step"])
    span = int(max(int(sk["step"].max()) if len(sk) else 0, int(step.max()) if len(step) else 0)) + 2
    keys = sk["rank"].to_numpy(np.int64) * span + (sk["step"].to_numpy(np.int64) + 1)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    want = rank.astype(np.int64) * span + (step.astype(np.int64) + 1)
    pos, hit = _find_keys(keys, want)
    sbs = pd.to_numeric(sk["bs"], errors="coerce").to_numpy(np.float64)[order] if len(sk) else np.zeros(0)
    bs = np.where(hit, sbs[pos] if len(sbs) else np.nan, np.nan)
    sphase = sk["phase"].to_numpy(object)[order] if len(sk) else np.zeros(0, object)
    phase = np.full(len(at), None, dtype=object)
    if len(sphase) and len(at):
        ok = hit[at]
        phase[ok] = sphase[pos[at][ok]]
    return bs, phase


def _find_keys(keys: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each wanted key is in ``keys`` (sorted, distinct) and whether it is there: a table over the keys' range
    where that range is small (rank × step keys), else a binary search."""
    if len(keys) and int(keys[-1]) - int(keys[0]) <= 4 * len(want) + 1024:
        lo = int(keys[0])
        at = np.full(int(keys[-1]) - lo + 2, -1, dtype=np.int64)  # the last slot: a key outside the range
        at[keys[::-1] - lo] = np.arange(len(keys) - 1, -1, -1)  # a repeated key: its first place, as searched
        rel = want - lo
        found = at[np.where((rel >= 0) & (rel < len(at) - 1), rel, len(at) - 1)]
        hit = found >= 0
        return np.where(hit, found, 0), hit
    pos = np.clip(np.searchsorted(keys, want), 0, max(len(keys) - 1, 0))
    return pos, ((keys[pos] == want) if len(keys) else np.zeros(len(want), bool))


def _rank_steps(steps: pd.DataFrame, wsum: pd.Series) -> pd.DataFrame:
    """Per rank-step recorded whole (a partial one — the profile started or stopped inside it — has no row): its
    wall time and the time it waited (``wsum``, per step and rank)."""
    st = steps[(steps["step"] >= 0) & ~steps.get("partial", pd.Series(False, index=steps.index)).astype(bool)].copy()
    st = st.sort_values(["rank", "start_ns"], kind="stable")
    st["local_step"] = st.groupby("rank").cumcount().astype(np.int64)
    st = st.sort_values(["step", "rank"], kind="stable")
    st["wall_ns"] = (st["end_ns"] - st["start_ns"]).astype(np.int64)
    st["wait_ns"] = wsum.reindex(pd.MultiIndex.from_frame(st[["step", "rank"]])).fillna(0).to_numpy(np.int64)
    return st[STEP_COLS].reset_index(drop=True)


def _by_step(imb: pd.DataFrame, st: pd.DataFrame, per: pd.DataFrame, wsum: pd.Series) -> pd.DataFrame:
    """Per step, vectorised over steps: the imbalance, the straggler with its batch against the median rank's, and
    the rank that waited most."""
    g_all = np.array(sorted(set(st["step"].tolist()) | set(per["step"].tolist())), dtype=np.int64)
    by_step = pd.DataFrame({"step": g_all})
    by_step["imbalance_ns"] = imb.groupby("step")["imb"].sum().reindex(g_all).fillna(0).to_numpy(np.int64)
    strag = _most_often_last_by(imb[~imb["tie"]], "step")
    by_step["straggler"] = pd.array(strag.reindex(g_all).to_numpy(), dtype="Int64")
    bs_of = dict(zip(zip(st["rank"].astype(np.int64), st["step"].astype(np.int64)), st["bs"]))  # recorded whole
    by_step["straggler_bs"] = pd.array(
        [bs_of.get((int(r), int(g))) if pd.notna(r) else None for r, g in zip(by_step["straggler"], g_all)],
        dtype="Int64",
    )
    known = st[st["bs"].notna()]
    mb = group_lower_median(
        np.searchsorted(g_all, known["step"].to_numpy(np.int64)), known["bs"].to_numpy(np.float64), len(g_all)
    )
    by_step["median_bs"] = pd.array([None if np.isnan(x) else int(x) for x in mb], dtype="Int64")
    w = wsum.reset_index().sort_values(["step", "wait_ns", "rank"], ascending=[True, False, True], kind="stable")
    mw = w.drop_duplicates("step").set_index("step")["rank"]
    by_step["max_wait_rank"] = pd.array(mw.reindex(g_all).to_numpy(), dtype="Int64")
    return by_step[BY_STEP_COLS]


def group_lower_median(gid: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group (0 ≤ gid < n_groups) the lower median of its values that are not NaN; NaN for a group with none.
    One sort for all groups."""
    v = np.asarray(values, dtype=np.float64)
    g = np.asarray(gid)
    ok = ~np.isnan(v)
    if not ok.all():
        g, v = g[ok], v[ok]
    fast = _runs_lower_median(g, v, n_groups)
    if fast is not None:
        return fast
    order = lex_order(v, g)  # by group, then value: each group's values in order, read through ``order``
    count = np.bincount(g, minlength=n_groups)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    out = np.full(n_groups, np.nan)
    has = count > 0
    out[has] = v[order[start[has] + (count[has] - 1) // 2]]
    return out


def _runs_lower_median(gid: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray | None:
    """Per group the lower median of its values, where the rows are the groups one after another, each of the same
    size (every rank ran every instance): one partition per row of a groups × size matrix, no sort of all rows.
    None where the groups are not like that."""
    n = len(gid)
    m = n // n_groups if n_groups else 0
    if not m or m * n_groups != n or not (gid.reshape(n_groups, m) == np.arange(n_groups)[:, None]).all():
        return None
    k = (m - 1) // 2
    return np.partition(values.reshape(n_groups, m), k, axis=1)[:, k]


def _most_often_last_by(p: pd.DataFrame, by: str) -> pd.Series:
    """Per ``by`` value the rank last most often (rule of :func:`most_often_last`)."""
    if p.empty:
        return pd.Series(dtype="Int64")
    agg = p.groupby([by, "last_rank"])["imb"].agg(["size", "sum"]).reset_index()
    agg = agg.sort_values([by, "size", "sum", "last_rank"], ascending=[True, False, False, True], kind="stable")
    return agg.drop_duplicates(by).set_index(by)["last_rank"].astype(np.int64)


def most_often_last(per: pd.DataFrame) -> int | None:
    """The rank last most often among the instances that are no tie; among equals the one whose lateness cost more
    (Σ last − median arrival, column ``imb``), then the lowest rank."""
    p = per[~per["tie"]]
    if p.empty:
        return None
    agg = p.groupby("last_rank")["imb"].agg(["size", "sum"]).reset_index()
    agg = agg.sort_values(["size", "sum", "last_rank"], ascending=[False, False, True], kind="stable")
    return int(agg["last_rank"].iloc[0])


def _causes(
    names,
    kcode: np.ndarray,
    mine: np.ndarray,
    med: np.ndarray,
    my_bs: np.ndarray,
    med_bs: np.ndarray,
    phase: np.ndarray,
) -> np.ndarray:
    """Why the last rank arrived last at each instance, as ``code: detail`` (an object array, one per instance:
    ``names[kcode]`` its kind, ``mine``/``med`` the last rank's and the median rank's work before arriving, its
    batch and the median's, NaN where unknown, its phase): ``prefill`` (it ran a prefill while others decoded),
    ``batch`` (a larger batch than the median rank's), ``hot_expert`` (more expert GEMM work before a combine than
    the median rank), else ``compute`` (more work before arriving). Column by column: each distinct number is
    formatted once and the sentences are joined as object arrays (the loop per instance is numpy's)."""
    names = [str(k) for k in names]
    kc = np.asarray(kcode, dtype=np.int64)
    if not kc.size:
        return np.zeros(0, dtype=object)
    mine = np.asarray(mine, dtype=np.int64)
    med = np.asarray(med, dtype=np.float64)
    my_bs, med_bs = np.asarray(my_bs, dtype=np.float64), np.asarray(med_bs, dtype=np.float64)
    code_of = {k: i for i, k in enumerate(names)}
    combine = kc == code_of.get("combine", -1)
    dispatch = kc == code_of.get("dispatch", -1)
    has_bs = ~(np.isnan(my_bs) | np.isnan(med_bs))
    prefill = np.asarray(phase, dtype=object) == "prefill"
    code = np.select(
        [combine & (mine > med), combine, dispatch & prefill, has_bs & (my_bs > med_bs)],
        [np.array(c, dtype=object) for c in ("hot_expert: ", "compute: ", "prefill: ", "batch: ")],
        np.array("compute: ", dtype=object),
    )
    what = np.array([WORK_BEFORE.get(k, DEFAULT_WORK)[1] + " " for k in names], dtype=object)[kc]
    us = _texts(np.concatenate([mine, med.astype(np.int64)]), _us)
    b = _texts(np.concatenate([np.where(has_bs, my_bs, 0), np.where(has_bs, med_bs, 0)]).astype(np.int64), str)
    n = kc.size
    bs_part = np.where(has_bs, "bs " + b[:n] + " vs median " + b[n:] + "; ", "")
    return code + bs_part + what + us[:n] + " vs median " + us[n:] + " before arriving"


def _texts(values: np.ndarray, fmt) -> np.ndarray:
    """``fmt(v)`` of each int64 value (as a Python int), as an object array: each distinct value formatted once."""
    u, inv = np.unique(values, return_inverse=True)
    return np.array([fmt(v) for v in u.tolist()], dtype=object)[inv.reshape(-1)]
