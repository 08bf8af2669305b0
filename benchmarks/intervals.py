"""Micro-benchmark for tracekit.intervals.

Usage::

    python benchmarks/intervals.py [--n 1000000] [--windows 10000] [--repeat 3] [--seed 0]

Builds seeded random int64 nanosecond intervals (roughly trace-like: ~1 s span,
mean length = mean spacing, so about 63% coverage with many overlaps) and prints the best-of-``repeat`` wall time per operation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

import numpy as np

try:
    from tracekit import intervals as iv
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tracekit import intervals as iv


def random_intervals(rng: np.random.Generator, n: int, span_ns: int) -> tuple[np.ndarray, np.ndarray]:
    base = 1_700_000_000_000_000_000
    starts = base + rng.integers(0, span_ns, size=n, dtype=np.int64)
    lengths = rng.integers(1, 2 * span_ns // max(n, 1) + 2, size=n, dtype=np.int64)
    return starts, starts + lengths


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best = float("inf")
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def describe(name: str, result: Any) -> str:
    if isinstance(result, tuple):
        unit = "boundaries" if name.startswith("coverage_count") else "intervals"
        return f"{result[0].size:,} {unit}"
    if isinstance(result, np.ndarray):
        return f"{result.size:,} values"
    return str(result)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="intervals per set")
    ap.add_argument("--windows", type=int, default=10_000, help="windows for measure_in_windows")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    span = 1_000_000_000  # 1 s of nanoseconds
    a = random_intervals(rng, args.n, span)
    b = random_intervals(rng, args.n, span)
    na = iv.normalize(*a)
    nb = iv.normalize(*b)
    base = int(a[0].min())
    ws = base + rng.integers(0, span, size=args.windows, dtype=np.int64)
    we = ws + rng.integers(1, span // 100, size=args.windows, dtype=np.int64)

    ops: list[tuple[str, Callable[[], Any]]] = [
        ("normalize (raw 1e6)", lambda: iv.normalize(*a)),
        ("union (raw 1e6 + raw 1e6)", lambda: iv.union(a, b)),
        ("union (normalized + normalized)", lambda: iv.union(na, nb)),
        ("intersect (raw, raw)", lambda: iv.intersect(a, b)),
        ("intersect (normalized, normalized)", lambda: iv.intersect(na, nb)),
        ("subtract (raw, raw)", lambda: iv.subtract(a, b)),
        ("subtract (normalized, normalized)", lambda: iv.subtract(na, nb)),
        (f"measure_in_windows ({args.windows:,} win, raw)", lambda: iv.measure_in_windows(a, ws, we)),
        (f"measure_in_windows ({args.windows:,} win, norm)", lambda: iv.measure_in_windows(na, ws, we)),
        ("coverage_count (raw 1e6)", lambda: iv.coverage_count(*a)),
    ]

    print(
        f"tracekit.intervals benchmark: n={args.n:,} intervals/set, seed={args.seed}, "
        f"best of {args.repeat}, numpy {np.__version__}"
    )
    print(f"normalized sizes: a -> {na[0].size:,}, b -> {nb[0].size:,}")
    width = max(len(name) for name, _ in ops)
    print(f"{'operation':<{width}}  {'seconds':>8}  result")
    print(f"{'-' * width}  {'-' * 8}  {'-' * 20}")
    for name, fn in ops:
        secs, result = best_of(fn, args.repeat)
        print(f"{name:<{width}}  {secs:8.4f}  {describe(name, result)}")


if __name__ == "__main__":
    main()
