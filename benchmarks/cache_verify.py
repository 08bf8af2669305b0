"""What the cache's seal costs (issue 41): every entry is checked against a CRC-32 of its bytes on every read.

    python benchmarks/cache_verify.py [--trace PATH] [--mb 100] [--repeat 7] [--out benchmarks/out]

Without ``--trace`` a seeded Kineto-like trace (``benchmarks/make_trace.py``, ``--layout kineto``, gzipped) is
generated into ``--out`` and reused. Rows, each a fresh process, median and min of ``--repeat`` runs, interleaved
in rounds (the ingest benchmark's way, so a slow spell of the machine touches every row alike):

* ``report`` again (its Result and the trace cached): the CLI, ``-f json`` to /dev/null, with the seal checked
  (as shipped) and without (``tracekit.cache.integrity.sealed_length`` replaced by one that trusts the trailer);
* ``tracekit.load`` of the cached trace, with and without the check (the trace entry: ~130 bytes an event);
* the check alone on the trace entry's bytes, in this process: CRC-32 (ISA-L, what ships) and blake2b (hashlib),
  best of ``--repeat``.

Beside them, the machine's fresh-page cost (``ingest.first_touch_us``) at the start of each round and at the end:
the numbers are only comparable with it. benchmarks/README.md ("Checksummed caches") has the measured runs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest as B  # noqa: E402  (the ingest benchmark's fresh-page probe)

ROOT = Path(__file__).resolve().parents[1]

# the check switched off: the seal's length is trusted, its CRC not computed (a benchmark's patch, never shipped)
UNCHECKED = """
import tracekit.cache.integrity as i
i.sealed_length = lambda view: len(view) - i.TRAILER_SIZE
"""
REPORT = """
import sys
from tracekit.cli import main
sys.argv = ["tracekit", "report", sys.argv[1], "-f", "json", "-o", "/dev/null"]
main()
"""
LOAD = """
import sys, tracekit
t = tracekit.load(sys.argv[1])
assert t.report.from_cache, "the trace was not read from the cache"
"""


def _wall(code: str, trace: Path, env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code, str(trace)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - t


def _best(f, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out")
    a = ap.parse_args()
    trace = a.trace
    if trace is None:
        a.out.mkdir(parents=True, exist_ok=True)
        js = a.out / f"verify_{a.mb:g}mb.json"
        trace = js.with_suffix(".json.gz")
        if not trace.exists():
            subprocess.run(
                [sys.executable, str(ROOT / "benchmarks" / "make_trace.py"), str(js), "--mb", str(a.mb), "--gz"]
                + ["--layout", "kineto"],
                check=True,
            )
            os.replace(str(js) + ".gz", trace)
            js.unlink()
    cache = Path(tempfile.mkdtemp(prefix="tk-verify-"))
    env = {**os.environ, "TRACEKIT_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    _wall(REPORT, trace, env)  # the trace's entry and the Result's written
    from tracekit.cache import integrity
    from tracekit.cache.result_entries import entry_path
    from tracekit.cache.trace_entries import cache_path

    t_entry, r_entry = cache_path(trace, cache), entry_path(trace, "report", cache)
    rows = {"report, checked": (REPORT, ""), "report, unchecked": (REPORT, UNCHECKED)}
    rows |= {"load, checked": (LOAD, ""), "load, unchecked": (LOAD, UNCHECKED)}
    runs: dict[str, list[float]] = {k: [] for k in rows}
    touch = []
    for _ in range(a.repeat):
        touch.append(B.first_touch_us())
        for name, (code, patch) in rows.items():
            runs[name].append(_wall(patch + code, trace, env))
    touch.append(B.first_touch_us())
    data = t_entry.read_bytes()
    view = memoryview(data)[: len(data) - integrity.TRAILER_SIZE]
    crc = _best(lambda: integrity.sealed_length(data), a.repeat)
    blake = _best(lambda: hashlib.blake2b(view, digest_size=16).digest(), a.repeat)
    rdata = r_entry.read_bytes()
    rcrc = _best(lambda: integrity.sealed_length(rdata), a.repeat)
    mb = 1e6
    print(f"trace {trace} ({trace.stat().st_size / mb:.1f} MB); {a.repeat} runs a row, in rounds")
    print(f"trace entry {len(data) / mb:.1f} MB, result entry {len(rdata) / mb:.2f} MB")
    print("| row | median s | min s |")
    print("|---|---|---|")
    for name, ts in runs.items():
        print(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f} |")
    print(f"| CRC-32 (ISA-L) of the trace entry, in process | {crc:.4f} | {len(data) / crc / 1e9:.1f} GB/s |")
    print(f"| blake2b of the trace entry, in process | {blake:.4f} | {len(data) / blake / 1e9:.1f} GB/s |")
    print(f"| CRC-32 of the result entry, in process | {rcrc:.5f} | |")
    known = [t for t in touch if t is not None]
    if known:
        print(f"fresh-page cost during the run: {min(known):.1f}-{max(known):.1f} µs per 4 KiB page ({touch})")


if __name__ == "__main__":
    main()
