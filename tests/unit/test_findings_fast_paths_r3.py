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

    tr = tracekit.load(Path(__file__).resolve().parents[2] / "fixtures/synthetic/dsv3_bs32.trace.json.gz", cache=False)
    got, want = _category_of_names(tr), _category_of_names_before(tr)
    assert list(got.items()) == list(want.items()) and len(got) > 10
