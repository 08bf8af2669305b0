"""Ingest benchmark: tracekit vs HolisticTraceAnalysis 0.5.0 vs gzip, on one big Kineto trace.

One command::

    python benchmarks/ingest.py [--trace PATH] [--mb 300] [--layout kineto] [--gz-level 9] [--out benchmarks/out]

Without ``--trace`` a seeded Kineto-like trace is generated (``benchmarks/make_trace.py``) into
the ``--out`` folder, with a gzip copy (level 9, what torch.profiler's ``.json.gz`` export writes) and a
zstd copy, and reused by later runs with the same options. Every measurement runs in its own child
process, so peak RSS is per process; see benchmarks/README.md for what each row means and how to read
the output.

This file is also the child: ``--child KIND`` runs one measurement and prints one JSON line.
It imports only the standard library at module level, so the HTA venv's python can run it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MARK = "@@INGEST-BENCH@@ "
HTA_VERSION = "0.5.0"
DEFAULT_HTA_VENV = HERE / ".venv-hta"
MB = 1_000_000  # MB/s and file sizes in MB use 10^6 bytes; RSS is in MiB (2^20 bytes)
MIB = 1 << 20

# The import baseline is literally `python -c 'import tracekit'`, plus a report of its own peak RSS.
IMPORT_BASELINE = (
    "import time; t0 = time.perf_counter()\n"
    "import tracekit\n"
    "import json, resource\n"
    "hwm = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
    f"print({MARK!r} + json.dumps({{'kind': 'import', 'import_s': time.perf_counter() - t0, "
    "'vmhwm_kib': hwm[0] if hwm else None, "
    "'self_maxrss_kib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
    "'tracekit_version': tracekit.__version__}))"
)

TARGETS = {  # issue 18
    "gz_speedup_vs_hta": (">=", 15.0, "x"),
    "gz_mb_s": (">=", 180.0, " MB/s"),
    "json_mb_s": (">=", 200.0, " MB/s"),
    "speedup_vs_hta": (">=", 10.0, "x"),
    "rss_over_size_gz": ("<=", 1.5, ""),
    "rss_over_size": ("<=", 1.5, ""),
    "rss_over_size_zst": ("<=", 1.5, ""),
    "rss_over_size_cli": ("<=", 1.5, ""),
    "cached_speedup": (">=", 20.0, "x"),  # the .json.gz: the file people have
    # issue 30: the whole answer at ingest speed (CLI processes, wall times)
    "report_vs_info": ("<=", 1.5, "x"),
    "report_cached_s": ("<=", 1.0, " s"),
    "version_s": ("<=", 0.2, " s"),
    "cli_info_vs_load": ("<=", 1.3, "x"),
    "rss_over_size_report": ("<=", 1.5, ""),
}


# ============================================================================================
# child side
# ============================================================================================
def _vmhwm_kib() -> int | None:
    """Peak RSS of this process image only (VmHWM is per address space, so it starts afresh at exec)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _child(kind: str, path: str, cache_dir: str | None) -> dict:
    out: dict = {"kind": kind, "pid": os.getpid()}
    t0 = time.perf_counter()
    if kind == "hta":
        import logging

        from hta.common.trace import parse_trace_file  # HolisticTraceAnalysis 0.5.0's single-file parser

        logging.getLogger("hta").setLevel(logging.ERROR)
        out["import_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        meta, df, _symbols = parse_trace_file(path)
        out["load_s"] = time.perf_counter() - t1
        out["rows"] = int(len(df))
        out["columns"] = int(df.shape[1])
        try:
            from importlib.metadata import version

            out["hta_version"] = version("HolisticTraceAnalysis")
        except Exception:  # noqa: BLE001
            out["hta_version"] = None
    elif kind.startswith("inflate-"):
        out.update(_inflate(kind[len("inflate-") :], path))
    elif kind == "orjson":
        out.update(_orjson_columns(path))
    else:
        try:
            import tracekit
        except ImportError:
            sys.path.insert(0, str(REPO))
            import tracekit
        # `import tracekit` is lazy (issue 30): what a load needs (numpy, pandas, msgspec, pyarrow) is imported on
        # first use. Import it here, so that load s is the load alone, as it was when `import tracekit` loaded it.
        import tracekit.cache.trace_entries  # noqa: F401

        out["import_s"] = time.perf_counter() - t0
        out["tracekit_version"] = getattr(tracekit, "__version__", None)
        if kind != "import":
            cache = kind in ("tracekit-cache-write", "tracekit-cached")
            t1 = time.perf_counter()
            tr = tracekit.load(path, cache=cache, cache_dir=cache_dir)
            out["load_s"] = time.perf_counter() - t1
            rep = tr.report
            out.update(
                rows=int(len(tr.events)),
                records_read=rep.records_read,
                events_kept=rep.events_kept,
                from_cache=bool(rep.from_cache),
                compression=rep.compression,
                text_bytes=rep.text_bytes,
                not_events=dict(rep.not_events),
                dropped=dict(rep.dropped),
                warnings=list(rep.warnings),
                salvaged=bool(rep.salvaged),
            )
            if cache_dir:
                out["cache_files"] = sorted(
                    [p.name, p.stat().st_size] for p in Path(cache_dir).iterdir() if p.is_file()
                )
    out["vmhwm_kib"] = _vmhwm_kib()
    out["self_maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


def _inflate(module: str, path: str) -> dict:
    """Decompress a .json.gz to nothing, streaming in 8 MiB blocks of text as tracekit's reader does."""
    t0 = time.perf_counter()
    if module == "rapidgzip":
        import rapidgzip

        n = 0
        with rapidgzip.open(path, parallelization=os.cpu_count() or 1) as fh:
            while True:
                b = fh.read(8 << 20)
                if not b:
                    break
                n += len(b)
        return {"load_s": time.perf_counter() - t0, "text_bytes": n}
    if module == "isal":
        from isal import isal_zlib as z
    elif module == "zlib-ng":
        from zlib_ng import zlib_ng as z
    else:
        import zlib as z
    n = 0
    with open(path, "rb") as fh:
        dec = z.decompressobj(16 + 15)
        while True:
            data = fh.read(1 << 20)
            if not data:
                break
            while data:
                n += len(dec.decompress(data, 8 << 20))
                if dec.eof:
                    rest = dec.unused_data
                    dec = z.decompressobj(16 + 15)
                    data = rest
                else:
                    data = dec.unconsumed_tail
    return {"load_s": time.perf_counter() - t0, "text_bytes": n}


def _orjson_columns(path: str) -> dict:
    """orjson where it would serve ingest: decode the whole document, then build the same raw columns
    tracekit builds (numpy columns of the kept events, names and categories factorised). ``ts`` comes out
    of orjson as a float64, which is not exact for epoch-scale microseconds; the row measures speed only."""
    import numpy as np
    import orjson

    t0 = time.perf_counter()
    with open(path, "rb") as fh:
        doc = orjson.loads(fh.read())
    decoded = time.perf_counter()
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    del doc
    kept = [e for e in evs if e.get("ph") in ("X", "i", "I") and "ts" in e]
    n_records = len(evs)
    del evs
    names: dict = {}
    cats: dict = {}
    cols = {
        "name": np.fromiter((names.setdefault(e.get("name", ""), len(names)) for e in kept), np.int32, len(kept)),
        "cat": np.fromiter((cats.setdefault(e.get("cat", ""), len(cats)) for e in kept), np.int32, len(kept)),
        "ts_ns": np.rint(np.fromiter((e["ts"] for e in kept), np.float64, len(kept)) * 1000).astype(np.int64),
        "dur_ns": np.rint(np.fromiter((e.get("dur", 0.0) for e in kept), np.float64, len(kept)) * 1000).astype(
            np.int64
        ),
    }
    for key in ("pid", "tid"):
        cols[key] = np.fromiter((v if isinstance(v := e.get(key), int) else -1 for e in kept), np.int64, len(kept))
    args = [e.get("args") or {} for e in kept]
    for key in ("device", "stream", "correlation", "External id", "bytes", "registers per thread", "shared memory"):
        cols[key] = np.fromiter((v if isinstance(v := a.get(key, -1), int) else -1 for a in args), np.int64, len(kept))
    for key in ("grid", "block"):
        cols[key] = np.array(
            [v if isinstance(v := a.get(key), list) and len(v) == 3 else (-1, -1, -1) for a in args], dtype=np.int64
        )
    order = np.argsort(cols["ts_ns"], kind="stable")
    cols = {k: v[order] for k, v in cols.items()}
    return {
        "load_s": time.perf_counter() - t0,
        "decode_s": decoded - t0,
        "records_read": n_records,
        "events_kept": len(kept),
        "rows": len(kept),
    }


# ============================================================================================
# parent side
# ============================================================================================
def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _run(
    cmd: list[str], *, env: dict | None = None, stdout_devnull: bool = False, timeout: float = 1800, tree: bool = False
) -> dict:
    """Run ``cmd`` as a child, timing it and reading its own rusage with wait4.

    ``tree``: sample the memory of the child's whole process tree (see :func:`_poll_memory`). That reads
    ``smaps_rollup``, which takes each process's mmap lock and costs the sampled processes about a tenth of
    their speed, so a run that samples the tree is a memory run: its times are not used."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL if stdout_devnull else out_f,
            stderr=err_f,
            stdin=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        polled: dict = {}
        stop = threading.Event()
        poller = threading.Thread(target=_poll_memory, args=(proc.pid, polled, stop, tree), daemon=True)
        poller.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
        finally:
            killer.cancel()
            stop.set()
            poller.join()
        timed_out = wall >= timeout
        proc.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
        out_f.seek(0)
        err_f.seek(0)
        stdout = out_f.read().decode(errors="replace")
        stderr = err_f.read().decode(errors="replace")
    res = {
        "cmd": cmd,
        "wall_s": wall,
        "rc": proc.returncode,
        "timed_out": timed_out,
        "wait4_maxrss_kib": ru.ru_maxrss,
        "polled_vmhwm_kib": polled.get("root_vmhwm_kib") or None,
        "tree_peak_kib": polled.get("tree_kib") or None,
        "max_procs": polled.get("max_procs"),
        "user_s": ru.ru_utime,
        "sys_s": ru.ru_stime,
    }
    child = None
    for line in stdout.splitlines():
        if line.startswith(MARK):
            child = json.loads(line[len(MARK) :])
    if child is not None:
        res["child"] = child
    if res["rc"] != 0 or timed_out or (child is None and not stdout_devnull):
        res["error"] = "timed out after %.0f s" % timeout if timed_out else f"exit code {res['rc']}"
        res["stderr_tail"] = stderr[-4000:]
    return res


POLL_S = 0.02


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (via /proc/<pid>/task/<tid>/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            pass
    return out


def _read_kib(path: str, key: str) -> int:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _poll_memory(pid: int, box: dict, stop: threading.Event, tree: bool = True) -> None:
    """Sample the child every POLL_S seconds until it exits; with ``tree``, its whole process tree.

    * root_vmhwm_kib: the child's own VmHWM (monotonic), for children that cannot report it
      themselves (gzip). wait4's ru_maxrss cannot serve: Linux carries the parent's RSS at fork
      time into the child's maxrss across exec.
    * tree_kib: the largest total memory of the tree seen in one sample. While the child is
      alone that is its VmRSS (cheap to read). While it has descendants (tracekit may fork a
      helper) it is the sum of their PSS from smaps_rollup, which splits the pages they still
      share instead of counting them twice. smaps_rollup is only read then, because reading it
      takes the target's mmap lock and would slow a big single process down.

    Without ``tree`` only the root's VmHWM and the process count are read (no mmap lock taken).
    """
    while not stop.is_set():
        pids = _tree(pid)
        box["max_procs"] = max(box.get("max_procs", 0), len(pids))
        status = f"/proc/{pid}/status"
        box["root_vmhwm_kib"] = max(box.get("root_vmhwm_kib", 0), _read_kib(status, "VmHWM:"))
        if tree:
            if len(pids) == 1:
                total = _read_kib(status, "VmRSS:")
            else:
                total = sum(_read_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)
            box["tree_kib"] = max(box.get("tree_kib", 0), total)
        stop.wait(POLL_S)


def _child_cmd(python: str, kind: str, path: str, cache_dir: str | None = None) -> list[str]:
    cmd = [python, str(Path(__file__).resolve()), "--child", kind, "--child-path", path]
    if cache_dir:
        cmd += ["--child-cache-dir", cache_dir]
    return cmd


def _peak_mib(res: dict) -> float:
    child = res.get("child") or {}
    kib = child.get("vmhwm_kib") or res.get("polled_vmhwm_kib") or res.get("wait4_maxrss_kib") or 0
    return kib / 1024.0


def _tree_mib(res: dict) -> float | None:
    kib = res.get("tree_peak_kib")
    return kib / 1024.0 if kib else None


def _run_logged(
    label: str,
    cmd: list[str],
    what: str,
    *,
    env: dict | None = None,
    stdout_devnull: bool = False,
    timeout: float = 1800,
    tree: bool = False,
) -> dict:
    _log(f"  {label}{f' ({what})' if what else ''} ...")
    res = _run(cmd, env=env, stdout_devnull=stdout_devnull, timeout=timeout, tree=tree)
    if "error" in res:
        _log(f"    FAILED: {res['error']}\n{res.get('stderr_tail', '')}")
        return res
    c = res.get("child") or {}
    load = f"load {c['load_s']:.2f} s, " if "load_s" in c else ""
    tree_mib = _tree_mib(res)
    _log(
        f"    {load}wall {res['wall_s']:.2f} s, peak RSS {_peak_mib(res):.0f} MiB"
        + (f", tree peak {tree_mib:.0f} MiB over {res.get('max_procs')} process(es)" if tree_mib else "")
    )
    return res


TOUCH_MIB = 512
TOUCH = f"""
import time, numpy as np
t = time.perf_counter()
a = np.ones({TOUCH_MIB} << 17)  # {TOUCH_MIB} MiB of float64, every page written once: fresh pages from the kernel
print((time.perf_counter() - t) / ({TOUCH_MIB} << 8) * 1e6)
"""
FIRST_TOUCH_US: list = []  # this run's fresh-page costs, one at the start of every round and one at the end


def first_touch_us(env: dict | None = None, timeout: float = 120) -> float | None:
    """This machine's cost of a fresh page right now: µs per 4 KiB page to allocate and write 512 MiB in a new
    process. On bare metal ~0.2-0.5 µs; on a VM whose host takes back the guest's free memory it can be 10-40 µs, and
    then a row's time is mostly page faults (a 300 MB trace's ingest touches ~0.4 GiB of fresh pages): every number
    of the run is only comparable with this one beside it."""
    try:
        out = subprocess.run([sys.executable, "-c", TOUCH], capture_output=True, text=True, env=env, timeout=timeout)
        return round(float(out.stdout.strip()), 2) if out.returncode == 0 else None
    except (subprocess.SubprocessError, ValueError):
        return None


def _measure_rounds(specs: list[dict], timeout: float) -> dict[str, dict]:
    """Run every row's timed runs in rounds (round i runs run i of every row, in the rows' order), then one
    memory run for each row that asks for it; return the rows by key.

    A slow spell of the machine (a noisy neighbour, the host reclaiming memory) then touches every row
    alike instead of the few measured during it. A row with one run (the cache writes, which the cached
    rows need first) runs in the first round; HTA and orjson (a run each, 10-30 s) in the middle one."""
    rounds = max((sp["repeat"] for sp in specs), default=0)
    runs: dict[str, list] = {sp["key"]: [] for sp in specs}
    for i in range(rounds):
        FIRST_TOUCH_US.append(first_touch_us())
        for sp in specs:
            rep, got = sp["repeat"], runs[sp["key"]]
            single_round = rounds // 2 if sp.get("middle") else 0
            if (rep == 1 and i != single_round) or (rep > 1 and i >= rep) or any("error" in r for r in got):
                continue
            got.append(
                _run_logged(
                    sp["label"],
                    sp["cmd"],
                    f"run {len(got) + 1}/{rep}" if rep > 1 else "",
                    env=sp["env"],
                    stdout_devnull=sp["stdout_devnull"],
                    timeout=timeout,
                )
            )
    FIRST_TOUCH_US.append(first_touch_us())
    _log(f"  fresh-page cost per round and at the end: {FIRST_TOUCH_US} µs per 4 KiB page")
    rows = {}
    for sp in specs:
        mem_runs = []
        if sp["memory_run"] and runs[sp["key"]] and not any("error" in r for r in runs[sp["key"]]):
            mem_runs.append(
                _run_logged(
                    sp["label"],
                    sp["cmd"],
                    "memory run, tree sampled, time not used",
                    env=sp["env"],
                    stdout_devnull=sp["stdout_devnull"],
                    timeout=timeout,
                    tree=True,
                )
            )
        rows[sp["key"]] = {**_summarise(sp["label"], runs[sp["key"]], mem_runs), **sp["extra"]}
    return rows


def _summarise(label: str, runs: list[dict], mem_runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    mem_ok = [r for r in mem_runs if "error" not in r]
    row: dict = {
        "label": label,
        "runs": runs,
        "memory_runs": mem_runs,
        "ok": bool(ok) and len(ok) == len(runs) and len(mem_ok) == len(mem_runs),
    }
    if ok:
        loads = [r["child"]["load_s"] for r in ok if "load_s" in (r.get("child") or {})]
        row["load_s"] = min(loads) if loads else None
        row["load_s_all"] = loads
        row["load_s_median"] = statistics.median(loads) if loads else None
        row["wall_s"] = min(r["wall_s"] for r in ok)
        row["wall_s_all"] = [r["wall_s"] for r in ok]
        row["wall_s_median"] = statistics.median(row["wall_s_all"])
        best = min(ok, key=lambda r: r["wall_s"])
        row["cpu_s"] = best["user_s"] + best["sys_s"]  # of the fastest run, whole process
        row["peak_rss_mib"] = max(_peak_mib(r) for r in ok + mem_ok)
        row["wait4_maxrss_mib"] = max(r["wait4_maxrss_kib"] for r in ok + mem_ok) / 1024.0
        trees = [_tree_mib(r) for r in mem_ok if _tree_mib(r)]
        row["tree_peak_mib"] = max(trees) if trees else None
        row["max_procs"] = max((r.get("max_procs") or 1) for r in ok + mem_ok)
        # the memory figure the RSS/size ratio uses: the larger of the exact own peak and the tree's
        row["mem_mib"] = max(row["peak_rss_mib"], row["tree_peak_mib"] or 0)
        row["rss_source"] = (
            "child VmHWM"
            if (ok[-1].get("child") or {}).get("vmhwm_kib")
            else "polled VmHWM"
            if ok[-1].get("polled_vmhwm_kib")
            else "wait4 ru_maxrss"
        )
        row["child"] = ok[-1].get("child")
    if not row["ok"]:
        failed = [r for r in runs + mem_runs if "error" in r] or runs[-1:]
        row["error"] = failed[0].get("error") if failed else "not run"
        row["stderr_tail"] = failed[0].get("stderr_tail") if failed else None
    return row


def _tracekit_fingerprint() -> dict:
    """sha1 over tracekit's source files, to tell which code a result belongs to (and whether it
    changed while the benchmark ran: other people edit the package in place)."""
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("tracekit")  # finds the package without importing it
    roots = list(spec.submodule_search_locations or []) if spec else []
    root = Path(roots[0]) if roots else REPO / "tracekit"
    h = hashlib.sha1()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".json", ".pyx", ".c"))
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes())
    latest = max((p.stat().st_mtime for p in files), default=0)
    return {
        "root": str(root),
        "files": len(files),
        "sha1": h.hexdigest(),
        "newest_mtime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(latest)),
    }


def _warm_page_cache(*paths: Path) -> None:
    for p in paths:
        with open(p, "rb", buffering=0) as fh:
            while fh.read(16 << 20):
                pass


# ---- inputs --------------------------------------------------------------------------------
def _zstd_file(src: Path, dst: Path, level: int = 3) -> int:
    """zstd copy of ``src`` (level 3, zstd's default); returns the compressed size."""
    import zstandard

    tmp = dst.with_name(dst.name + f".tmp-{os.getpid()}")
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        zstandard.ZstdCompressor(level=level).copy_stream(fi, fo)
    os.replace(tmp, dst)
    return dst.stat().st_size


def _prepare_trace(args, out_dir: Path) -> tuple[Path, Path, Path, dict, list[Path]]:
    """Return (json path, gzip path, zstd path, info, files we created)."""
    created: list[Path] = []
    sys.path.insert(0, str(HERE))
    from make_trace import GENERATOR_VERSION, gzip_file

    if args.trace:
        src = Path(args.trace).resolve()
        if not src.is_file():
            sys.exit(f"--trace {src}: no such file")
        info: dict = {"source": str(src), "generated": False}
        with open(src, "rb") as fh:
            is_gz = fh.read(2) == b"\x1f\x8b"
        if is_gz:
            gz = src
            js = out_dir / (src.name[:-3] if src.name.endswith(".gz") else src.name + ".json")
            if js.suffix != ".json":
                js = js.with_name(js.name + ".json")
            _log(f"decompressing {src} -> {js}")
            with subprocess.Popen(["gzip", "-dc", str(src)], stdout=subprocess.PIPE) as p, open(js, "wb") as fo:
                shutil.copyfileobj(p.stdout, fo, 16 << 20)
            created.append(js)
        else:
            js = src
            gz = out_dir / (src.name + ".gz")
            _log(f"gzip -{args.gz_level} {src} -> {gz}")
            gzip_file(src, gz, args.gz_level)
            created.append(gz)
        zst = out_dir / (js.name + ".zst")
        _log(f"zstd -3 {js} -> {zst}")
        _zstd_file(js, zst)
        created.append(zst)
        return js, gz, zst, info, created
    name = f"trace-{args.layout}-{args.mb:g}mb-{args.events_min}ev-seed{args.seed}"
    js = out_dir / f"{name}.json"
    gz = out_dir / f"{name}.gz{args.gz_level}.json.gz"
    zst = out_dir / f"{name}.json.zst"
    info_path = out_dir / f"{name}.info.json"
    files = [js, gz, zst, info_path]
    if all(p.exists() for p in files) and not args.regenerate:
        info = json.loads(info_path.read_text())
        if (
            info.get("bytes") == js.stat().st_size
            and info.get("gz_bytes") == gz.stat().st_size
            and info.get("zst_bytes") == zst.stat().st_size
            and info.get("gz_level") == args.gz_level
            and info.get("generator_version") == GENERATOR_VERSION
        ):
            _log(f"reusing generated trace {js} ({info['bytes'] / MB:.0f} MB, {info['records']:,} records)")
            info["generated"] = "reused"
            return js, gz, zst, info, files
    _log(
        f"generating {js} (>= {args.mb:g} MB, >= {args.events_min:,} records, seed {args.seed}, layout {args.layout},"
        f" gzip -{args.gz_level}, zstd -3) ..."
    )
    cmd = [
        sys.executable,
        str(HERE / "make_trace.py"),
        str(js),
        "--mb",
        str(args.mb),
        "--events-min",
        str(args.events_min),
        "--seed",
        str(args.seed),
        "--layout",
        args.layout,
    ]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"make_trace failed (exit {proc.returncode})")
    info = json.loads(proc.stdout)
    t0 = time.perf_counter()
    info.update(
        gz_path=str(gz),
        gz_level=args.gz_level,
        gz_bytes=gzip_file(js, gz, args.gz_level),
        gzip_s=round(time.perf_counter() - t0, 2),
    )
    t0 = time.perf_counter()
    info.update(
        zst_path=str(zst), zst_level=3, zst_bytes=_zstd_file(js, zst), zstd_s=round(time.perf_counter() - t0, 2)
    )
    info["generated"] = True
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    _log(
        f"  {info['bytes'] / MB:.0f} MB, {info['records']:,} records ({info['x_events']:,} X events), "
        f"{info['distinct_kernel_names']} kernel names, gzip -{args.gz_level} {info['gz_bytes'] / MB:.1f} MB "
        f"({info['bytes'] / info['gz_bytes']:.1f}x), zstd {info['zst_bytes'] / MB:.1f} MB; "
        f"{info['generate_s']:.0f} s + gzip {info['gzip_s']:.0f} s + zstd {info['zstd_s']:.0f} s"
    )
    return js, gz, zst, info, files


def _hta_python(args) -> tuple[str | None, str]:
    """The interpreter to run HTA with, creating benchmarks/.venv-hta on first use."""
    if args.hta_python:
        return args.hta_python, "given with --hta-python"
    py = DEFAULT_HTA_VENV / "bin" / "python"
    probe = "import importlib.metadata as m, hta.common.trace;print(m.version('HolisticTraceAnalysis'))"
    if py.exists():
        r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == HTA_VERSION:
            return str(py), f"existing {DEFAULT_HTA_VENV.relative_to(REPO)}"
    _log(
        f"creating {DEFAULT_HTA_VENV} with HolisticTraceAnalysis=={HTA_VERSION} (first use; takes a minute or two) ..."
    )
    base = getattr(sys, "_base_executable", None) or sys.executable
    for cmd in (
        [base, "-m", "venv", "--clear", str(DEFAULT_HTA_VENV)],
        [str(py), "-m", "pip", "install", "--quiet", f"HolisticTraceAnalysis=={HTA_VERSION}"],
    ):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return (
                None,
                f"could not build {DEFAULT_HTA_VENV}: {' '.join(cmd)} failed:\n{(r.stderr or r.stdout)[-2000:]}",
            )
    r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"HTA does not import in {DEFAULT_HTA_VENV}:\n{r.stderr[-2000:]}"
    return str(py), f"created {DEFAULT_HTA_VENV.relative_to(REPO)}"


# ---- report --------------------------------------------------------------------------------
def _fmt(v, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def _ratio(a, b):
    return a / b if a and b else None


def _verdict(key: str, value) -> str:
    if value is None:
        return "n/a"
    op, target, _ = TARGETS[key]
    ok = value >= target if op == ">=" else value <= target
    return "PASS" if ok else "FAIL"


def _table(rows: list[dict], size: int) -> str:
    head = (
        "measurement",
        "load s",
        "med",
        "wall s",
        "CPU s",
        "MB/s load",
        "MB/s wall",
        "peak RSS MiB",
        "tree MiB",
        "procs",
        "RSS/size",
    )
    lines = []
    for r in rows:
        if not r.get("ok"):
            lines.append((r["label"], "FAILED", r.get("error") or "", "", "", "", "", "", "", "", ""))
            continue
        load = r.get("load_s")
        wall = r.get("wall_s")
        rss = r.get("peak_rss_mib")
        mem = r.get("mem_mib")
        per_size = r.get("per_size", True)
        rss_per_size = per_size and r.get("rss_per_size", True)
        lines.append(
            (
                r["label"],
                _fmt(load, ".3f"),
                _fmt(r.get("load_s_median") if len(r.get("load_s_all") or ()) > 1 else None, ".3f"),
                _fmt(wall, ".3f"),
                _fmt(r.get("cpu_s"), ".2f"),
                _fmt(size / MB / load if load and per_size else None, ".1f"),
                _fmt(size / MB / wall if wall and per_size else None, ".1f"),
                _fmt(rss, ".1f"),
                _fmt(r.get("tree_peak_mib"), ".1f"),
                _fmt(r.get("max_procs"), "d"),
                _fmt(mem * MIB / size if mem and rss_per_size else None, ".3f"),
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt_row = lambda cells: "  ".join(
        str(c).ljust(w) if i == 0 else str(c).rjust(w)  # noqa: E731
        for i, (c, w) in enumerate(zip(cells, widths))
    )
    out = [fmt_row(head), fmt_row(["-" * w for w in widths])]
    out += [fmt_row(line) for line in lines]
    return "\n".join(out)


def _targets_table(ratios: list[dict]) -> str:
    head = ("ratio", "by load time", "by wall time", "target", "verdict")
    lines = []
    for r in ratios:
        unit = r.get("unit", "")
        lines.append(
            (
                r["label"],
                _fmt(r.get("load"), r.get("spec", ".2f")) + (unit if r.get("load") is not None else ""),
                _fmt(r.get("wall"), r.get("spec", ".2f")) + (unit if r.get("wall") is not None else ""),
                r.get("target_text", "(info)"),
                r.get("verdict", ""),
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt_row = lambda cells: "  ".join(
        str(c).ljust(w) if i in (0, 4) else str(c).rjust(w)  # noqa: E731
        for i, (c, w) in enumerate(zip(cells, widths))
    )
    out = [fmt_row(head), fmt_row(["-" * w for w in widths])]
    out += [fmt_row(line) for line in lines]
    return "\n".join(out)


def _ratios(by: dict[str, dict], size: int) -> list[dict]:
    def row(key):
        return by.get(key) or {}

    def t(key, field="load_s"):
        r = row(key)
        return r.get(field) if r.get("ok") else None

    out = []

    def add(key, label, load, wall, spec=".2f", unit="x", judge="load"):
        item = {"key": key, "label": label, "load": load, "wall": wall, "spec": spec, "unit": unit}
        if key in TARGETS:
            op, target, tunit = TARGETS[key]
            item["target"] = target
            item["target_text"] = f"{op} {target:g}{tunit}"
            item["verdict"] = _verdict(key, load if judge == "load" else wall)
        out.append(item)

    def mb_s(key):
        return _ratio(size / MB, t(key)), _ratio(size / MB, t(key, "wall_s"))

    def vs(a, b):  # how many times faster b runs than a
        return _ratio(t(a), t(b)), _ratio(t(a, "wall_s"), t(b, "wall_s"))

    def rss(key):
        m = t(key, "mem_mib")
        return (m * MIB / size if m else None), None

    add("gz_mb_s", "tracekit cold .json.gz throughput (MB of unzipped JSON/s)", *mb_s("cold_gz"), ".1f", " MB/s")
    add(
        "gz_speedup_vs_hta",
        "tracekit cold .json.gz vs HTA on .json.gz (HTA time / tracekit time)",
        *vs("hta_gz", "cold_gz"),
    )
    add("json_mb_s", "tracekit cold .json throughput", *mb_s("cold_json"), ".1f", " MB/s")
    add("speedup_vs_hta", "tracekit cold .json vs HTA on .json", *vs("hta", "cold_json"))
    add("zst_mb_s", "tracekit cold .json.zst throughput", *mb_s("cold_zst"), ".1f", " MB/s")
    add("rss_over_size_gz", "tracekit cold .json.gz peak memory / unzipped size", *rss("cold_gz"), ".3f", "")
    add("rss_over_size", "tracekit cold .json peak memory / unzipped size", *rss("cold_json"), ".3f", "")
    add("rss_over_size_zst", "tracekit cold .json.zst peak memory / unzipped size", *rss("cold_zst"), ".3f", "")
    add("rss_over_size_cli", "CLI info --no-cache .json.gz peak memory / unzipped size", *rss("cli_gz"), ".3f", "")
    add(
        "cached_speedup",
        "cached re-open speed-up (cold .json.gz / cached .json.gz)",
        *vs("cold_gz", "cached_gz"),
        ".1f",
    )
    add("cached_speedup_json", "cached re-open speed-up (cold .json / cached .json)", *vs("cold_json", "cached"), ".1f")
    add(
        "cli_cached_vs_cold",
        "CLI: info --no-cache .json.gz wall / info .json.gz wall with the cache",
        None,
        _ratio(t("cli_gz", "wall_s"), t("cli_gz_cached", "wall_s")),
        ".2f",
    )
    # issue 30: the CLI end to end (wall times of fresh processes; the verdicts use them)
    add(
        "report_vs_info",
        "CLI: report --no-cache .json.gz wall / info --no-cache .json.gz wall",
        None,
        _ratio(t("cli_report_gz", "wall_s"), t("cli_gz", "wall_s")),
        judge="wall",
    )
    add(
        "report_cached_s",
        "CLI: report .json.gz run again (trace and Result cached), wall",
        None,
        t("cli_report_gz_again", "wall_s"),
        ".2f",
        " s",
        judge="wall",
    )
    add(
        "report_trace_cached_s",
        "CLI: report .json.gz with the trace cached (the analyses run), wall",
        None,
        t("cli_report_gz_cached", "wall_s"),
        ".2f",
        " s",
    )
    add("version_s", "CLI: tracekit --version, wall", None, t("cli_version", "wall_s"), ".2f", " s", judge="wall")
    add(
        "cli_info_vs_load",
        "CLI: info --no-cache .json.gz wall / in-process cold .json.gz load",
        None,
        _ratio(t("cli_gz", "wall_s"), t("cold_gz")),
        judge="wall",
    )
    add(
        "rss_over_size_report",
        "CLI: report --no-cache .json.gz peak memory / unzipped size",
        *rss("cli_report_gz"),
        ".3f",
        "",
    )
    add("gz_two_vs_one", ".json.gz: 1 worker time / 2 workers time", *vs("cold_gz_1w", "cold_gz"))
    add("json_two_vs_one", ".json: 1 worker time / 2 workers time", *vs("cold_json_1w", "cold_json"))
    add("isal_vs_zlib", ".json.gz ingest: zlib time / ISA-L time (the default)", *vs("cold_gz_zlib", "cold_gz"))
    add(
        "gz_vs_gzip",
        "tracekit cold .json.gz time / gzip -dc time",
        _ratio(t("cold_gz"), t("gzip_dc", "wall_s")),
        _ratio(t("cold_gz", "wall_s"), t("gzip_dc", "wall_s")),
    )
    add(
        "json_vs_gzip",
        "tracekit cold .json time / gzip -dc time",
        _ratio(t("cold_json"), t("gzip_dc", "wall_s")),
        _ratio(t("cold_json", "wall_s"), t("gzip_dc", "wall_s")),
    )
    add("orjson_vs_tracekit", "orjson decode + columns time / tracekit cold .json time", *vs("orjson", "cold_json"))
    return [r for r in out if r["load"] is not None or r["wall"] is not None or r["key"] in TARGETS]


# ---- main ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tracekit ingest benchmark (see benchmarks/README.md)")
    ap.add_argument("--trace", help="use this trace (.json or .json.gz) instead of generating one")
    ap.add_argument("--mb", type=float, default=300, help="generated trace: minimum unzipped size in MB (default 300)")
    ap.add_argument(
        "--events-min",
        type=int,
        default=750_000,
        help="generated trace: minimum number of traceEvents records (default 750,000)",
    )
    ap.add_argument("--seed", type=int, default=0, help="generated trace: seed (default 0)")
    ap.add_argument(
        "--layout",
        choices=("oneline", "kineto"),
        default="kineto",
        help="generated trace: libkineto's multi-line layout (default) or one record per line",
    )
    ap.add_argument(
        "--gz-level",
        type=int,
        default=9,
        help="gzip level of the .json.gz copy (default 9: what torch.profiler's .json.gz export writes)",
    )
    ap.add_argument(
        "--skip-extras",
        action="store_true",
        help="measure only the main rows (no 1-worker, zlib, inflater-alone, orjson and CLI rows)",
    )
    ap.add_argument("--regenerate", action="store_true", help="generate the trace even if a matching one is in --out")
    ap.add_argument(
        "--out",
        default=str(HERE / "out"),
        help="results folder (ingest-results.json goes there; also holds the generated trace), "
        "or a .json file path (default benchmarks/out)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="timed runs of each tracekit and gzip row; the best time is reported, the median beside it (default 5)",
    )
    ap.add_argument("--skip-hta", action="store_true", help="do not run HolisticTraceAnalysis")
    ap.add_argument(
        "--skip-report",
        action="store_true",
        help="leave out the CLI rows of issue 30: tracekit --version, report --no-cache and report with the cache",
    )
    ap.add_argument(
        "--report-repeat",
        type=int,
        default=None,
        help="timed runs of each report row (default: --repeat); they run in the same rounds",
    )
    ap.add_argument(
        "--hta-python",
        help="python interpreter with HolisticTraceAnalysis 0.5.0 installed "
        "(default: benchmarks/.venv-hta, created on first use)",
    )
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed per child process (default 1800)")
    ap.add_argument("--clean", action="store_true", help="delete the generated/converted trace files afterwards")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-path", help=argparse.SUPPRESS)
    ap.add_argument("--child-cache-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        res = _child(args.child, args.child_path, args.child_cache_dir)
        sys.stdout.flush()
        print(MARK + json.dumps(res), flush=True)
        return 0

    out_arg = Path(args.out)
    if out_arg.suffix == ".json":
        out_dir, out_file = out_arg.parent, out_arg
    else:
        out_dir, out_file = out_arg, out_arg / "ingest-results.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir = out_dir.resolve()

    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    fp_start = _tracekit_fingerprint()
    js, gz, zst, trace_info, created = _prepare_trace(args, out_dir)
    size = js.stat().st_size
    gz_size = gz.stat().st_size
    zst_size = zst.stat().st_size
    _warm_page_cache(js, gz, zst)

    notes: list[str] = []
    hta_py, hta_note = (None, "skipped (--skip-hta)") if args.skip_hta else _hta_python(args)
    if not args.skip_hta:
        _log(f"HTA python: {hta_py or '-'} ({hta_note.splitlines()[0]})")
        if hta_py is None:
            notes.append(f"HTA row not measured: {hta_note}")

    cache_dir = tempfile.mkdtemp(prefix="tracekit-bench-cache-")
    env = dict(os.environ, TRACEKIT_CACHE_DIR=cache_dir)  # belt and braces: never touch the user's cache
    # an installed package has its bytecode compiled (pip does it): a variable that forbids writing it would make
    # every CLI child recompile tracekit's sources (~0.3 s a start), which no user pays
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    py = sys.executable
    rows: dict[str, dict] = {}
    try:
        _log(
            f"measuring on {js.name}: {size / MB:.1f} MB unzipped, {gz_size / MB:.1f} MB gzip, {zst_size / MB:.1f} MB zstd"
        )
        r = args.repeat
        one_worker = dict(env, TRACEKIT_WORKERS="1")

        specs: list[dict] = []

        def measure(key, label, cmd, repeat=r, *, env=env, stdout_devnull=False, memory_run=False, middle=False):
            """Register a row; returns a dict of extra fields for it. The rows run in rounds, below."""
            specs.append(
                {
                    "key": key,
                    "label": label,
                    "cmd": cmd,
                    "repeat": repeat,
                    "env": env,
                    "extra": {},
                    "stdout_devnull": stdout_devnull,
                    "memory_run": memory_run,
                    "middle": middle,
                }
            )
            return specs[-1]["extra"]

        measure("import", "python -c 'import tracekit'", [py, "-c", IMPORT_BASELINE])["per_size"] = False
        cli = str(Path(py).with_name("tracekit"))
        rr = min(args.report_repeat or r, r)
        if not args.skip_report:
            v = measure("cli_version", "tracekit --version (CLI start-up)", [cli, "--version"], stdout_devnull=True)
            v["per_size"] = False
        measure("gzip_dc", "gzip -dc .json.gz > /dev/null", ["gzip", "-dc", str(gz)], stdout_devnull=True)[
            "rss_per_size"
        ] = False
        if not args.skip_extras:
            for module in _INFLATERS:
                if module == "zlib" or _importable(module):
                    measure(
                        f"inflate_{module}",
                        f"{module} alone: inflate .json.gz in 8 MiB blocks",
                        _child_cmd(py, f"inflate-{module}", str(gz)),
                    )["rss_per_size"] = False
        measure("cold_gz", "tracekit cold .json.gz (cache=False)", _child_cmd(py, "tracekit", str(gz)), memory_run=True)
        if not args.skip_extras or not args.skip_report:
            measure(
                "cli_gz",
                "tracekit info --no-cache .json.gz (CLI process)",
                [cli, "info", "--no-cache", str(gz)],
                stdout_devnull=True,
                memory_run=True,
            )
        if not args.skip_report:
            measure(
                "cli_report_gz",
                "tracekit report --no-cache .json.gz -f json (CLI process)",
                [cli, "report", "--no-cache", str(gz), "-f", "json"],
                rr,
                stdout_devnull=True,
                memory_run=True,
            )
        if not args.skip_extras:
            measure(
                "cold_gz_1w",
                "tracekit cold .json.gz, TRACEKIT_WORKERS=1",
                _child_cmd(py, "tracekit", str(gz)),
                env=one_worker,
            )
            measure(
                "cold_gz_zlib",
                "tracekit cold .json.gz, TRACEKIT_INFLATE=zlib",
                _child_cmd(py, "tracekit", str(gz)),
                env=dict(env, TRACEKIT_INFLATE="zlib"),
                memory_run=True,
            )
        measure("cold_json", "tracekit cold .json (cache=False)", _child_cmd(py, "tracekit", str(js)), memory_run=True)
        if not args.skip_extras:
            measure(
                "cold_json_1w",
                "tracekit cold .json, TRACEKIT_WORKERS=1",
                _child_cmd(py, "tracekit", str(js)),
                env=one_worker,
            )
        measure(
            "cold_zst", "tracekit cold .json.zst (cache=False)", _child_cmd(py, "tracekit", str(zst)), memory_run=True
        )
        measure(
            "cache_write",
            "tracekit first load .json, cache=True (writes cache)",
            _child_cmd(py, "tracekit-cache-write", str(js), cache_dir),
            1,
        )
        measure(
            "cached",
            "tracekit cached re-open .json (cache=True)",
            _child_cmd(py, "tracekit-cached", str(js), cache_dir),
        )
        measure(
            "cache_write_gz",
            "tracekit first load .json.gz, cache=True (writes cache)",
            _child_cmd(py, "tracekit-cache-write", str(gz), cache_dir),
            1,
        )
        measure(
            "cached_gz",
            "tracekit cached re-open .json.gz (cache=True)",
            _child_cmd(py, "tracekit-cached", str(gz), cache_dir),
        )
        if not args.skip_extras:
            measure(
                "cli_gz_cached",
                "tracekit info .json.gz with the cache (CLI process)",
                [cli, "info", str(gz)],
                stdout_devnull=True,
            )
        if not args.skip_report:
            # the trace cached, its Result not: the analyses run (the result entry of the run before is removed)
            measure(
                "cli_report_gz_cached",
                "tracekit report .json.gz -f json, the trace cached (CLI process)",
                ["sh", "-c", 'rm -f "$1"/*.result && exec "$2" report "$3" -f json', "sh", cache_dir, cli, str(gz)],
                rr,
                stdout_devnull=True,
            )
            # the same command again: its Result comes from the cache (tracekit.cache.result_entries)
            measure(
                "cli_report_gz_again",
                "tracekit report .json.gz -f json again (its Result cached; CLI process)",
                [cli, "report", str(gz), "-f", "json"],
                rr,
                stdout_devnull=True,
            )
        if not args.skip_extras and _importable("orjson"):
            measure(
                "orjson",
                "orjson.loads(.json) + the same columns (inexact ts)",
                _child_cmd(py, "orjson", str(js)),
                1,
                middle=True,
            )
        if hta_py:
            measure(
                "hta_gz",
                f"HTA {HTA_VERSION} parse_trace_file(.json.gz)",
                _child_cmd(hta_py, "hta", str(gz)),
                1,
                env=None,
                middle=True,
            )
            measure(
                "hta",
                f"HTA {HTA_VERSION} parse_trace_file(.json)",
                _child_cmd(hta_py, "hta", str(js)),
                1,
                env=None,
                middle=True,
            )
        rows.update(_measure_rounds(specs, args.timeout))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)

    # sanity checks on what tracekit returned
    cold_c = (rows["cold_json"].get("child") or {}) if rows["cold_json"].get("ok") else {}
    for key in (
        "cold_gz",
        "cold_gz_1w",
        "cold_gz_zlib",
        "cold_json_1w",
        "cold_zst",
        "cache_write",
        "cached",
        "cache_write_gz",
        "cached_gz",
    ):
        c = rows[key].get("child") if key in rows and rows[key].get("ok") else None
        if c and cold_c and (c.get("events_kept"), c.get("rows")) != (cold_c.get("events_kept"), cold_c.get("rows")):
            notes.append(
                f"{rows[key]['label']}: {c.get('events_kept')} events kept / {c.get('rows')} rows, but the cold "
                f".json load kept {cold_c.get('events_kept')} / {cold_c.get('rows')}"
            )
    for key in ("cached", "cached_gz"):
        cached_c = rows[key].get("child") if rows[key].get("ok") else None
        if cached_c and not cached_c.get("from_cache"):
            notes.append(
                f"{rows[key]['label']} did NOT come from the cache (report.from_cache is False): "
                "its time is a second cold ingest"
            )
    wc = rows["cache_write_gz"].get("child") if rows["cache_write_gz"].get("ok") else None
    if wc is not None and not wc.get("cache_files"):
        notes.append("the cache=True load wrote no file into the cache dir")
    elif wc is not None:  # both entries by then: the .json's and the .json.gz's
        notes.append(
            "cache entries: "
            + ", ".join(
                f"{name} {nbytes / MB:.1f} MB" for name, nbytes in wc["cache_files"] if not name.startswith(".")
            )
        )
    if cold_c.get("warnings"):
        notes.append("tracekit warnings on the cold load: " + " | ".join(cold_c["warnings"][:5]))
    if cold_c.get("dropped"):
        notes.append(f"tracekit dropped events on the cold load: {cold_c['dropped']}")
    if trace_info.get("records") and cold_c.get("records_read") not in (None, trace_info["records"]):
        notes.append(f"tracekit read {cold_c.get('records_read')} records; the generator wrote {trace_info['records']}")
    driver_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    fp_end = _tracekit_fingerprint()
    if fp_end["sha1"] != fp_start["sha1"]:
        notes.append(
            f"tracekit's sources changed while the benchmark ran (sha1 {fp_start['sha1'][:12]} -> "
            f"{fp_end['sha1'][:12]}): rows may mix two versions; run again"
        )

    order = [
        "import",
        "cli_version",
        "gzip_dc",
        *[f"inflate_{m}" for m in _INFLATERS],
        "cold_gz",
        "cold_gz_1w",
        "cold_gz_zlib",
        "cli_gz",
        "cli_report_gz",
        "cold_json",
        "cold_json_1w",
        "cold_zst",
        "cache_write",
        "cached",
        "cache_write_gz",
        "cached_gz",
        "cli_gz_cached",
        "cli_report_gz_cached",
        "cli_report_gz_again",
        "orjson",
        "hta_gz",
        "hta",
    ]
    table_rows = [rows[k] for k in order if k in rows]
    ratios = _ratios(rows, size)

    hdr = (
        f"trace: {js}  ({size / MB:.1f} MB unzipped = {size / MIB:.1f} MiB; gzip -{args.gz_level} copy "
        f"{gz_size / MB:.1f} MB = {size / gz_size:.1f}x; zstd -3 copy {zst_size / MB:.1f} MB = {size / zst_size:.1f}x)"
    )
    if trace_info.get("records"):
        hdr += (
            f"\n       {trace_info['records']:,} traceEvents records, {trace_info['x_events']:,} complete (X) events, "
            f"{trace_info.get('distinct_kernel_names', '?')} distinct kernel names, layout {trace_info.get('layout')}"
        )
    if cold_c:
        hdr += f"\n       tracekit: {cold_c['records_read']:,} records read, {cold_c['events_kept']:,} events kept"
    hdr += (
        f"\nmachine: {_cpu_model()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{(_meminfo_total() or 0) / (1 << 20):.0f} GiB, python {platform.python_version()}; "
        f"tracekit {cold_c.get('tracekit_version', '?')}; best of {args.repeat} for tracekit/gzip rows, run in "
        f"{args.repeat} rounds, HTA once in the middle round; file in page cache; tracekit sources sha1 {fp_start['sha1'][:12]}"
    )
    touch = [x for x in FIRST_TOUCH_US if x is not None]
    if touch:
        hdr += (
            f"\nfresh-page cost during the rounds: {min(touch):.1f}-{max(touch):.1f} µs per 4 KiB page ({TOUCH_MIB} MiB"
            " written in a new process before each round and after the last; bare metal ~0.2-0.5 µs)"
        )
    text = "\n".join(
        [
            hdr,
            "",
            _table(table_rows, size),
            "",
            "load s = time around the load call inside the child; wall s = the whole child process (start, imports,\n"
            "exit); CPU s = user+sys of that process (more than wall s means threads). MB/s over the unzipped .json\n"
            "size (10^6 bytes); load s and wall s are the best of the timed runs, med = their median. peak RSS = the\n"
            "process's own VmHWM (MiB). tree = the most memory its process tree held in one 20 ms sample of the row's\n"
            "memory run (one more run, not timed: sampling PSS slows the sampled processes): RSS while alone, sum of\n"
            "PSS while it had descendants (tracekit may fork a helper); procs = most processes seen at once.\n"
            "RSS/size = max(peak RSS, tree) in bytes / unzipped bytes.\n"
            "Every .json.gz and .json.zst row is per MB of the unzipped .json too. The inflater rows decompress only.",
            "",
            _targets_table(ratios),
        ]
    )
    if notes:
        text += "\n\nnotes:\n" + "\n".join(f"- {n}" for n in notes)
    print(text, flush=True)

    result = {
        "started": started,
        "command": " ".join(
            [os.path.relpath(sys.executable) if sys.executable.startswith(str(REPO)) else sys.executable, *sys.argv]
        ),
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "mem_total_kib": _meminfo_total(),
            "first_touch_us_per_page": FIRST_TOUCH_US,
        },
        "trace": {
            "json": str(js),
            "json_bytes": size,
            "gz": str(gz),
            "gz_bytes": gz_size,
            "zst": str(zst),
            "zst_bytes": zst_size,
            **trace_info,
        },
        "hta_python": hta_py,
        "hta_python_note": hta_note,
        "rows": {k: v for k, v in rows.items()},
        "ratios": ratios,
        "targets": {k: {"op": v[0], "value": v[1]} for k, v in TARGETS.items()},
        "notes": notes,
        "tracekit_source": {"start": fp_start, "end": fp_end},
        "driver_maxrss_mib": driver_rss,
        "table": text,
    }
    tmp = out_file.with_name(out_file.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str) + "\n")
    os.replace(tmp, out_file)
    _log(f"\nresults written to {out_file}")
    if args.clean:
        for p in created:
            if p.exists():
                p.unlink()
        _log("deleted " + ", ".join(p.name for p in created))
    failed = [r for r in ratios if r.get("verdict") == "FAIL"]
    return 1 if (args.strict and failed) else 0


_INFLATERS = ("zlib", "isal", "zlib-ng", "rapidgzip")


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec({"zlib-ng": "zlib_ng"}.get(module, module)) is not None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _meminfo_total() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


if __name__ == "__main__":
    sys.exit(main())
