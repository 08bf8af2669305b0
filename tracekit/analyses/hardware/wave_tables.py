"""The tables of `tracekit waves` (:mod:`.waves`): the launches summed per name and launch grid, and per name.

Grouped on the keys' codes, numbered in order of first appearance as ``groupby(sort=False)`` numbers them, with
counts by ``bincount``, exact integer sums and minima by ``ufunc.at`` and each group's first row read directly: the
tables ``groupby(...).agg`` gave (columns, types, order), at a fraction of its cost on 10^5 launches.
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


def per_grid(df: pd.DataFrame) -> pd.DataFrame:
    """The launches summed per name and launch grid, most time lost first; a name and grid launched with two block
    configurations (two CTAs-per-SM counts) are two rows. Grouped on the keys' codes (what ``groupby(...).agg``
    gave, columns, types and order, at a third of its cost)."""
    got = _groups(df, GRID_KEYS) if not np.isnan(df["eff"].to_numpy()).any() else None
    if got is None:  # a missing label (or efficiency): groupby's own handling
        table = (
            df.groupby(GRID_KEYS, sort=False, observed=True)
            .agg(
                count=("ctas", "size"),
                ctas=("ctas", "first"),
                capacity=("capacity", "first"),
                waves=("waves", "first"),
                wave_efficiency=("eff", "first"),
                total_ns=("dur_ns", "sum"),
                lost_ns=("lost_ns", "sum"),
            )
            .reset_index()
        )
    else:
        gid, first = got
        cols = {
            c: (df[c].array[first] if isinstance(df[c].dtype, pd.CategoricalDtype) else df[c].to_numpy()[first])
            for c in GRID_KEYS
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
        table = pd.DataFrame(cols)
    for c in ("limited_by", "ctas_per_sm_from"):
        table[c] = table[c].astype(str)
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
    per_kernel = pd.DataFrame(
        {
            "count": np.bincount(gid, minlength=n).astype(np.int64),
            **{c: _sums(gid, n, df[c].to_numpy()) for c in ("dur_ns", "lost_ns", "lost_in_step")},
            "ctas_min": lo,
            "ctas_max": hi,
            "grids": np.bincount(gid[pairs], minlength=n).astype(np.int64),
        },
        index=pd.Index(df["name"].to_numpy()[first], name="name"),
    ).rename(columns={"dur_ns": "total_ns"})
    per_kernel = per_kernel.join(
        common[["ctas", "waves", "capacity", "ctas_per_sm", "limited_by", "ctas_per_sm_from"]]
    ).reset_index()
    per_kernel["wave_efficiency"] = 1.0 - per_kernel["lost_ns"] / per_kernel["total_ns"].where(
        per_kernel["total_ns"] > 0
    )
    per_kernel["lost_pct"] = 100.0 * per_kernel["lost_ns"] / per_kernel["total_ns"].where(per_kernel["total_ns"] > 0)
    per_kernel["lost_per_step_ns"] = per_kernel["lost_in_step"] / n_steps if n_steps else np.nan
    return per_kernel.sort_values(["lost_ns", "name"], ascending=[False, True], kind="stable")
