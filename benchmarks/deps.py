"""Would orjson or intervaltree serve tracekit better than what it uses? (issue 18)

Usage::

    python benchmarks/deps.py [--rows 1000000] [--n 1000000] [--queries 10000] [--repeat 3] [--seed 0]

Two measurements, each against what tracekit uses today, best of ``--repeat``, in this process:

* **JSON encoding** of a large table, the way ``--format json`` writes one (``tracekit.result.to_json``:
  a list of row objects, ``orjson.dumps`` with its two-space indent; before it ``msgspec.json.encode`` then
  ``msgspec.json.format(indent=1)``, and before that ``json.dumps(indent=1, ensure_ascii=False)``): the stdlib ``json`` encoder with and without
  indentation, ``msgspec.json.encode`` with and without that formatting, and ``orjson.dumps`` (with ``OPT_INDENT_2``, orjson's only
  indentation, and without). The rows are built once beforehand (the same list for every encoder), and
  each output is decoded again to check that it holds the same rows.
* **Interval work** on ``--n`` seeded random int64 nanosecond intervals (~1 s span, heavy overlap):
  ``intervaltree.IntervalTree`` (build; ``merge_overlaps`` for the union; ``--queries`` overlap queries,
  each the total overlap of a window with the set) against ``tracekit.intervals`` (``normalize``/``union``;
  ``measure_in_windows`` for all queries at once). Each side's answers are checked against the other's.

The ingest-side orjson measurement (decode the trace, then build the same columns) is a row of
``benchmarks/ingest.py``. orjson is a dependency of tracekit (for ``--format json``), intervaltree is not
(``pip install intervaltree``, or ``pip install -e '.[bench]'``); a missing one is reported and skipped.
The measured numbers, and what tracekit chose from them: benchmarks/README.md ("Would orjson or intervaltree do
better?").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any, Callable

import numpy as np

try:
    from tracekit import intervals as iv
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tracekit import intervals as iv


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def table_rows(n: int, seed: int) -> list[dict]:
    """Rows like a big ``kernels``/``stats`` table: names, ints, floats, a missing value now and then."""
    rng = np.random.default_rng(seed)
    names = [f"void deep_gemm::fp8_gemm_kernel<{i}u, 128u, {i % 7}u>(float*, int)" for i in range(300)]
    name = rng.integers(0, 300, n)
    start = 1712195495519689047 + np.cumsum(rng.integers(100, 5000, n))
    dur = rng.integers(500, 90000, n)
    share = rng.random(n)
    stream = rng.choice([7, 20, 23], n)
    return [
        {"name": names[a], "start_ns": b, "dur_ns": c, "share": d, "stream": e, "bytes": (None if c % 5 else c * 8)}
        for a, b, c, d, e in zip(name.tolist(), start.tolist(), dur.tolist(), share.tolist(), stream.tolist())
    ]


def encode_rows(args) -> list[tuple[str, float, int]]:
    rows = table_rows(args.rows, args.seed)
    doc = {"tracekit": "0", "tables": {"kernels": rows}}
    out = []
    candidates: list[tuple[str, Callable[[], Any]]] = [
        (
            "json.dumps(indent=1, ensure_ascii=False)  [tracekit before msgspec]",
            lambda: json.dumps(doc, indent=1, ensure_ascii=False).encode(),
        ),
        (
            "json.dumps(ensure_ascii=False, separators=(',', ':'))",
            lambda: json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode(),
        ),
    ]
    try:
        import msgspec

        candidates += [
            (
                "msgspec.json.format(encode, indent=1)  [tracekit before orjson]",
                lambda: msgspec.json.format(msgspec.json.encode(doc), indent=1),
            ),
            ("msgspec.json.encode", lambda: msgspec.json.encode(doc)),
        ]
    except ImportError:
        print("msgspec not installed: skipped")
    try:
        import orjson

        candidates += [
            ("orjson.dumps(OPT_INDENT_2)  [what tracekit uses]", lambda: orjson.dumps(doc, option=orjson.OPT_INDENT_2)),
            ("orjson.dumps", lambda: orjson.dumps(doc)),
        ]
    except ImportError:
        print("orjson not installed: skipped (pip install orjson)")
    for label, fn in candidates:
        secs, text = best_of(fn, args.repeat)
        assert json.loads(text)["tables"]["kernels"][-1] == rows[-1], label
        out.append((label, secs, len(text)))
    return out


def random_intervals(rng: np.random.Generator, n: int, span_ns: int) -> tuple[np.ndarray, np.ndarray]:
    base = 1_700_000_000_000_000_000
    starts = base + rng.integers(0, span_ns, size=n, dtype=np.int64)
    lengths = rng.integers(1, 2 * span_ns // max(n, 1) + 2, size=n, dtype=np.int64)
    return starts, starts + lengths


def interval_work(args) -> list[tuple[str, str, float]]:
    rng = np.random.default_rng(args.seed)
    span = 1_000_000_000
    s, e = random_intervals(rng, args.n, span)
    base = int(s.min())
    ws = base + rng.integers(0, span, size=args.queries, dtype=np.int64)
    we = ws + rng.integers(1, span // 1000, size=args.queries, dtype=np.int64)
    out = []
    t_norm, norm = best_of(lambda: iv.normalize(s, e), args.repeat)
    out.append(("tracekit.intervals", f"normalize {args.n:,} (sort + union)", t_norm))
    t_union, _ = best_of(lambda: iv.union((s, e), (s + 7, e + 7)), args.repeat)
    out.append(("tracekit.intervals", f"union of two sets of {args.n:,}", t_union))
    t_q, measured = best_of(lambda: iv.measure_in_windows((s, e), ws, we), args.repeat)
    out.append(("tracekit.intervals", f"{args.queries:,} overlap queries (measure_in_windows)", t_q))
    try:
        import intervaltree
    except ImportError:
        print("intervaltree not installed: skipped (pip install intervaltree)")
        return out
    pairs = list(zip(s.tolist(), e.tolist()))
    t_build, tree = best_of(lambda: intervaltree.IntervalTree.from_tuples(pairs), 1)
    out.append(("intervaltree", f"build from {args.n:,}", t_build))

    def merged():
        t = intervaltree.IntervalTree.from_tuples(pairs)
        t.merge_overlaps(strict=False)
        return t

    t_merge, mtree = best_of(merged, 1)
    out.append(("intervaltree", f"build + merge_overlaps (the union) of {args.n:,}", t_merge))
    got = sorted((iv_.begin, iv_.end) for iv_ in mtree)
    assert [g[0] for g in got] == norm[0].tolist() and [g[1] for g in got] == norm[1].tolist(), "union differs"

    def queries():
        res = np.zeros(args.queries, dtype=np.int64)
        for i, (a, b) in enumerate(zip(ws.tolist(), we.tolist())):
            res[i] = sum(min(b, x.end) - max(a, x.begin) for x in mtree.overlap(a, b))
        return res

    t_tq, tq = best_of(queries, 1)
    out.append(("intervaltree", f"{args.queries:,} overlap queries on the merged tree", t_tq))
    assert (tq == measured).all(), "overlap totals differ"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the JSON table (default 10^6)")
    ap.add_argument("--n", type=int, default=1_000_000, help="intervals (default 10^6)")
    ap.add_argument("--queries", type=int, default=10_000, help="overlap queries (default 10^4)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"numpy {np.__version__}; best of {args.repeat} (intervaltree rows: one run)"
    )
    enc = encode_rows(args)
    ref = enc[0][1]
    width = max(len(r[0]) for r in enc)
    print(f"\nJSON encoding of a {args.rows:,}-row table (the --format json envelope)")
    print(f"{'encoder':<{width}}  {'seconds':>8}  {'MB':>7}  {'vs json':>8}")
    for label, secs, size in enc:
        print(f"{label:<{width}}  {secs:8.3f}  {size / 1e6:7.1f}  {ref / secs:7.2f}x")
    work = interval_work(args)
    width = max(len(r[1]) for r in work)
    print(f"\ninterval work on {args.n:,} random int64 ns intervals")
    print(f"{'library':<18}  {'operation':<{width}}  {'seconds':>8}")
    for lib, op, secs in work:
        print(f"{lib:<18}  {op:<{width}}  {secs:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
