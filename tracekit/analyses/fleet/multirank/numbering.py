"""Instances of a run's collectives: each rank's collectives numbered within their global step (``seq``: the k-th of
its kind), the partial rank-steps placed by shift and by time, and the matched ones as one table (docs/multirank.md).

Kinds travel as small integer codes into the kinds' names sorted (so code order is name order) and rows as numpy
columns: a 16-rank run holds 10^6 collectives, and every group key is one int64 (no string per row, no copy of the
whole table per step). The names are written back only in :func:`collectives_table`'s ``kind`` (a categorical).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .... import intervals as iv

# the mapper's columns carried on into the matched table, besides the keys
WORK_COLS = ("work_ns", "attention_ns", "expert_ns")


def kind_names(per_rank: dict[int, dict]) -> pd.Index:
    """The collective kinds of the run, sorted, in the dtype of the ranks' ``kind`` column (what the tables give)."""
    cols = [d["collectives"]["kind"] for d in per_rank.values()]
    names = sorted({str(k) for c in cols for k in pd.unique(c)})
    same = (
        bool(cols)
        and not isinstance(cols[0].dtype, pd.CategoricalDtype)
        and all(c.dtype == cols[0].dtype for c in cols)
    )
    # as the ranks' columns concatenated (the columns' own dtype where they share one)
    dtype = cols[0].dtype if same else pd.concat([c.iloc[:0] for c in cols]).dtype if cols else object
    return pd.Index(names, dtype=dtype)


def kind_codes(kind: pd.Series, knames: pd.Index) -> np.ndarray:
    """``knames.get_indexer(kind)`` (−1: a missing kind or one not in ``knames``), by factorising the column first:
    the few distinct names are looked up, not every row's text."""
    codes, uniques = pd.factorize(kind)
    look = np.append(knames.get_indexer(uniques), -1)  # code −1 (missing) reads the last slot
    return look[codes]


def lex_order(*keys: np.ndarray) -> np.ndarray:
    """``np.lexsort(keys)`` (the last key primary, stable), as one stable sort of the keys packed into an int64
    where their ranges allow (5× faster on 10^6 rows); integral float keys count as integers."""
    n = len(keys[0]) if keys else 0
    if n < 2:
        return np.arange(n, dtype=np.intp)
    packed, span = np.zeros(n, np.int64), 1
    for k in keys:  # the first key varies fastest
        k = np.asarray(k)
        if k.dtype.kind == "f":
            if not (np.isfinite(k).all() and (k == np.floor(k)).all() and np.abs(k).max() < 2.0**53):
                return np.lexsort(keys)
            k = k.astype(np.int64)
        elif k.dtype.kind not in "iub":
            return np.lexsort(keys)
        lo, hi = int(k.min()), int(k.max())
        width = hi - lo + 1
        if span * width >= 2**62:
            return np.lexsort(keys)
        t = k.astype(np.int64)  # one temporary per key, shifted and scaled in place
        t -= lo
        t *= span
        packed += t
        del t
        span *= width
    return np.argsort(packed, kind="stable")


def dense_ids(key: np.ndarray) -> np.ndarray:
    """Each row's place among the distinct values of ``key`` (int64 ≥ 0), sorted: ``np.unique``'s inverse, without
    a sort where the values are few and small."""
    if not len(key):
        return np.zeros(0, np.int64)
    top = int(key.max())
    if int(key.min()) < 0 or top > 4 * len(key) + 1024:
        return np.unique(key, return_inverse=True)[1].astype(np.int64).reshape(-1)
    present = np.zeros(top + 1, dtype=bool)
    present[key] = True
    return (np.cumsum(present) - 1)[key]


def _group_of(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by an int64 key: (a stable order by key, each sorted row's group, each group's first place in
    that order, each group's size). Keys within 16 bits (a run's rank × step × kind) are sorted as such: numpy's
    radix sort, the same stable order."""
    small = len(key) and int(key.min()) >= 0 and int(key.max()) < 1 << 16
    order = np.argsort(key.astype(np.uint16) if small else key, kind="stable")
    ks = key[order]
    brk = np.r_[True, ks[1:] != ks[:-1]] if len(ks) else np.zeros(0, bool)
    first = np.flatnonzero(brk)
    return order, np.cumsum(brk) - 1, first, np.diff(np.r_[first, len(ks)])


def numbered_collectives(per_rank: dict[int, dict], g_of: dict[int, np.ndarray], knames: pd.Index) -> pd.DataFrame:
    """Every rank's collectives (by rank, then start) with their global ``step``, ``kind`` (its code into
    ``knames``) and ``seq`` (the k-th of its kind in the step), and whether the rank ran the count of that kind most
    ranks ran in the step (``full``). Columns: rank, step, kind, seq, start_ns, end_ns, the work columns, full."""
    names = ("rank", "step", "kind", "start_ns", "end_ns", *WORK_COLS, "seq")
    sizes = [len(d["collectives"]) for d in per_rank.values()]
    n = int(sum(sizes))
    M = np.empty((len(names), n), dtype=np.int64)  # one block: the frame below takes it without a copy
    a = dict(zip(names, M))
    at = np.cumsum([0] + sizes)
    for (r, d), lo, hi in zip(per_rank.items(), at[:-1], at[1:]):
        c = d["collectives"]
        gmap = g_of[r]
        ls = c["local_step"].to_numpy(np.int64)
        a["step"][lo:hi] = np.where(ls >= 0, gmap[np.clip(ls, 0, max(len(gmap) - 1, 0))] if len(gmap) else -1, -1)
        a["rank"][lo:hi] = r
        a["kind"][lo:hi] = kind_codes(c["kind"], knames)
        for k in ("start_ns", "end_ns", *WORK_COLS):
            a[k][lo:hi] = c[k].to_numpy(np.int64)
    rk, st = a["rank"], a["start_ns"]
    if n > 1 and not np.all((rk[1:] > rk[:-1]) | ((rk[1:] == rk[:-1]) & (st[1:] >= st[:-1]))):
        order = np.lexsort((st, rk))  # by rank, then start (stable: as the ranks' tables give them)
        for row in M[:-1]:
            row[:] = row[order]
    rid = dense_ids(a["rank"] - (int(a["rank"].min()) if n else 0))
    span_s, span_k = int(a["step"].max()) + 2 if n else 1, len(knames) + 1
    key = (rid * span_s + (a["step"] + 1)) * span_k + a["kind"]  # (rank, step, kind)
    gorder, gid, first, size = _group_of(key)
    a["seq"][gorder] = np.arange(n) - first[gid]
    # the count of a kind most ranks ran in a step (equal support: the larger count), over the (rank, step, kind)
    g_row = gorder[first]
    del key
    g_step, g_kind = a["step"][g_row], a["kind"][g_row]
    counted = pd.DataFrame({"step": g_step, "kind": g_kind, "n": size})
    votes = counted.groupby(["step", "kind", "n"]).size().reset_index(name="votes")
    votes = votes.sort_values(["step", "kind", "votes", "n"], ascending=[True, True, False, False], kind="stable")
    modal = votes.drop_duplicates(["step", "kind"])
    mkey = modal["step"].to_numpy(np.int64) * span_k + modal["kind"].to_numpy(np.int64)
    mo = np.argsort(mkey)
    pos = np.searchsorted(mkey[mo], g_step * span_k + g_kind)  # every group's (step, kind) has its count
    modal_n = modal["n"].to_numpy(np.int64)[mo][np.clip(pos, 0, max(len(mo) - 1, 0))] if n else size
    full = np.empty(n, dtype=bool)  # a row is full where its group (its rank's run of that kind) is
    full[gorder] = ((g_step >= 0) & (size == modal_n))[gid]
    del gorder, gid
    coll = pd.DataFrame(M.T, columns=list(names), copy=False)
    coll["full"] = full
    return coll


def match_by_shift(coll: pd.DataFrame, ref: int) -> np.ndarray:
    """Partial rank-steps (fewer collectives of a kind than the other ranks ran: the profile started or stopped
    inside the step) matched without any clock: their kernels are a contiguous run of the step's instances, and the
    right place is where their ends minus a whole rank's ends are constant (the ends coincide up to the clock
    offset). Sets ``seq`` of the rows it places; returns which rows it placed. A place no clearly better than the
    next (layers all alike) is left to the time match after alignment."""
    placed = np.zeros(len(coll), dtype=bool)
    full_m = coll["full"].to_numpy(bool)
    part_m = ~full_m & (coll["step"].to_numpy() >= 0)
    if not part_m.any():
        return placed
    part = coll[part_m]
    n_kinds = int(coll["kind"].max()) + 1  # kinds are integer codes from 0: one int64 key per (step, kind)
    full = coll.loc[full_m, ["step", "kind", "rank", "seq", "end_ns"]]

    def step_kind(d: pd.DataFrame) -> np.ndarray:
        return d["step"].to_numpy(np.int64) * n_kinds + d["kind"].to_numpy(np.int64)

    full = full[np.isin(step_kind(full), np.unique(step_kind(part)))]  # only the (step, kind)s a partial rank ran
    seq = coll["seq"].to_numpy().copy()
    templates = {}
    for (g, k), grp in full.groupby(["step", "kind"], sort=False):
        r = ref if (grp["rank"] == ref).any() else int(grp["rank"].min())
        templates[(g, k)] = grp.loc[grp["rank"] == r].sort_values("seq")["end_ns"].to_numpy(np.int64)
    for (r, g, k), grp in part.groupby(["rank", "step", "kind"], sort=False):
        T = templates.get((g, k))
        own = grp.sort_values("start_ns")["end_ns"].to_numpy(np.int64)
        m = len(own)
        if T is None or m < 2 or m >= len(T):
            continue
        spread = []
        for k0 in range(len(T) - m + 1):
            d = (own - T[k0 : k0 + m]).astype(np.float64)
            spread.append(float(np.median(np.abs(d - np.median(d)))))
        order = np.argsort(spread, kind="stable")
        best = int(order[0])
        if spread[best] < 0.5 * spread[int(order[1])]:
            idx = grp.sort_values("start_ns").index.to_numpy()
            seq[idx] = best + np.arange(m)
            placed[idx] = True
    coll["seq"] = seq
    return placed


def match_by_time(coll: pd.DataFrame, st: pd.DataFrame) -> np.ndarray:
    """Partial rank-steps and collectives outside every step, matched to the instances by time on the reference's
    clock: a collective outside every step takes the step whose window holds its start, and each is the instance of
    its kind whose median start is nearest (one collective an instance). Sets ``step`` and ``seq`` of ``coll``;
    returns which rows are matched (those already placed included)."""
    matched = (coll["full"] | coll["shifted"]).to_numpy().copy()
    seq = coll["seq"].to_numpy().copy()
    step = coll["step"].to_numpy().copy()
    sref = coll["start_ref"].to_numpy(np.int64)
    out = np.flatnonzero(step < 0)
    if len(st) and out.size:
        win = st[st["step"] >= 0].groupby("step").agg(s=("start_ns", "min"), e=("end_ns", "max")).sort_index()
        if len(win):
            w = iv.window_of(sref[out], win["s"].to_numpy(np.int64), win["e"].to_numpy(np.int64))
            step[out] = np.where(w >= 0, win.index.to_numpy()[np.clip(w, 0, None)], -1)
    todo = np.flatnonzero(~matched & (step >= 0))
    if todo.size:  # the instances' median starts, only where a rank has something to place
        kinds = coll["kind"].to_numpy()
        ranks = coll["rank"].to_numpy()
        done = np.flatnonzero(matched)
        tmpl = pd.Series(sref[done]).groupby([step[done], kinds[done], seq[done]]).median()
        groups: dict[tuple, list[int]] = {}
        for j in todo:
            groups.setdefault((int(ranks[j]), int(step[j]), kinds[j]), []).append(j)
        for (r, g, k), idx in groups.items():
            try:
                t = tmpl.loc[(g, k)]
            except KeyError:
                continue
            idx = np.array(idx)
            dist = np.abs(sref[idx][:, None] - t.to_numpy()[None, :])
            near = np.argmin(dist, axis=1)
            best = {}
            for j, n_, dd in zip(idx, near, dist[np.arange(len(idx)), near]):
                if n_ not in best or dd < best[n_][1]:
                    best[n_] = (j, dd)
            for n_, (j, _) in best.items():
                matched[j] = True
                seq[j] = int(t.index[n_])
    coll["step"], coll["seq"] = step, seq
    return matched


def collectives_table(coll: pd.DataFrame, matched: np.ndarray, knames: pd.Index) -> pd.DataFrame:
    """The matched collectives on the reference's clock, by instance then rank, taken column by column (no copy of
    the whole table); ``kind`` a categorical of ``knames`` (sorted: code order is name order)."""
    rows = np.flatnonzero(matched)
    whole = len(rows) == len(coll)  # every collective matched: the columns as they are, no copy
    col = {
        c: coll[c].to_numpy(np.int64) if whole else coll[c].to_numpy(np.int64)[rows]
        for c in ("step", "kind", "seq", "rank")
    }
    order = lex_order(col["rank"], col["seq"], col["kind"], col["step"])
    rows = rows[order]
    out = {
        "step": col["step"][order],
        "kind": pd.Categorical.from_codes(col["kind"][order], categories=knames),
        "seq": col["seq"][order],
        "rank": col["rank"][order],
    }
    del col
    for c, src in (("start_ns", "start_ref"), ("end_ns", "end_ref"), *((w, w) for w in WORK_COLS)):
        out[c] = coll[src].to_numpy(np.int64)[rows]
    out["partial"] = ~coll["full"].to_numpy(bool)[rows]
    if "clock_uncertain" in coll:  # begun while its rank's clock stepped, on a side unknown (align._across_steps)
        out["clock_uncertain"] = coll["clock_uncertain"].to_numpy(bool)[rows]
    return pd.DataFrame(out, copy=False)  # each column as taken: no consolidation copy
