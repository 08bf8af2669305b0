"""The tables of `tracekit waves` (:mod:`.waves`): the launches summed per name and launch grid, and per name.

Grouped on the keys' codes, numbered in order of first appearance as ``groupby(sort=False)`` numbers them, with
counts by ``bincount``, exact integer sums and minima by ``ufunc.at`` and each group's first row read directly: the
tables ``groupby(...).agg`` gave (columns, types, order), at a fraction of its cost on 10^5 launches.

Where the launches carry a range of CTAs per SM (``ctas_per_sm_lo`` beside ``ctas_per_sm``, the upper bound: a ROCm
trace with no registers or LDS, :func:`tracekit.gpu_specs.ctas_per_sm_range`), both tables also carry the range of
each wave number (``*_lo``/``*_hi``: the least and the most over every CTAs-per-SM count in the range) and are
ranked by the time lost at least, then at most; with no range column the tables are what they were.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

GRID_KEYS = ["name", "grid_x", "grid_y", "grid_z", "ctas_per_sm", "limited_by", "ctas_per_sm_from"]


def _groups(df: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """Each row's group over ``keys`` numbered in order of first appearance (``groupby(sort=False)``'s order), and
    the first row of each group; None when a categorical key has a missing value (groupby leaves those rows out).
    The keys' codes are combined into one integer (renumbered before it could pass 2**62)."""
    key, card = np.zeros(len(df), dtype=np.int64), 1
    for c in keys:
        col = df[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            codes, k = col.cat.codes.to_numpy().astype(np.int64), max(len(col.cat.categories), 1)
            if (codes < 0).any():
                return None
        else:
            codes, u = pd.factorize(col.to_numpy())
            k = max(len(u), 1)
        if card * k >= 2**62:
            key, u = pd.factorize(key)
            card = max(len(u), 1)
        key, card = key * k + codes, card * k
    gid, _ = pd.factorize(key)
    if not gid.size:
        return gid, gid
    seen = np.maximum.accumulate(gid)
    return gid, np.flatnonzero(np.concatenate(([True], gid[1:] > seen[:-1])))


def _sums(gid: np.ndarray, n: int, values: np.ndarray) -> np.ndarray:
    out = np.zeros(n, dtype=values.dtype)
    np.add.at(out, gid, values)  # exact integer sums, as groupby's
    return out


RANGE_FIRST = (  # per_grid's range columns read from each group's first row: (column, launch column)
    ("ctas_per_sm_lo", "ctas_per_sm_lo"),
    ("ctas_per_sm_hi", "ctas_per_sm"),
    ("capacity_lo", "capacity_lo"),
    ("capacity_hi", "capacity"),
    ("waves_lo", "waves"),
    ("waves_hi", "waves_hi"),
    ("wave_efficiency_lo", "eff_lo"),
    ("wave_efficiency_hi", "eff_hi"),
)
RANGE_SUMS = (("lost_lo_ns", "lost_lo"), ("lost_hi_ns", "lost_hi"))


def has_range(df: pd.DataFrame) -> bool:
    return "ctas_per_sm_lo" in df.columns


def per_grid(df: pd.DataFrame) -> pd.DataFrame:
    """The launches summed per name and launch grid, most time lost first; a name and grid launched with two block
    configurations (two CTAs-per-SM counts) are two rows. Grouped on the keys' codes (what ``groupby(...).agg``
    gave, columns, types and order, at a third of its cost)."""
    ranged = has_range(df)
    keys = GRID_KEYS + ["ctas_per_sm_lo"] if ranged else GRID_KEYS
    got = _groups(df, keys) if not np.isnan(df["eff"].to_numpy()).any() else None
    if got is None:  # a missing label (or efficiency): groupby's own handling
        extra = {c: (src, "first") for c, src in RANGE_FIRST if src not in keys} if ranged else {}
        extra.update({c: (src, "sum") for c, src in RANGE_SUMS} if ranged else {})
        table = (
            df.groupby(keys, sort=False, observed=True)
            .agg(
                count=("ctas", "size"),
                ctas=("ctas", "first"),
                capacity=("capacity", "first"),
                waves=("waves", "first"),
                wave_efficiency=("eff", "first"),
                total_ns=("dur_ns", "sum"),
                lost_ns=("lost_ns", "sum"),
                **extra,
            )
            .reset_index()
        )
    else:
        gid, first = got
        cols = {
            c: (df[c].array[first] if isinstance(df[c].dtype, pd.CategoricalDtype) else df[c].to_numpy()[first])
            for c in keys
        }
        cols["count"] = np.bincount(gid, minlength=first.size).astype(np.int64)
        cols.update(
            {
                c: df[src].to_numpy()[first]
                for c, src in (
                    ("ctas", "ctas"),
                    ("capacity", "capacity"),
                    ("waves", "waves"),
                    ("wave_efficiency", "eff"),
                )
            }
        )
        cols.update(
            {
                c: _sums(gid, first.size, df[src].to_numpy())
                for c, src in (("total_ns", "dur_ns"), ("lost_ns", "lost_ns"))
            }
        )
        if ranged:
            cols.update({c: df[src].to_numpy()[first] for c, src in RANGE_FIRST})
            cols.update({c: _sums(gid, first.size, df[src].to_numpy()) for c, src in RANGE_SUMS})
        table = pd.DataFrame(cols)
    for c in ("limited_by", "ctas_per_sm_from"):
        table[c] = table[c].astype(str)
    if ranged:
        table["ctas_per_sm_hi"] = table["ctas_per_sm"]
        return table.sort_values(["lost_lo_ns", "lost_hi_ns", "name"], ascending=[False, False, True], kind="stable")
    return table.sort_values(["lost_ns", "name"], ascending=[False, True], kind="stable")


def per_kernel(df: pd.DataFrame, per_grid: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """The launches summed per name, most time lost first; the most common launch of each name gives its ctas,
    waves and capacity."""
    common = (
        per_grid.sort_values(["name", "count", "lost_ns"], ascending=[True, False, False], kind="stable")
        .drop_duplicates("name")
        .set_index("name")
    )
    gid, first = _groups(df, ["name"])  # the name is an integer: never missing
    n, ctas = first.size, df["ctas"].to_numpy()
    lo, hi = np.full(n, np.iinfo(np.int64).max, dtype=np.int64), np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, gid, ctas)
    np.maximum.at(hi, gid, ctas)
    _, pairs = _groups(df, ["name", "ctas"])  # the first row of each distinct (name, CTAs)
    ranged = has_range(df)
    summed = ("dur_ns", "lost_ns", "lost_in_step") + (
        ("lost_lo", "lost_hi", "lost_in_step_lo", "lost_in_step_hi") if ranged else ()
    )
    per_kernel = pd.DataFrame(
        {
            "count": np.bincount(gid, minlength=n).astype(np.int64),
            **{c: _sums(gid, n, df[c].to_numpy()) for c in summed},
            "ctas_min": lo,
            "ctas_max": hi,
            "grids": np.bincount(gid[pairs], minlength=n).astype(np.int64),
        },
        index=pd.Index(df["name"].to_numpy()[first], name="name"),
    ).rename(columns={"dur_ns": "total_ns"})
    common_cols = ["ctas", "waves", "capacity", "ctas_per_sm", "limited_by", "ctas_per_sm_from"]
    if ranged:
        common_cols += ["ctas_per_sm_lo", "ctas_per_sm_hi", "capacity_lo", "capacity_hi", "waves_lo", "waves_hi"]
    per_kernel = per_kernel.join(common[common_cols]).reset_index()
    per_kernel["wave_efficiency"] = 1.0 - per_kernel["lost_ns"] / per_kernel["total_ns"].where(
        per_kernel["total_ns"] > 0
    )
    per_kernel["lost_pct"] = 100.0 * per_kernel["lost_ns"] / per_kernel["total_ns"].where(per_kernel["total_ns"] > 0)
    per_kernel["lost_per_step_ns"] = per_kernel["lost_in_step"] / n_steps if n_steps else np.nan
    if ranged:
        return _kernel_ranges(per_kernel, n_steps)
    return per_kernel.sort_values(["lost_ns", "name"], ascending=[False, True], kind="stable")


def _kernel_ranges(pk: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """per_kernel's range columns from the summed bounds: each name's time lost at least (the sum of each launch's
    least over the range: a bound that holds at every count in it) and at most, and what follows from them."""
    pk = pk.rename(columns={"lost_lo": "lost_lo_ns", "lost_hi": "lost_hi_ns"})
    total = pk["total_ns"].where(pk["total_ns"] > 0)
    pk["wave_efficiency_lo"] = 1.0 - pk["lost_hi_ns"] / total
    pk["wave_efficiency_hi"] = 1.0 - pk["lost_lo_ns"] / total
    pk["lost_pct_lo"] = 100.0 * pk["lost_lo_ns"] / total
    pk["lost_pct_hi"] = 100.0 * pk["lost_hi_ns"] / total
    for b in ("lo", "hi"):
        pk[f"lost_per_step_{b}_ns"] = pk[f"lost_in_step_{b}"] / n_steps if n_steps else np.nan
    return pk.sort_values(["lost_lo_ns", "lost_hi_ns", "name"], ascending=[False, False, True], kind="stable")
