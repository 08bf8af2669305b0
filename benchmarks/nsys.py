"""Nsight Systems SQLite ingest (issue 42): ``tracekit.load`` of an nsys export against ``sqlite3`` dumping the same
tables, and against nsys-ai 0.3.0 building its cache where it is installed (a separate venv: ``--nsys-ai PYTHON``).

The corpus's real exports are small windows (2.7 MB); the benchmark database is the "before" export's event tables
stacked ``--copies`` times (each copy shifted past the last in time, with its own correlation ids), so the rows and
names are real and the size is a profile's. Each row is timed in a fresh process (best of ``--repeat``); the machine's
cost of a fresh page is printed beside the rows (benchmarks/ingest.py's probe), since it moves every number.

    python benchmarks/nsys.py --copies 40 --repeat 3 [--nsys-ai /tmp/nsysai-venv/bin/python]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import first_touch_us  # noqa: E402  the fresh-page probe the other benchmarks print

SOURCE = Path("/work/shared/corpus/nsys-ai/tests/fixtures/mfu_2gpu_before.sqlite")
TABLES = [
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
]


def stacked(source: Path, copies: int, out: Path) -> Path:
    shutil.copyfile(source, out)
    con = sqlite3.connect(out)
    span = con.execute("SELECT max(end) - min(start) + 1000000 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    for t in TABLES:
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({t})")]
        rows = con.execute(f"SELECT * FROM {t}").fetchall()
        si, ei = cols.index("start"), cols.index("end")
        ci = cols.index("correlationId") if "correlationId" in cols else None
        for k in range(1, copies):
            shifted = []
            for r in rows:
                r = list(r)
                r[si] += k * span
                r[ei] = r[ei] + k * span if r[ei] is not None else None
                if ci is not None and r[ci] is not None:
                    r[ci] += k * 10_000_000
                shifted.append(r)
            con.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(cols))})", shifted)
    con.commit()
    con.execute("VACUUM")
    con.close()
    return out


def timed(cmd: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t)
    return best


LOAD = """
import sys, time
import numpy, pandas, pyarrow, tracekit  # imports are not the load
from tracekit.ingest import load
t = time.perf_counter(); load(sys.argv[1], cache=False); print(time.perf_counter() - t)
"""
IMPORTS = "import numpy, pandas, pyarrow, tracekit, tracekit.ingest"
NSYS_AI = """
import sys, time, tempfile
t = time.perf_counter()
from nsys_ai import profile as p  # noqa
print(time.perf_counter() - t)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nsys-ai", default=None, help="a Python with nsys-ai 0.3.0 installed")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = stacked(SOURCE, a.copies, Path(tmp) / "stacked.sqlite")
        mb = db.stat().st_size / 1e6
        rows = (
            sqlite3.connect(db)
            .execute("SELECT " + " + ".join(f"(SELECT count(*) FROM {t})" for t in TABLES))
            .fetchone()[0]
        )
        print(f"database: {mb:.1f} MB, {rows:,} event rows ({a.copies} copies of {SOURCE.name})")
        print(f"fresh-page cost before: {first_touch_us()} µs per 4 KiB page")
        imp = timed([sys.executable, "-c", IMPORTS], a.repeat)
        best = float("inf")
        for _ in range(a.repeat):
            out = subprocess.run([sys.executable, "-c", LOAD, str(db)], capture_output=True, text=True, check=True)
            best = min(best, float(out.stdout.strip().splitlines()[-1]))
        print(f"tracekit.load (no cache): {best:.3f} s, {mb / best:.0f} MB/s of database (imports apart: {imp:.2f} s)")
        dump = ["sqlite3", str(db)] + [f"SELECT * FROM {t};" for t in TABLES]
        if shutil.which("sqlite3"):
            d = timed(dump, a.repeat)
            print(f"sqlite3 CLI dumping the same tables to /dev/null: {d:.3f} s ({best / d:.2f}x tracekit's time)")
        if a.nsys_ai:
            cmd = [a.nsys_ai, "-m", "nsys_ai", "info", str(db)]
            try:
                n = timed(cmd, a.repeat)
                print(f"nsys-ai 0.3.0 `{' '.join(cmd[1:4])}` (builds its cache): {n:.3f} s ({n / best:.1f}x tracekit)")
            except subprocess.CalledProcessError as exc:
                print(f"nsys-ai 0.3.0 failed on the database: {exc}")
        print(f"fresh-page cost after: {first_touch_us()} µs per 4 KiB page")


if __name__ == "__main__":
    main()
