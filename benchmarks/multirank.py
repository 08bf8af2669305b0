"""Every rank of a run at real size (issue 28): `tracekit imbalance` with `--jobs 2` and on a Dask LocalCluster of
two process workers, against the cold ingest of the same files alone (two processes, each file loaded once).

    python benchmarks/multirank.py --run DIR            # an existing run (the rank files of one run)
    python benchmarks/multirank.py --mb 300 --ranks 16  # generate one (fixtures/synth.py ranks, dp_attn_deepep16)

    python benchmarks/multirank.py --run DIR --reduce-to R.pkl  # each rank reduced once (2 processes), kept
    python benchmarks/multirank.py --parent R.pkl               # the parent's part alone, from those reductions
    python benchmarks/multirank.py --run DIR --tail             # the parent's steps after the last result, timed

``--tail`` runs ``imbalance --jobs 2`` once with time stamps (stderr) on the parent's steps after the last worker's
result: the pool's shutdown, the alignment and attribution, the document, the exit.

``--parent`` times what the parent does once the workers are done — align, attribute, write the JSON (to
/dev/null) — in a fresh process (its wall, CPU and peak RSS besides the reductions it loads), without re-ingesting
the run: the parent's share, measured in seconds rather than minutes.

Each row runs in a fresh process tree, sampled every 20 ms (psutil) for the peak RSS of the parent and of each
worker; wall time is the tree's, and "after workers" the part of it after the last worker process was seen (what the
parent does alone at the end: align, attribute, the document, exit). A bare worker (the interpreter and every import a
worker makes, reducing the 5 kB bundled sample) is measured in the same rounds: a worker's peak net of it is what its
rank costs. The Dask row is also told against a Dask worker's peak on the same 16 tiny ranks (the floor the --jobs 2
row uses), and its wall apart: imports, cluster start, the bare-worker probe, the analysis, cluster close. Issue 40's
targets, printed beside the rows: imbalance --jobs 2 wall ≤ 1.15 × the ingest alone, on Dask ≤ 1.3 ×, a worker's peak
net of the bare worker ≤ 1.5 × its rank's unzipped JSON (issue 28's: the parent ≤ 0.5 GB).
The machine's fresh-page cost is measured before each round and after the last. Prints a Markdown table; ``--out
FILE`` writes the JSON too. The measured runs and what changed between them: benchmarks/README.md ("Every rank of a
run").
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest as B  # noqa: E402  (the ingest benchmark's fresh-page probe)

ROOT = Path(__file__).resolve().parents[1]

INGEST = """
import sys, tracekit
from concurrent.futures import ProcessPoolExecutor
def one(p):
    tracekit.load(p, cache=False)
    return 0
files = sys.argv[1:]
with ProcessPoolExecutor(2) as pool:
    list(pool.map(one, files))
"""

DASK = """
import sys, time
t_begin = time.perf_counter()
import tracekit
from dask.distributed import Client, LocalCluster
t_imports = time.perf_counter()
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, Client(lc) as c:
    print("cluster_start_s", time.perf_counter() - t_imports, file=sys.stderr)
    def bare(sample):  # a worker's floor: its interpreter, Dask's and every import a reduction makes
        import psutil
        from tracekit.analyses.fleet.multirank import reduce_point
        from tracekit.analyses.fleet.multirank.mapper import MapOptions
        reduce_point(sample, MapOptions(cache=False))
        return psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    floors = c.run(bare, sys.argv[2])
    print("bare_worker_mb", max(floors.values()) / 1e6, file=sys.stderr)
    print("bare_probe_s", time.perf_counter() - t0, file=sys.stderr)
    t0 = time.perf_counter()
    r = tracekit.imbalance(sys.argv[1], dask=c, cache=False)
    t_closing = time.perf_counter()
    print("analysis_s", t_closing - t0, r.summary["ranks"], r.summary["steps"], file=sys.stderr)
print("cluster_close_s", time.perf_counter() - t_closing, file=sys.stderr)
print("imports_s", t_imports - t_begin, file=sys.stderr)
"""


PARENT = """
import os, pickle, resource, sys, time
args = list(pickle.load(open(sys.argv[1], "rb")))
from tracekit.analyses.fleet.multirank import imbalance_of_run
from tracekit.result import iter_json
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
c, w = time.process_time(), time.perf_counter()
# popped into the call, as tracekit.imbalance passes the workers' list: the analysis holds the only reference
r = imbalance_of_run(args.pop(0), args.pop(0))
ca, wa = time.process_time() - c, time.perf_counter() - w
size = 0
with open(os.devnull, "w") as f:
    for piece in iter_json(r):
        size += f.write(piece)
import tracekit
print(f"tracekit {os.path.dirname(tracekit.__file__)} analysis_s {wa:.2f} analysis_cpu_s {ca:.2f} json_s {time.perf_counter() - w - wa:.2f} json_mb {size / 1e6:.0f}"
      f" cpu_s {time.process_time() - c:.2f} rss_with_reductions_mb {rss0:.0f}", file=sys.stderr)
"""

TAIL = """
import os, sys, time
t0 = time.perf_counter()
def say(what):
    print("TAIL", f"{time.perf_counter() - t0:.4f}", what, file=sys.stderr, flush=True)
import concurrent.futures.process as cfp
from tracekit.analyses.fleet.multirank import api
from tracekit.cli import main, options
def timed(owner, name, label):
    inner = getattr(owner, name)
    def wrapper(*args, **kwargs):
        say(label + " begins")
        try:
            return inner(*args, **kwargs)
        finally:
            say(label + " ends")
    setattr(owner, name, wrapper)
timed(cfp.ProcessPoolExecutor, "shutdown", "pool shutdown")
timed(api.ArrivingReductions, "result", "align and attribute")
timed(options.Output, "write", "document")
add = api.ArrivingReductions.add
def arrived(self, index, res):
    say("result")
    return add(self, index, res)
api.ArrivingReductions.add = arrived
leave = os._exit
def exit_now(code):
    if os.getpid() == pid:
        say("exit")
    leave(code)
pid = os.getpid()
os._exit = exit_now
sys.argv[0] = "tracekit"
main()
"""
TAIL_STEPS = ("pool shutdown", "align and attribute", "document")


def tail_only(run: Path) -> None:
    """``--tail``: ``imbalance --jobs 2`` once, with the parent's time stamps after the last worker's result."""
    cmd = [
        sys.executable,
        "-c",
        TAIL,
        "imbalance",
        str(run),
        "--jobs",
        "2",
        "--no-cache",
        "-f",
        "json",
        "-o",
        os.devnull,
    ]
    row = measure(cmd, "imbalance --jobs 2, time-stamped")
    if row["wall_s"] is None:
        raise SystemExit("the time-stamped run failed: stderr above says why")
    marks: dict[str, float] = {}
    results = []
    for line in row["stderr_tail"].splitlines():
        if line.startswith("TAIL "):
            _, t, what = line.split(" ", 2)
            if what == "result":
                results.append(float(t))
            else:
                marks[what] = float(t)
    last = max(results)
    steps = "; ".join(f"{k} {marks[k + ' ends'] - marks[k + ' begins']:.3f} s" for k in TAIL_STEPS)
    print(
        f"wall {row['wall_s']:.2f} s; {len(results)} results, the first at {min(results):.2f} s, the last at"
        f" {last:.2f} s; after it: {steps}; exit at {marks['exit'] - last:.3f} s after the last result"
    )


BARE = """
import sys
from tracekit.analyses.fleet.multirank import reduce_point
from tracekit.analyses.fleet.multirank.mapper import MapOptions
reduce_point(sys.argv[1], MapOptions(cache=False))  # every import a worker makes; the sample's tables are tiny
"""
SAMPLE = ROOT / "tracekit" / "data" / "samples" / "decode_sample.json.gz"
DASK_PARTS = {  # what the Dask row's process says of the rest of its wall (stderr), and in which words
    "imports_s": "Python's start aside, importing tracekit and Dask",
    "cluster_start_s": "starting the LocalCluster",
    "bare_probe_s": "the bare-worker probe",
    "cluster_close_s": "closing the cluster",
}
TARGETS = {"imbalance --jobs 2": 1.15, "imbalance, Dask LocalCluster (2 processes)": 1.3}  # × the ingest (issue 40)
WORKER_NET_TARGET = 1.5  # a worker's peak net of the bare worker, × its rank's JSON (issue 40)

REDUCE = """
import pickle, sys
from tracekit.analyses.fleet.multirank import plan_run, reduce_point
from tracekit.fan_out import map_points
plan = plan_run(sys.argv[2], cache=False)
results = map_points(reduce_point, [str(f) for _, f in plan.files], plan.opts, jobs=2)
with open(sys.argv[1], "xb") as f:  # never over a file that is there
    pickle.dump((plan, results), f)
"""


def parent_only(reductions: Path) -> None:
    """The parent's part alone (``--parent``): one fresh process, its wall, CPU and peak RSS."""
    row = measure([sys.executable, "-c", PARENT, str(reductions)], "parent alone (from the reductions)")
    if row["wall_s"] is None:
        raise SystemExit("the parent row failed: stderr above says why")
    print(
        f"{row['row']}: wall {row['wall_s']:.1f} s, peak RSS {row['parent_peak_mb']:,.0f} MB;"
        f" {row['stderr_tail'].strip()}"
    )


def unzipped_size(path: Path) -> int:
    """A .gz file's ISIZE trailer (exact below 4 GiB), else the file's size."""
    if path.suffix == ".gz":
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return struct.unpack("<I", f.read(4))[0]
    return path.stat().st_size


def measure(cmd: list[str], label: str) -> dict:
    """Wall time and peak RSS of the parent and of each child of one command's process tree."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    peaks: dict[int, int] = {}
    trees: dict[int, int] = {}  # a direct child with its own children (a worker and its decode helper), summed
    last_child = None  # when a worker (any child) was last seen alive
    while proc.poll() is None:
        try:
            kids = ps.children(recursive=True)
            if kids:
                last_child = time.perf_counter() - t0
            now: dict[int, int] = {}
            for p in [ps, *kids]:
                try:
                    now[p.pid] = p.memory_info().rss
                    peaks[p.pid] = max(peaks.get(p.pid, 0), now[p.pid])
                except psutil.Error:
                    pass
            for k in ps.children():
                try:
                    tot = now.get(k.pid, 0) + sum(now.get(d.pid, 0) for d in k.children(recursive=True))
                except psutil.Error:
                    continue
                trees[k.pid] = max(trees.get(k.pid, 0), tot)
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    err = proc.stderr.read()
    if proc.returncode:  # said in the table and on stderr; the other rows still run
        print(f"{label} failed (exit {proc.returncode}): {err[-3000:]}", file=sys.stderr)
        return {"row": label, "wall_s": None, "failed": err[-3000:]}
    parent = peaks.pop(proc.pid, 0)
    return {
        "row": label,
        "wall_s": wall,
        "parent_peak_mb": parent / 1e6,
        "worker_peak_mb": max(peaks.values(), default=0) / 1e6,
        "worker_tree_peak_mb": max(trees.values(), default=0) / 1e6,
        "after_workers_s": None if last_child is None else wall - last_child,
        "stderr_tail": err[-2000:],
    }


def _best(runs: list[dict]) -> dict:
    """One row from its runs: the best wall, the largest peaks (a failed run fails the row)."""
    bad = [r for r in runs if r["wall_s"] is None]
    if bad:
        return bad[0]
    best = dict(min(runs, key=lambda r: r["wall_s"]))
    tails = [r["after_workers_s"] for r in runs if r.get("after_workers_s") is not None]
    best.update(
        after_workers_s_all=tails,
        parent_peak_mb=max(r["parent_peak_mb"] for r in runs),
        worker_peak_mb=max(r["worker_peak_mb"] for r in runs),
        worker_tree_peak_mb=max(r["worker_tree_peak_mb"] for r in runs),
        walls_s=[r["wall_s"] for r in runs],
    )
    return best


FLOOR_ROW = "imbalance --jobs 2 on 16 ranks of ~0.1 MB (a worker's floor)"
DASK_FLOOR_ROW = "imbalance, Dask LocalCluster on 16 ranks of ~0.1 MB (a Dask worker's floor)"


def _floor_run(n: int) -> Path:
    """A run of ``n`` tiny ranks (2 steps of 2 layers: ~0.1 MB each), generated once: the floor of a worker."""
    out = ROOT / "benchmarks" / "out" / f"run-{n}-floor"
    if not out.exists():
        sys.path.insert(0, str(ROOT))
        from fixtures.synthlib import write_run

        preset = "dp_attn_deepep16" if n > 8 else "dp_attn_deepep8"
        write_run(preset, out, truth_path=out.with_suffix(".truth.json"), ranks=n, steps=2, layers=2)
    return out


def _verdict(ratio: float, target: float | None) -> str:
    if target is None:
        return ""
    return f"≤ {target:.2f}: " + ("met" if ratio <= target else f"missed by {100 * (ratio / target - 1):.0f} %")


def _net(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.2f} ({'met' if x <= WORKER_NET_TARGET else 'missed'}: ≤ {WORKER_NET_TARGET})"


def _said(run: dict, key: str) -> float | None:
    """A number a row's process printed on stderr as ``KEY VALUE …``."""
    for line in (run.get("stderr_tail") or "").splitlines():
        if line.startswith(key + " "):
            return float(line.split()[1])
    return None


def _dask_floor(runs: list[dict]) -> float | None:
    """The bare Dask worker's RSS the Dask row printed (MB), largest over its runs."""
    return max((v for v in (_said(r, "bare_worker_mb") for r in runs) if v is not None), default=None)


def _round_ratios(runs: list[list[dict]]) -> list[list[float]]:
    """Each row's wall ÷ the ingest's of the same round (the two ran within seconds of each other: the ratio a slow
    spell of the machine moves least)."""
    out = []
    for got in runs:
        out.append(
            [
                r["wall_s"] / b["wall_s"]
                for r, b in zip(got, runs[0])
                if r["wall_s"] is not None and b["wall_s"] is not None
            ]
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="a run directory of rank files (default: generate one)")
    ap.add_argument("--mb", type=int, default=300, help="MB of JSON per rank when generating (issue 40's size: 300)")
    ap.add_argument("--ranks", type=int, default=16, choices=(8, 16))
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds: round i runs every row once, in order; each row's"
        " best wall and largest peaks are shown (default 1)",
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--reduce-to",
        type=Path,
        help="reduce each rank of --run once and keep the tables in this (new) pickle file, for --parent",
    )
    ap.add_argument("--parent", type=Path, help="time the parent's part alone, from a --reduce-to pickle")
    ap.add_argument(
        "--tail",
        action="store_true",
        help="with --run: imbalance --jobs 2 once, the parent's steps after the last worker's result time-stamped",
    )
    a = ap.parse_args()
    if a.parent:
        return parent_only(a.parent)
    if a.tail:
        if a.run is None:
            raise SystemExit("--tail needs --run DIR")
        return tail_only(a.run)
    if a.reduce_to:
        if a.run is None:
            raise SystemExit("--reduce-to needs --run DIR")
        if a.reduce_to.exists():
            raise SystemExit(f"{a.reduce_to} is there already: give a new file name")
        subprocess.run([sys.executable, "-c", REDUCE, str(a.reduce_to), str(a.run)], check=True)
        return None
    run = a.run
    if run is None:
        run = ROOT / "benchmarks" / "out" / f"run-{a.ranks}x{a.mb}mb"
        if not run.exists():
            preset = "dp_attn_deepep16" if a.ranks == 16 else "dp_attn_deepep8"
            subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "fixtures" / "synth.py"),
                    "ranks",
                    "--preset",
                    preset,
                    "--out",
                    str(run),
                    "--layers",
                    "61",
                    "--mb",
                    str(a.mb),
                    "--truth",
                    str(run.with_suffix(".truth.json")),
                ],
                check=True,
            )
    # the rank files (tracekit's own rule); a file that names no rank (a truth.json beside them) is refused: imbalance
    # would read it too, only to leave it out, and the ingest row would not
    from tracekit.analyses.fleet.multirank.discover import find_ranks

    ranks, _ = find_ranks(run)
    strays = [str(f) for rf in ranks if rf.rank is None for f in rf.files]
    if strays:
        raise SystemExit(
            f"{run} holds files that name no rank ({', '.join(strays[:3])}): give a directory of the rank"
            " files alone (links to them will do)"
        )
    files = [f for rf in ranks for f in rf.files]
    biggest = max(unzipped_size(f) for f in files)
    total = sum(unzipped_size(f) for f in files)
    load_before = os.getloadavg()[0]  # the machine's 1-minute load: timings on a busy machine say little
    cli = [sys.executable, "-c", "import sys; from tracekit.cli import main; sys.argv[0] = 'tracekit'; main()"]
    specs = [
        ([sys.executable, "-c", INGEST, *map(str, files)], "cold ingest alone (2 processes)"),
        (
            [*cli, "imbalance", str(run), "--jobs", "2", "--no-cache", "-f", "json", "-o", os.devnull],
            "imbalance --jobs 2",
        ),
    ]
    if not a.skip_dask:
        specs.append(
            ([sys.executable, "-c", DASK, str(run), str(SAMPLE)], "imbalance, Dask LocalCluster (2 processes)")
        )
    floor_run = _floor_run(len(files))
    if not a.skip_dask:  # a Dask worker's floor as the --jobs 2 row's: its peak over the same 16 tiny ranks
        specs.append(([sys.executable, "-c", DASK, str(floor_run), str(SAMPLE)], DASK_FLOOR_ROW))
    specs.append(
        (
            [*cli, "imbalance", str(floor_run), "--jobs", "2", "--no-cache", "-f", "json", "-o", os.devnull],
            FLOOR_ROW,
        )
    )
    specs.append(([sys.executable, "-c", BARE, str(SAMPLE)], "bare worker (interpreter and imports)"))
    touch = []  # the machine's fresh-page cost before each round and after the last (ingest.first_touch_us)
    runs: list[list[dict]] = [[] for _ in specs]
    for _ in range(max(a.repeat, 1)):  # in rounds: a slow spell of the machine touches every row alike
        touch.append(B.first_touch_us())
        for got, (cmd, label) in zip(runs, specs):
            got.append(measure(cmd, label))
    touch.append(B.first_touch_us())
    rows = [_best(got) for got in runs]
    bare = rows.pop()
    bare_mb = max((r["parent_peak_mb"] for r in runs[-1] if r["wall_s"] is not None), default=None)
    floor = rows.pop()
    floor_mb = floor["worker_peak_mb"] if floor["wall_s"] is not None else None
    dask_floor = None if a.skip_dask else rows.pop()
    dask_floor_mb = dask_floor["worker_peak_mb"] if dask_floor and dask_floor["wall_s"] is not None else None
    ratios = _round_ratios(runs[: len(rows)])
    base = rows[0]["wall_s"]
    if base is None:
        raise SystemExit("the cold ingest row failed: nothing to compare with")
    load_after = os.getloadavg()[0]
    print(
        f"{len(files)} rank files, {total / 1e6:,.0f} MB of JSON in all, the largest {biggest / 1e6:,.0f} MB"
        f" (gzipped {sum(f.stat().st_size for f in files) / 1e6:,.0f} MB); load average {load_before:.2f} before,"
        f" {load_after:.2f} after; best of {max(a.repeat, 1)} round(s); fresh-page cost"
        f" {min(x for x in touch if x is not None) if any(x is not None for x in touch) else float('nan'):.1f}-"
        f"{max((x for x in touch if x is not None), default=float('nan')):.1f} µs per 4 KiB page"
        " (benchmarks/ingest.py: first_touch_us)\n"
    )
    print(
        "| row | wall s | × ingest (best) | × ingest, each round | target | after workers s | parent peak MB |"
        " worker peak MB (process; with its decode helper) | net of the bare worker ÷ rank (process; with helper) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for i, r in enumerate(rows):
        if r["wall_s"] is None:
            print(f"| {r['row']} | failed (stderr has why) | | | | | | | |")
            continue
        r["vs_ingest"] = r["wall_s"] / base
        r["vs_ingest_rounds"] = ratios[i]
        r["worker_vs_rank"] = r["worker_peak_mb"] * 1e6 / biggest
        # each layout's own floor: a Dask worker's (its interpreter and Dask's imports, measured in it before the
        # run), a --jobs 2 worker's (the same command on 16 ranks of ~0.1 MB), a fresh process's (the ingest's)
        own = _dask_floor(runs[i]) or (floor_mb if r["row"] == "imbalance --jobs 2" else bare_mb)
        r["bare_worker_mb"] = own
        r["worker_net_vs_rank"] = None if own is None else (r["worker_peak_mb"] - own) * 1e6 / biggest
        # the helper is forked from its worker: its resident pages count in both, so the sum is an upper bound
        r["worker_tree_net_vs_rank"] = None if own is None else (r["worker_tree_peak_mb"] - own) * 1e6 / biggest
        tgt = TARGETS.get(r["row"])
        r["target"] = tgt
        r["met"] = None if tgt is None else bool(r["vs_ingest"] <= tgt)
        print(
            f"| {r['row']} | {r['wall_s']:.1f} | {r['vs_ingest']:.2f} |"
            f" {', '.join(f'{x:.2f}' for x in ratios[i]) or '—'} | {_verdict(r['vs_ingest'], tgt)} |"
            f" {', '.join(f'{x:.1f}' for x in r.get('after_workers_s_all', []))} | {r['parent_peak_mb']:,.0f} |"
            f" {r['worker_peak_mb']:,.0f}; {r['worker_tree_peak_mb']:,.0f} |"
            f" {_net(r['worker_net_vs_rank'])}; {_net(r['worker_tree_net_vs_rank'])} |"
        )
    for i, r in enumerate(rows):
        alone = [_said(x, "analysis_s") for x in runs[i]]
        if r["wall_s"] is not None and any(v is not None for v in alone):
            r["analysis_s_all"] = alone
            per = [None if v is None or b["wall_s"] is None else v / b["wall_s"] for v, b in zip(alone, runs[0])]
            r["analysis_vs_ingest_rounds"] = per
            print(
                f"\n{r['row']}: the analysis alone (the cluster started and closed outside it)"
                f" {', '.join('—' if v is None else f'{v:.1f}' for v in alone)} s a round, ×"
                f" {', '.join('—' if v is None else f'{v:.2f}' for v in per)} the ingest of the same round"
            )
            if dask_floor_mb is not None:
                r["worker_net_vs_rank_tiny_run_floor"] = (r["worker_peak_mb"] - dask_floor_mb) * 1e6 / biggest
                print(
                    f"  its worker's peak net of a Dask worker's peak on 16 ranks of ~0.1 MB ({dask_floor_mb:,.0f} MB,"
                    " the floor the --jobs 2 row is measured against):"
                    f" {_net(r['worker_net_vs_rank_tiny_run_floor'])} × the rank"
                )
            parts = {k: [_said(x, k) for x in runs[i]] for k in DASK_PARTS}
            r["dask_parts_s"] = parts
            print(
                "  the rest of its wall, a round each: "
                + "; ".join(
                    f"{words} {', '.join('—' if v is None else f'{v:.1f}' for v in parts[k])} s"
                    for k, words in DASK_PARTS.items()
                )
            )
    if floor_mb is not None:
        print(f"\n{FLOOR_ROW}: worker peak {floor_mb:,.0f} MB, wall {floor['wall_s']:.1f} s")
    if bare_mb is not None:
        print(
            f"\nbare worker: {bare_mb:,.0f} MB peak, {bare['wall_s']:.1f} s (the interpreter and a worker's imports,"
            " reducing the 5 kB bundled sample)"
        )
    if a.out:
        a.out.write_text(
            json.dumps(
                {
                    "run": str(run),
                    "files": len(files),
                    "json_mb": total / 1e6,
                    "largest_mb": biggest / 1e6,
                    "load_average": [load_before, load_after],
                    "first_touch_us_per_page": touch,
                    "repeat": max(a.repeat, 1),
                    "bare_worker": bare,
                    "floor_run": floor,
                    "dask_floor_run": dask_floor,
                    "rows": rows,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
