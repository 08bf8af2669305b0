"""Who waits for whom: arrivals, waits and stragglers of matched collective instances (docs/multirank.md).

Arrival = the kernel's start on the reference clock; wait = last arrival − own arrival; transfer = own end − last
arrival; an instance's margin = last − second-last arrival, a tie when within the alignment residual of the two
ranks (a tie names no straggler). An instance's median rank is its lower-median arrival (:mod:`.medians`, the one
convention): its wait is ``median_wait_ns`` (= last − median arrival at a collective). Per step: imbalance = Σ over
its instances of (last − median arrival); the straggler = the rank most often last. Why the last rank was late (:func:`shares`): its lateness
against the median-arriving rank, split in four shares that add up to it — its segment (since its previous
collective's end, or its step's start) began late, its own work took longer, its GPU idled longer before arriving,
its expert GEMMs took longer; the largest share is the cause (:data:`CAUSE_CODES`). Medians of ns are lower
medians, so every ``*_ns`` is an integer.

An instance that began on some rank while that rank's clock stepped, on a side of the step its times cannot say
(``clock_uncertain``, from the alignment: a step smaller than the gap between the two ends it fell between), has
no known arrival order: its rows' waits and transfers, its margin, spread, median wait, last rank and cause are
null, and it is left out of every sum and claim — each rank-step's and rank's wait, the step's imbalance, the
stragglers. Waits are never computed across a clock step unrepaired.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .medians import group_lower_median, median_rows, runs_lower_median
from .numbering import dense_ids, lex_order

MIN_TIE_NS = 2_000  # margins below this are ties whatever the residual: launch jitter, the alignment's own accuracy
# a share of the lateness must exceed this to be named a cause: below it, the evidence is the launch jitter's
MIN_SHARE_NS = 2_000
# the codes of per_collective.cause (its first word; tracekit/data/findings.json has the advice of each)
CAUSE_CODES = ("communication", "host", "prefill", "batch", "compute", "hot_expert", "unknown")
SHARE_COLS = ("started_late_ns", "own_work_ns", "idle_ns", "expert_ns")

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
    *SHARE_COLS,
]
COLLECTIVE_COLS = ["step", "kind", "seq", "rank", "start_ns", "end_ns", "wait_ns", "transfer_ns"]
STEP_COLS = ["step", "rank", "local_step", "phase", "bs", "start_ns", "wall_ns", "wait_ns"]
BY_STEP_COLS = ["step", "imbalance_ns", "straggler", "straggler_bs", "median_bs", "max_wait_rank"]


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
    unc_col = coll["clock_uncertain"].to_numpy(bool) if "clock_uncertain" in coll else None
    kcode = kcode[rows]
    step_a, seq_a = step0[rows], seq0[rows]
    gid = _runs(step_a, kcode, seq_a)
    n_g = int(gid.max()) + 1 if len(gid) else 0
    first = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]]) if len(gid) else np.zeros(0, np.int64)
    size = np.diff(np.r_[first, len(gid)])
    last_i = first + size - 1
    # an instance begun on a rank while its clock stepped, on a side unknown: its arrivals' order is not known
    unc = np.bincount(gid, weights=unc_col[rows], minlength=n_g) > 0 if unc_col is not None else np.zeros(n_g, bool)
    del unc_col
    s = coll["start_ns"].to_numpy(np.int64)[rows]
    e = coll["end_ns"].to_numpy(np.int64)[rows]
    rk = coll["rank"].to_numpy(np.int64)[rows]
    last = s[last_i]
    second = np.where(size >= 2, s[np.maximum(last_i - 1, 0)], last)
    med_i = median_rows(first, size)  # each instance's median rank (medians.py: the one median of arrivals/waits)
    lowmed = s[med_i]
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
    med_wait = wait[med_i]  # the median rank's wait: last − median arrival at a collective
    med_transfer = runs_lower_median(gid, transfer, n_g)
    if med_transfer is None:
        tr_sorted = transfer[lex_order(transfer, gid)]  # groups stay where they are, each sorted by transfer
        # the lower median of transfers: the median position again, in transfer order
        med_transfer = tr_sorted[med_i] if len(gid) else np.zeros(0, np.int64)
    inst = coll.iloc[rows[first]][["step", "kind", "seq"]].reset_index(drop=True)
    if isinstance(inst["kind"].dtype, pd.CategoricalDtype):  # the kinds' names as the ranks' tables gave them
        inst["kind"] = pd.Series(knames.take(kcode[first]))
    last_rank = rk[last_i]
    # each row's rank-step: its batch and phase (from the step marker); the median rank's row of each instance
    bs, phase_last = _rank_step_lookup(steps, rk, step_a, last_i)
    med_bs = group_lower_median(gid, bs, n_g)
    causes = np.full(n_g, None, dtype=object)
    share = np.full((len(SHARE_COLS), n_g), np.nan)
    clear = np.flatnonzero(~tie & ~unc)  # a sentence per clear instance, built column-wise
    li, mi = last_i[clear], med_i[clear]
    seg, seg_known, after = segment_starts(coll, steps)
    last_v, med_v = (_row_values(coll, (seg, seg_known), rows[i]) for i in (li, mi))
    share[:, clear] = shares(last_v, med_v, experts=bool(coll["expert_ns"].to_numpy().any()))
    causes[clear] = _causes(share[:, clear], after[rows[li]], last_v, med_v, bs[li], med_bs[clear], phase_last[clear])
    row_unc = unc[gid]
    del gid, bs, seg, seg_known, after  # 10^6 rows each: gone before the collectives table is built
    per = inst.assign(
        last_rank=pd.array(np.where(tie, 0, last_rank), dtype="Int64"),
        margin_ns=margin,
        spread_ns=last - s[first],
        median_wait_ns=med_wait,
        transfer_ns=med_transfer,
        tie=tie,
        cause_rank=pd.array(np.where(tie, 0, last_rank), dtype="Int64"),
        cause=pd.array(causes, dtype=object),
        **{c: _nullable_ns(v) for c, v in zip(SHARE_COLS, share)},
    )
    per.loc[per["tie"], ["cause_rank", "last_rank"]] = pd.NA
    per = per[INSTANCE_COLS]
    if unc.any():  # no claim from an instance whose arrivals' order a clock step left unknown
        per = _unknown_instances(per, unc)
    out = lex_order(rk, seq_a, kcode, step_a)  # by instance then rank
    kind_out = (
        pd.Series(knames.take(kcode[out]))
        if isinstance(coll["kind"].dtype, pd.CategoricalDtype)
        else coll["kind"].iloc[rows[out]].reset_index(drop=True)
    )
    wsum = _wait_sums(step_a, rk, np.where(row_unc, 0, wait))  # the known waits only
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
    row_unc = row_unc[out]
    if row_unc.any():  # unknown, not 0: null
        for c in ("wait_ns", "transfer_ns"):
            colls[c] = _nullable_ns(np.where(row_unc, np.nan, colls[c].to_numpy(np.float64)))
    colls["clock_uncertain"] = row_unc
    per["clock_uncertain"] = unc
    st = _rank_steps(steps, wsum)
    imb = per[["step", "tie"]].assign(last_rank=np.where(tie, -1, last_rank), imb=last - lowmed)[~unc]
    by_step = _by_step(imb, st, per, wsum)
    by_step["clock_uncertain"] = by_step["step"].isin(per.loc[unc, "step"]).to_numpy(bool)
    return {
        "collectives": colls,
        "per_collective": per.reset_index(drop=True),
        "steps": st,
        "by_step": by_step,
        "imbalance": imb,
    }


def _unknown_instances(per: pd.DataFrame, unc: np.ndarray) -> pd.DataFrame:
    """``per`` with the instances ``unc`` (their arrivals' order unknown: a clock step) making no claim: margin,
    spread, median wait and median transfer, last rank, cause and shares null (unknown, never 0), no tie."""
    per = per.copy()
    for c in ("margin_ns", "spread_ns", "median_wait_ns", "transfer_ns"):
        per[c] = _nullable_ns(np.where(unc, np.nan, per[c].to_numpy(np.float64)))
    per.loc[unc, ["last_rank", "cause_rank", *SHARE_COLS]] = pd.NA
    per.loc[unc, "cause"] = None
    per.loc[unc, "tie"] = False
    return per


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
    ``(rank, step)``."""
    pos, hit = _rank_step_rows(steps, rank, step)
    sbs = pd.to_numeric(steps["bs"], errors="coerce").to_numpy(np.float64) if len(steps) else np.zeros(0)
    bs = np.where(hit, sbs[pos] if len(sbs) else np.nan, np.nan)
    sphase = steps["phase"].to_numpy(object) if len(steps) else np.zeros(0, object)
    phase = np.full(len(at), None, dtype=object)
    if len(sphase) and len(at):
        ok = hit[at]
        phase[ok] = sphase[pos[at][ok]]
    return bs, phase


def _rank_step_rows(steps: pd.DataFrame, rank: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row of ``steps`` of each rank-step ``(rank, step)`` (its first) and whether there is one: one integer key
    per rank-step, looked up by binary search (no merge of the whole table)."""
    sr, ss = steps["rank"].to_numpy(np.int64), steps["step"].to_numpy(np.int64)
    span = int(max(int(ss.max()) if len(ss) else 0, int(step.max()) if len(step) else 0)) + 2
    keys = sr * span + (ss + 1)
    order = np.argsort(keys, kind="stable")
    pos, hit = _find_keys(keys[order], rank.astype(np.int64) * span + (step.astype(np.int64) + 1))
    return (order[pos] if len(order) else pos), hit


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


def segment_starts(coll: pd.DataFrame, steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``coll`` (one rank's collective instance, reference clock): where the rank's segment before it
    began (int64 ns) — its previous collective's end in the same step, else its step's start —, whether that is
    known (not where the step is unknown) and whether it began at a previous collective. The mapper's window of ``work_ns`` (tracekit/analyses/fleet/
    multirank/mapper.py ``collective_table``) on the reference clock."""
    rk, st = coll["rank"].to_numpy(np.int64), coll["step"].to_numpy(np.int64)
    s, e = coll["start_ns"].to_numpy(np.int64), coll["end_ns"].to_numpy(np.int64)
    n = len(s)
    seg, known, after = np.zeros(n, np.int64), np.zeros(n, bool), np.zeros(n, bool)
    if not n:
        return seg, known, after
    o = lex_order(s, rk)  # by rank, then start
    ro, so = rk[o], st[o]
    ends_so_far = pd.Series(e[o]).groupby(ro, sort=False).cummax().to_numpy(np.int64)
    same = np.zeros(n, bool)
    same[1:] = (ro[1:] == ro[:-1]) & (so[1:] == so[:-1])
    prev = np.r_[np.int64(0), ends_so_far[:-1]]
    pos, hit = _rank_step_rows(steps, ro, so)
    step_start = steps["start_ns"].to_numpy(np.int64)[pos] if len(steps) else np.zeros(n, np.int64)
    seg[o] = np.where(same, np.minimum(prev, s[o]), step_start)
    known[o] = same | (hit & (so >= 0))
    after[o] = same
    return seg, known, after


def _row_values(coll: pd.DataFrame, seg: tuple[np.ndarray, np.ndarray], at: np.ndarray) -> dict[str, np.ndarray]:
    """The rows ``at`` of ``coll``: their segment's start (int64 ns, beside ``known``), own work (not expert GEMMs),
    attention, expert GEMMs and GPU idle time before arriving (float ns of durations; idle NaN where the segment is
    unknown). Instants stay int64: ns since the epoch do not fit a float's 53 bits."""
    s = coll["start_ns"].to_numpy(np.int64)[at]
    work = coll["work_ns"].to_numpy(np.int64)[at]
    expert = coll["expert_ns"].to_numpy(np.int64)[at]
    seg_at, known = seg[0][at], seg[1][at]
    return {
        "seg": seg_at,
        "known": known,
        "own": (work - expert).astype(np.float64),
        "attention": coll["attention_ns"].to_numpy(np.float64)[at],
        "expert": expert.astype(np.float64),
        "idle": np.where(known, (s - seg_at) - work, np.nan),
    }


def shares(last: dict[str, np.ndarray], med: dict[str, np.ndarray], *, experts: bool = True) -> np.ndarray:
    """The four shares of the last rank's lateness against the median rank's (rows of SHARE_COLS): its segment
    began later, its own work took longer, its GPU idled longer, its expert GEMMs took longer. They add up to the
    difference of their arrivals (segment start + own work + expert GEMMs + idle = arrival); NaN where unknown.
    ``experts`` False (no rank of the run ran an expert GEMM: a dense model, DLRM) makes the expert share NaN, a
    share that cannot exist, not 0; the other three still add up to the difference (its expert time is 0)."""
    late = np.where(last["known"] & med["known"], (last["seg"] - med["seg"]).astype(np.float64), np.nan)
    expert = last["expert"] - med["expert"] if experts else np.full(len(late), np.nan)
    return np.stack([late, last["own"] - med["own"], last["idle"] - med["idle"], expert])


def _nullable_ns(v: np.ndarray):
    """Float ns, NaN where unknown → an Int64 column, NA there."""
    nan = np.isnan(v)
    out = pd.array(np.where(nan, 0, v).astype(np.int64), dtype="Int64")
    out[nan] = pd.NA
    return out


def _causes(
    share: np.ndarray,
    after: np.ndarray,
    last: dict[str, np.ndarray],
    med: dict[str, np.ndarray],
    my_bs: np.ndarray,
    med_bs: np.ndarray,
    phase: np.ndarray,
) -> np.ndarray:
    """Why the last rank arrived last at each instance, as ``code: detail`` (an object array, one per instance):
    the largest of its ``share``s (:func:`shares`) when above MIN_SHARE_NS, with that share as the evidence —
    ``communication`` (its segment began at its previous collective's end, later than the median rank's: that
    collective's transfer ended late on this rank), ``host`` (its step began later with the same batch, or its GPU
    idled longer before arriving: the host launched late), ``prefill``/``batch``/``compute`` (its own work took
    longer, or its step began later, because it ran a prefill or a larger batch than the median rank's; else the
    same batch computed slower), ``hot_expert`` (its expert GEMMs took longer); else ``unknown`` with the four
    shares. Column by column: each distinct number is formatted once and the
    sentences are joined as object arrays (the loop per instance is numpy's)."""
    n = share.shape[1]
    if not n:
        return np.zeros(0, dtype=object)
    my_bs, med_bs = np.asarray(my_bs, dtype=np.float64), np.asarray(med_bs, dtype=np.float64)
    has_bs = ~(np.isnan(my_bs) | np.isnan(med_bs))
    filled = np.where(np.isnan(share), -np.inf, share)
    best, top = filled.argmax(axis=0), filled.max(axis=0)
    named = top > MIN_SHARE_NS
    late, own, idle, expert = (named & (best == i) for i in range(4))
    prefill = np.asarray(phase, dtype=object) == "prefill"
    bigger = has_bs & (my_bs > med_bs)
    # a step that began late on a rank of a prefill or a larger batch: the host prepared more (the scheduler's work
    # scales with the batch), so its batch is the cause; a step that began late with the same batch: the host
    step_late = late & ~after
    code = np.select(
        [late & after, step_late & prefill, step_late & bigger, late, own & prefill, own & bigger, own, idle, expert],
        [
            np.array(c, dtype=object)
            for c in ("communication", "prefill", "batch", "host", "prefill", "batch", "compute", "host", "hot_expert")
        ],
        np.array("unknown", dtype=object),
    )
    us = _us_texts
    vs = " vs median "
    # own work: attention when it is at least half the difference, else all the rank's own work
    attn = 2 * (last["attention"] - med["attention"]) >= share[1]
    own_what = np.where(attn, "attention ", "compute ")
    own_l, own_m = np.where(attn, last["attention"], last["own"]), np.where(attn, med["attention"], med["own"])
    b = _texts(np.concatenate([np.where(has_bs, my_bs, 0), np.where(has_bs, med_bs, 0)]).astype(np.int64), str)
    bs_part = np.where(has_bs, "bs " + b[:n] + vs + b[n:] + "; ", "")
    before = " before arriving"
    sh = [us(v) for v in share]
    detail = np.select(
        [late & after, late, own, idle, expert],
        [
            "its previous collective ended " + sh[0] + " after the median rank's",
            np.where(step_late & (prefill | bigger), bs_part, "")
            + "its step began "
            + sh[0]
            + " after the median rank's",
            bs_part + own_what + us(own_l) + vs + us(own_m) + before,
            "GPU idle " + us(last["idle"]) + vs + us(med["idle"]) + before,
            "expert GEMMs " + us(last["expert"]) + vs + us(med["expert"]) + before,
        ],
        f"no share above {_us(MIN_SHARE_NS)} against the median rank: late start "
        + sh[0]
        + ", own work "
        + sh[1]
        + ", GPU idle "
        + sh[2]
        + ", expert GEMMs "
        + sh[3],
    )
    return code + ": " + detail


def _us_texts(values: np.ndarray) -> np.ndarray:
    """:func:`_us` of each value (ns, float), "–" where NaN: each distinct value formatted once."""
    v = np.asarray(values, dtype=np.float64)
    nan = np.isnan(v)
    out = _texts(np.where(nan, 0, v).astype(np.int64), _us)
    out[nan] = "–"
    return out


def _texts(values: np.ndarray, fmt) -> np.ndarray:
    """``fmt(v)`` of each int64 value (as a Python int), as an object array: each distinct value formatted once."""
    u, inv = np.unique(values, return_inverse=True)
    return np.array([fmt(v) for v in u.tolist()], dtype=object)[inv.reshape(-1)]
