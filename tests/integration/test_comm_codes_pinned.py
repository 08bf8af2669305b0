"""communication's per (class, name) and step table from the columns' codes (issue 30, round 3) against the code it
replaced, kept here as the oracle: the rows as a DataFrame copy, the classes and names as texts per row factorized
and sorted. The same table on the generated fixtures and on a hand-built table (a class named like the AllGather
copies' class, a missing name, unused categories)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit import intervals as iv
from tracekit.analyses.comm import communication as C
from tracekit.events import main_stream, weight_ag_mask

FIXTURES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "synthetic").glob("*.trace.json.gz"))
TABLE_COLUMNS = C.TABLE_COLUMNS
_opt = C._opt


def _old_per_step_class(c: pd.DataFrame, ws: np.ndarray, we: np.ndarray, wid: np.ndarray) -> pd.DataFrame:
    """Per (class, name) — sorted, as a groupby sorts them — and step: critical and side-stream time (the union of
    the kernels in the step) and the count; only the pairs with any. Arrays per name, not DataFrames per name."""
    cls_code, cls_u = pd.factorize(c["class"].to_numpy(object), sort=True)
    name_code, name_u = pd.factorize(c["name"].astype(str), sort=True)  # a missing name: -1, left out as groupby does
    ok = (cls_code >= 0) & (name_code >= 0)
    key = cls_code.astype(np.int64) * max(len(name_u), 1) + name_code
    groups, first, gi = np.unique(key[ok], return_index=True, return_inverse=True)
    rows = np.flatnonzero(ok)
    n_g, n_w = groups.size, len(wid)
    s, e = c["start_ns"].to_numpy(np.int64)[rows], c["end_ns"].to_numpy(np.int64)[rows]
    crit = c["critical"].to_numpy(bool)[rows]
    step = c["step"].to_numpy()[rows]
    order = np.argsort(gi, kind="stable")
    cuts = np.searchsorted(gi[order], np.arange(n_g + 1))
    crit_ns = np.zeros((n_g, n_w), dtype=np.int64)
    side_ns = np.zeros((n_g, n_w), dtype=np.int64)
    for g in range(n_g):  # per distinct (class, name): a few dozen
        r = order[cuts[g] : cuts[g + 1]]
        on, off = r[crit[r]], r[~crit[r]]
        crit_ns[g] = iv.measure_in_windows(iv.normalize(s[on], e[on]), ws, we)
        side_ns[g] = iv.measure_in_windows(iv.normalize(s[off], e[off]), ws, we)
    pos = np.searchsorted(wid, step)
    in_step = (step >= 0) & (pos < n_w)
    cnt = np.bincount(gi[in_step] * n_w + pos[in_step], minlength=n_g * n_w).reshape(n_g, n_w)
    g_at, w_at = np.nonzero((crit_ns != 0) | (side_ns != 0) | (cnt != 0))  # by name, then step: the rows' order
    if g_at.size == 0:
        return pd.DataFrame([], columns=TABLE_COLUMNS)
    head = c.iloc[rows[first]]  # each name's first row gives its collective, algo and protocol
    per_g = {k: [_opt(v) for v in head[k].tolist()] for k in ("collective", "algo", "protocol")}
    gcls, gname = cls_u[cls_code[rows[first]]], np.asarray(name_u, dtype=object)[name_code[rows[first]]]
    data = {
        "step": [int(x) for x in wid[w_at].tolist()],
        "class": [gcls[g] for g in g_at.tolist()],
        "name": [gname[g] for g in g_at.tolist()],
        **{k: [v[g] for g in g_at.tolist()] for k, v in per_g.items()},
        "critical_ns": crit_ns[g_at, w_at].tolist(),
        "side_ns": side_ns[g_at, w_at].tolist(),
        "count": cnt[g_at, w_at].tolist(),
    }
    return pd.DataFrame(data, columns=TABLE_COLUMNS)


def _old_table(ev, steps, pattern=None):
    (dev_main, st_main), is_ag = main_stream(ev), weight_ag_mask(ev, pattern)
    sel = ev["comm_class"].notna().to_numpy() | is_ag
    c = ev.loc[
        sel, ["name", "comm_class", "collective", "algo", "protocol", "device", "stream", "start_ns", "end_ns"]
    ].copy()
    c["class"] = c["comm_class"].astype(object).where(c["comm_class"].notna(), C.WEIGHT_AG_CLASS)
    c["critical"] = (c["device"] == dev_main) & (c["stream"] == st_main)
    c["step"] = steps.step_of(c["start_ns"].to_numpy())
    return _old_per_step_class(c, steps.starts, steps.ends, steps.table["step"].to_numpy())


def _new_table(ev, steps, pattern=None):
    (dev_main, st_main), is_ag = main_stream(ev), weight_ag_mask(ev, pattern)
    sel = np.flatnonzero(ev["comm_class"].notna().to_numpy() | is_ag)
    start, end = ev["start_ns"].to_numpy()[sel], ev["end_ns"].to_numpy()[sel]
    crit = (ev["device"].to_numpy()[sel] == dev_main) & (ev["stream"].to_numpy()[sel] == st_main)
    return C._per_step_class(
        ev, sel, start, end, crit, steps.step_of(start), steps.starts, steps.ends, steps.table["step"].to_numpy()
    )


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_per_step_class_is_the_old_table_on_the_fixtures(path):
    tr = tracekit.load(path)
    st = tracekit.find_steps(tr)
    want = _old_table(tr.events, st)
    assert len(want) > 5
    pd.testing.assert_frame_equal(_new_table(tr.events, st), want)


def test_per_step_class_with_a_class_named_weight_ag_and_a_missing_name():
    tr = tracekit.load(FIXTURES[0])
    st = tracekit.find_steps(tr)
    ev = tr.events.copy()
    cc = ev["comm_class"].cat.add_categories([C.WEIGHT_AG_CLASS, "zz unused"])
    rows = np.flatnonzero(cc.notna().to_numpy())
    cc.iloc[rows[::7]] = C.WEIGHT_AG_CLASS  # a class written like the AllGather copies' class
    ev["comm_class"] = cc
    name = ev["name"].copy()
    name.iloc[rows[1::11]] = np.nan  # a name missing: left out, as the groupby did
    ev["name"] = name
    pd.testing.assert_frame_equal(_new_table(ev, st), _old_table(ev, st))
