"""The vectorised paths of findings, waves and shapes (issue 30) give what the slower code they replaced gave.

Two kinds of proof. The replaced pieces are kept here as oracles and compared on random inputs: the innermost op by
``merge_asof`` per depth, ``Series.mode`` per kernel name, ``pd.Series`` over an object array of str. And the whole
outputs are pinned: ``tests/data/pinned_outputs/*.json`` were written from the code before the change (findings,
waves, roofline and hbm results as JSON, without ``inputs`` and the version, the trace's path as ``TRACE``; the
kernel shapes table's summary, dtypes and sums); the same calls must give them unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.analyses.findings.kernel_sources import _modes
from tracekit.analyses.hardware.shapes import _innermost, kernel_shapes, str_values

ROOT = Path(__file__).resolve().parents[3]
PINNED = ROOT / "tests" / "data" / "pinned_outputs"


def _innermost_by_merge_asof(s, e, r, tq):
    """The search as launching_ops did it before: merge_asof by depth over DataFrames."""
    order = np.lexsort((-(e - s), s))
    s, e, r = s[order], e[order], r[order]
    s2, e2 = 2 * s, 2 * e + (e == s)
    ends = np.sort(e2)
    depth = np.arange(1, s.size + 1) - np.searchsorted(ends, s2, side="right")
    started = np.searchsorted(s2, tq, side="right")
    qdepth = started - np.searchsorted(ends, tq, side="right")
    out = np.full(tq.size, -1)
    ok = qdepth > 0
    if not ok.any():
        return out
    left = pd.DataFrame({"t": tq[ok], "d": qdepth[ok], "i": np.flatnonzero(ok)}).sort_values("t")
    right = pd.DataFrame({"t": s2, "d": depth, "k": np.arange(s.size)})
    m = pd.merge_asof(left, right, on="t", by="d", direction="backward")
    k = m["k"].to_numpy(dtype=float)
    good = ~np.isnan(k)
    kk, ii, t = k[good].astype(np.int64), m["i"].to_numpy()[good], m["t"].to_numpy()[good]
    holds = (s2[kk] <= t) & (e2[kk] > t)
    out[ii[holds]] = r[kk[holds]]
    return out


def _nested_ops(rng, n):
    """Ops that nest (a call tree), in start order, with zero-length ops and shared starts."""
    s, e, stack, t = [], [], [], 0
    for _ in range(n):
        while stack and rng.random() < 0.4:
            i = stack.pop()
            t += int(rng.integers(0, 3))
            e[i] = t
        s.append(t)
        e.append(None)
        stack.append(len(s) - 1)
        t += int(rng.integers(0, 2))
    for i in stack[::-1]:
        t += int(rng.integers(0, 3))
        e[i] = t
    return np.array(s, dtype=np.int64), np.array(e, dtype=np.int64)


@pytest.mark.parametrize("nested", [True, False])
def test_innermost_matches_merge_asof(nested):
    rng = np.random.default_rng(7 if nested else 8)
    found = 0
    for _ in range(200):
        n = int(rng.integers(1, 40))
        if nested:
            s, e = _nested_ops(rng, n)
        else:  # ops that overlap without nesting (a malformed thread), in any order
            s = rng.integers(0, 50, n)
            e = s + rng.integers(0, 20, n) * (rng.random(n) > 0.15)
        r = rng.permutation(10_000)[: s.size]
        tq = 2 * rng.integers(-2, int(e.max()) + 5, int(rng.integers(1, 30)))
        want = _innermost_by_merge_asof(s, e, r, tq)
        hit, rows = _innermost(s, e, r, tq)
        got = np.full(tq.size, -1)
        got[hit] = rows
        np.testing.assert_array_equal(got, want)
        found += int((want >= 0).sum())
    assert found > 500  # the cases do find ops, not only misses


def test_modes_match_series_mode_with_ties():
    rng = np.random.default_rng(3)
    names = np.array(["k_b", "k_a", "k_c", "k_é"], dtype=object)
    ops = np.array(["aten::mm", "aten::addmm", "aten::bmm", "Ω::x"], dtype=object)
    ties = 0
    for _ in range(60):
        n = int(rng.integers(1, 40))
        d = pd.DataFrame({"name": rng.choice(names, n), "op": rng.choice(ops, n)})
        g = d.groupby("name", sort=False)
        want = g["op"].agg(lambda x: x.mode().iloc[0])
        got = _modes(d, "op", g.size().index)
        pd.testing.assert_series_equal(got, want, check_names=False)
        ties += int(sum((x.value_counts() == x.value_counts().max()).sum() > 1 for _, x in g["op"]))
    assert ties > 15  # ties were exercised: the smallest value wins, as mode gives it


@pytest.mark.parametrize("codes", [[0, -1, 2, 1, 0], [-1, -1], [], [3, 3, 3]])
def test_str_values_are_what_a_series_infers(codes):
    cats = np.array(["a", "bé", "c", "aten::mm"], dtype=object)
    codes = np.asarray(codes, dtype=np.int64)
    table = np.append(cats, None)
    want = pd.Series(table[codes])
    got = pd.Series(str_values(codes, cats))
    pd.testing.assert_series_equal(got, want)


def _clean(obj, path: str):
    text = json.dumps(obj) if not isinstance(obj, str) else obj
    j = json.loads(text.replace(json.dumps(path)[1:-1], "TRACE").replace(str(ROOT) + "/", ""))
    if isinstance(j, dict):
        j.pop("inputs", None)
        j.pop("tracekit", None)
    return j


def _outputs(tr, path: str, ann, bs) -> dict:
    doc = {}
    for cmd, fn in (
        ("findings", lambda: tracekit.findings(tr, ann)),
        ("waves", lambda: tracekit.kernel_waves(tr, ann)),
        ("roofline", lambda: tracekit.roofline(tr, ann, bs=bs)),
        ("hbm", lambda: tracekit.hbm(tr, ann, bs=bs)),
    ):
        try:
            doc[cmd] = _clean(fn().to_json(), path)
        except tracekit.TracekitError as exc:
            doc[cmd] = {"error": f"{type(exc).__name__}: {exc}".replace(path, "TRACE").replace(str(ROOT) + "/", "")}
    ks = kernel_shapes(tr)
    t = ks.table
    doc["kernel_shapes"] = {
        "summary": ks.summary(),
        "warnings": [w.replace(path, "TRACE") for w in ks.warnings],
        "dtypes": {c: str(d) for c, d in t.dtypes.items()},
        "with_op": int((t["op_row"] >= 0).sum()),
        "carries": int(t["carries"].sum()),
        "flops": float(t["flops"].sum()),
        "bytes": float(t["bytes"].sum()),
        "ops": {str(k): int(v) for k, v in t["op"].value_counts().sort_index().items()},
        "op_rows": int(t["op_row"].sum()),
    }
    return json.loads(json.dumps(doc, sort_keys=True, ensure_ascii=False))


def _check(name: str, path: Path, ann=None, bs=None):
    want = json.loads((PINNED / f"{name}.json").read_text(encoding="utf-8"))
    tr = tracekit.load(path, cache=False)
    got = _outputs(tr, str(path), ann, bs)
    for cmd in want:
        assert got[cmd] == want[cmd], f"{name}: {cmd} differs from the pinned output"
    got_again = _outputs(tr, str(path), ann, bs)  # the kernel arrays and shapes kept on the trace: the same again
    assert got_again == got


@pytest.mark.parametrize(
    "name, rel, ann, bs",
    [
        ("dp16_bs4_k3_dp16", "fixtures/synthetic/dp16_bs4.trace.json.gz", "k3_dp16", 4),
        ("dsv3_bs32", "fixtures/synthetic/dsv3_bs32.trace.json.gz", None, None),
    ],
)
def test_fixture_outputs_are_pinned(name, rel, ann, bs):
    _check(name, ROOT / rel, ann, bs)


@pytest.mark.slow
def test_corpus_bert_outputs_are_pinned():
    """A real profile with recorded shapes: the kernel_roofline and wave_quantization findings, shape modes."""
    path = (
        ROOT.parent / "shared" / "corpus" / "tracelens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    )
    if not path.is_file():
        pytest.skip(f"{path} is not here (the shared corpus)")
    _check("bert_h100", path)


def test_group_modes_match_series_mode_per_group():
    """roofline's per-kernel modes: over the masked rows, missing values left out, the smallest on a tie."""
    from tracekit.analyses.hardware.roofline import _group_modes

    rng = np.random.default_rng(5)
    vals = np.array(["fp16", "bf16", None, "fp8", "é"], dtype=object)
    for _ in range(40):
        n = int(rng.integers(1, 50))
        gid = rng.integers(-1, 5, n)
        col = pd.Series(rng.choice(vals, n))
        mask = rng.random(n) > 0.3
        got = _group_modes(gid, col, mask)
        want = {}
        for g in sorted(set(gid[gid >= 0].tolist())):
            x = col[(gid == g) & mask].dropna()
            if len(x):
                want[g] = x.mode().iloc[0]
        assert got == want


if (
    __name__ == "__main__"
):  # after an intended change of these outputs: python tests/unit/findings/test_findings_against_oracles.py
    for name, rel, ann, bs in [
        ("dp16_bs4_k3_dp16", ROOT / "fixtures/synthetic/dp16_bs4.trace.json.gz", "k3_dp16", 4),
        ("dsv3_bs32", ROOT / "fixtures/synthetic/dsv3_bs32.trace.json.gz", None, None),
        (
            "bert_h100",
            ROOT.parent / "shared/corpus/tracelens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
            None,
            None,
        ),
    ]:
        doc = _outputs(tracekit.load(rel, cache=False), str(rel), ann, bs)
        (PINNED / f"{name}.json").write_text(
            json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
        )
