"""Round 3 of issue 30's fast paths in findings and the kernel tables: each replaced piece is kept here as the
oracle and compared with its replacement on random inputs (ties, missing names, several devices)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit import intervals as iv
from tracekit.analyses.findings.kernel_sources import _union_by_device
from tracekit.analyses.hardware.shapes import _carriers


def _carriers_by_lexsort(oprow, dur):
    """The carrying kernel of each op call as _kernel_shapes chose it before: one lexsort (call, -dur, position)."""
    has = oprow >= 0
    i, o = np.flatnonzero(has), oprow[has]
    order = np.lexsort((i, -dur[has], o))
    first = np.concatenate(([True], o[order][1:] != o[order][:-1]))
    out = np.zeros(oprow.size, dtype=bool)
    out[i[order[first]]] = True
    return out


def test_carriers_are_the_longest_first_kernel_of_each_call():
    rng = np.random.default_rng(5)
    ties = 0
    for _ in range(300):
        n = int(rng.integers(1, 60))
        oprow = np.where(rng.random(n) < 0.2, -1, rng.integers(0, 12, n) * 7).astype(np.int64)
        dur = rng.integers(0, 5, n).astype(np.int64)  # few values: many ties within a call
        if not (oprow >= 0).any():
            continue
        np.testing.assert_array_equal(_carriers(oprow, dur), _carriers_by_lexsort(oprow, dur))
        d = pd.DataFrame({"o": oprow, "d": dur})[oprow >= 0]
        ties += int((d.groupby("o")["d"].transform("max") == d["d"]).groupby(d["o"]).sum().gt(1).sum())
    assert ties > 100  # calls whose longest kernel is tied were exercised


def _union_by_device_before(s, e, dev):
    devices = pd.unique(dev)
    return sum(float(iv.total(iv.normalize(s[dev == d], e[dev == d]))) for d in devices) / max(len(devices), 1)


@pytest.mark.parametrize("devices", [1, 3])
def test_union_by_device_is_what_it_was(devices):
    rng = np.random.default_rng(devices)
    for _ in range(100):
        n = int(rng.integers(0, 50))
        s = rng.integers(0, 1000, n).astype(np.int64)
        e = s + rng.integers(0, 100, n)
        dev = rng.integers(0, devices, n).astype(np.int32)
        assert _union_by_device(s, e, dev) == _union_by_device_before(s, e, dev)


def _category_of_names_before(trace):
    """Kernel name -> category as kernel_arrays found it before: np.unique over every kernel's name code."""
    from tracekit.analyses.categories import trace_categories
    from tracekit.analyses.findings.kernel_arrays import _at
    from tracekit.analyses.hardware.shapes import names_at

    ev = trace.events
    k = np.flatnonzero((ev["kind"] == "kernel").to_numpy())
    _, first = np.unique(ev["name"].cat.codes.to_numpy()[k], return_index=True)
    rows = k[first]
    return dict(zip(names_at(ev, rows).tolist(), _at(trace_categories(trace), rows).tolist()))


def test_category_of_names_is_what_it_was():
    import tracekit
    from tracekit.analyses.findings.kernel_arrays import _category_of_names

    from pathlib import Path

    tr = tracekit.load(Path(__file__).resolve().parents[3] / "fixtures/synthetic/dsv3_bs32.trace.json.gz", cache=False)
    got, want = _category_of_names(tr), _category_of_names_before(tr)
    assert list(got.items()) == list(want.items()) and len(got) > 10


def _per_grid_before(df):
    per_grid = (
        df.groupby(
            ["name", "grid_x", "grid_y", "grid_z", "ctas_per_sm", "limited_by", "ctas_per_sm_from"],
            sort=False,
            observed=True,
        )
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
    for c in ("limited_by", "ctas_per_sm_from"):
        per_grid[c] = per_grid[c].astype(str)
    return per_grid.sort_values(["lost_ns", "name"], ascending=[False, True], kind="stable")


def _per_kernel_before(df, per_grid, n_steps):
    common = (
        per_grid.sort_values(["name", "count", "lost_ns"], ascending=[True, False, False], kind="stable")
        .drop_duplicates("name")
        .set_index("name")
    )
    g = df.groupby("name", sort=False)
    per_kernel = pd.DataFrame(
        {
            "count": g.size(),
            "total_ns": g["dur_ns"].sum(),
            "lost_ns": g["lost_ns"].sum(),
            "lost_in_step": g["lost_in_step"].sum(),
            "ctas_min": g["ctas"].min(),
            "ctas_max": g["ctas"].max(),
            "grids": g["ctas"].nunique(),
        }
    )
    per_kernel = per_kernel.join(
        common[["ctas", "waves", "capacity", "ctas_per_sm", "limited_by", "ctas_per_sm_from"]]
    ).reset_index()
    per_kernel["wave_efficiency"] = 1.0 - per_kernel["lost_ns"] / per_kernel["total_ns"].where(
        per_kernel["total_ns"] > 0
    )
    per_kernel["lost_pct"] = 100.0 * per_kernel["lost_ns"] / per_kernel["total_ns"].where(per_kernel["total_ns"] > 0)
    per_kernel["lost_per_step_ns"] = per_kernel["lost_in_step"] / n_steps if n_steps else np.nan
    return per_kernel.sort_values(["lost_ns", "name"], ascending=[False, True], kind="stable")


def _launches(rng, n, missing_label=False):
    gx = rng.choice([1, 2, 132, 264, 10**7], n).astype(np.int64)
    gy, gz = rng.integers(1, 3, n).astype(np.int64), np.ones(n, dtype=np.int64)
    cps = rng.integers(1, 4, n).astype(np.int64)
    ctas, cap = gx * gy * gz, 132 * cps
    waves = -(-ctas // cap)
    dur = rng.integers(0, 50, n).astype(np.int64)
    eff = ctas / (waves * cap)
    lost = (dur - np.rint(dur * eff)).astype(np.int64)
    lim = rng.integers(-1 if missing_label else 0, 3, n)
    return pd.DataFrame(
        {
            "name": rng.integers(0, 6, n),
            "grid_x": gx,
            "grid_y": gy,
            "grid_z": gz,
            "ctas": ctas,
            "capacity": cap,
            "waves": waves,
            "eff": eff,
            "dur_ns": dur,
            "lost_ns": lost,
            "ctas_per_sm": cps,
            "limited_by": pd.Categorical.from_codes(lim, categories=["threads", "registers", "smem"]),
            "ctas_per_sm_from": pd.Categorical.from_codes(
                rng.integers(0, 2, n), categories=["launch configuration", "option"]
            ),
            "lost_in_step": np.where(rng.random(n) < 0.8, lost, 0),
        }
    )


@pytest.mark.parametrize("missing_label", [False, True])
def test_wave_tables_are_the_groupby_tables(missing_label):
    from tracekit.analyses.hardware.wave_tables import per_grid, per_kernel

    rng = np.random.default_rng(21 + missing_label)
    for _ in range(60):
        df = _launches(rng, int(rng.integers(1, 80)), missing_label)
        want_grid, got_grid = _per_grid_before(df), per_grid(df)
        pd.testing.assert_frame_equal(got_grid, want_grid, check_exact=True)
        pd.testing.assert_frame_equal(
            per_kernel(df, got_grid, 3), _per_kernel_before(df, want_grid, 3), check_exact=True
        )


def _modes_before(d, col, names):
    n = d.groupby(["name", col], sort=False).size().rename("_n").reset_index()
    return (
        n.sort_values(["name", "_n", col], ascending=[True, False, True], kind="stable")
        .drop_duplicates("name")
        .set_index("name")[col]
        .reindex(names)
    )


def test_modes_are_the_groupby_modes_with_missing_values():
    from tracekit.analyses.findings.kernel_sources import _modes

    rng = np.random.default_rng(9)
    names = np.array(["k_b", "k_a", None, "k_é", "k_z"], dtype=object)
    ops = np.array(["aten::mm", "aten::addmm", None, "Ω::x", "aten::bmm"], dtype=object)
    for _ in range(80):
        n = int(rng.integers(1, 40))
        d = pd.DataFrame({"name": rng.choice(names, n), "op": rng.choice(ops, n)})
        idx = d.groupby("name", sort=False).size().index
        pd.testing.assert_series_equal(_modes(d, "op", idx), _modes_before(d, "op", idx))


def test_comm_names_are_the_selected_names():
    from tracekit.events import comm_names as _comm_names

    rng = np.random.default_rng(4)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        names = rng.choice(np.array(["nccl:all_reduce", "gemm", None, "ncclKernel_AllGather", "x"], dtype=object), n)
        ev = pd.DataFrame(
            {
                "name": pd.Categorical(
                    names, categories=["gemm", "nccl:all_reduce", "ncclKernel_AllGather", "unused", "x"]
                ),
                "comm_class": pd.Categorical(rng.choice(np.array(["allreduce", None], dtype=object), n)),
            }
        )
        want = {str(x) for x in ev.loc[ev["comm_class"].notna(), "name"].unique()}
        assert _comm_names(ev) == want


def _evaluate_pairs_before(upair, name_cats, shape_cats):
    from tracekit.analyses.hardware.shapes import _op_inputs, evaluate, model_of

    results = []
    for p in upair.tolist():
        name = str(name_cats[p // (shape_cats.size + 1)])
        got = _op_inputs(shape_cats[p % (shape_cats.size + 1)]) if model_of(name) is not None else None
        results.append(evaluate(name, *got) if got is not None else None)
    return results


def test_evaluate_pairs_is_one_evaluate_per_pair():
    """Every (op name, signature) pair of a trace that records shapes, and made-up pairs (names that share a model,
    a signature that does not decode): the same answer as evaluate per pair."""
    from pathlib import Path

    import tracekit
    from tracekit.analyses.hardware.shapes import _evaluate_pairs

    root = Path(__file__).resolve().parents[3]
    ev = tracekit.load(root / "fixtures/synthetic/dsv3_bs32.trace.json.gz", cache=False).events
    ops = ev[ev["kind"] == "cpu_op"]
    name_cats = np.append(ev["name"].cat.categories.to_numpy(dtype=object), ["aten::mm", "aten::bmm", "aten::add"])
    shape_cats = np.append(
        ev["shapes"].cat.categories.to_numpy(dtype=object),
        ['[[[4,8],[8,16]],["float","float"],["",""]]', "not json", '[[2,3],["float"]]'],
    )
    k = shape_cats.size + 1
    rng = np.random.default_rng(2)
    seen = ops["name"].cat.codes.to_numpy().astype(np.int64) * k + ops["shapes"].cat.codes.to_numpy()
    made = rng.integers(name_cats.size - 3, name_cats.size, 40) * k + rng.integers(
        shape_cats.size - 3, shape_cats.size, 40
    )
    upair = pd.unique(np.concatenate([seen[ops["shapes"].cat.codes.to_numpy() >= 0], made]))
    got, want = _evaluate_pairs(upair, name_cats, shape_cats), _evaluate_pairs_before(upair, name_cats, shape_cats)
    assert got == want and sum(g is not None for g in got) >= 1
