"""How tracekit's cost grows with the trace: `tracekit info --no-cache` and `tracekit report --no-cache` on generated
Kineto traces of several sizes (default 100 MB, 300 MB and 1 GB of JSON, gzip -9 copies), time and peak RSS per MB.

One command::

    python benchmarks/scaling.py [--sizes 100,300,1000] [--repeat 2] [--out benchmarks/out]

Each size's trace is ``make_trace.py``'s (the ingest benchmark's generator, seed 0, Kineto layout) with at least
2,500 traceEvents records per MB, so the mix of records is the same at every size; the traces are reused from
``--out`` like ``ingest.py`` reuses its own (the 300 MB one is the ingest benchmark's). Every measurement is a fresh
CLI process (output to /dev/null), timed by the parent, its peak RSS its own VmHWM polled every 20 ms (as
``ingest.py`` does for CLI rows). The runs go in rounds: round i runs the i-th run of every (size, command), so a
slow spell of the machine touches every size alike. The best wall of the rounds is reported, the median beside it.

The table: per size and command, wall s (best and median), s per MB of JSON, peak RSS MiB and peak / unzipped size;
then how flat those per-MB figures are (the largest over the smallest), raw and net of the fixed cost — the same
command on the 5 kB bundled sample in the same rounds (interpreter, imports, start-up: ~0.6 s and ~110 MiB, which
weigh most on the smallest trace). Everything also goes to
``<out>/scaling-results.json``. Not a test: the 1 GB run needs ~10 GB of memory and minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ingest as B  # noqa: E402  (the ingest benchmark's runner, trace preparation and fingerprint)

MB, MIB = B.MB, B.MIB
EVENTS_PER_MB = 2500
SAMPLE = HERE.parent / "tracekit" / "data" / "samples" / "decode_sample.json.gz"  # the fixed cost's input


def _prepare(mb: float, out_dir: Path, gz_level: int) -> tuple[Path, Path, dict]:
    ns = argparse.Namespace(
        trace=None,
        mb=mb,
        events_min=int(EVENTS_PER_MB * mb),
        seed=0,
        layout="kineto",
        gz_level=gz_level,
        regenerate=False,
    )
    js, gz, _zst, info, _files = B._prepare_trace(ns, out_dir)
    return js, gz, info


def _marginal(rows: list[dict], c: str) -> list[dict]:
    """Per pair of consecutive sizes, the extra time and peak per extra MB (Δ best wall / Δ MB, Δ peak / Δ size): how
    the cost grows with no fixed cost in it at all, whatever the trace's shape adds once (a report's layer
    candidates, the imports an analysis needs)."""
    mine = sorted((r for r in rows if r["command"] == c and r["ok"]), key=lambda r: r["bytes"])
    out = []
    for a, b in zip(mine, mine[1:]):
        d_mb = (b["bytes"] - a["bytes"]) / MB
        out.append(
            {
                "from_mb": a["mb"],
                "to_mb": b["mb"],
                "s_per_mb": (b["wall_s"] - a["wall_s"]) / d_mb,
                "peak_over_size": (b["peak_mib"] - a["peak_mib"]) * MIB / (b["bytes"] - a["bytes"]),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tracekit cost against trace size (see benchmarks/README.md)")
    ap.add_argument(
        "--sizes", default="100,300,1000", help="unzipped sizes in MB, comma-separated (default 100,300,1000)"
    )
    ap.add_argument("--repeat", type=int, default=2, help="rounds (default 2)")
    ap.add_argument("--commands", default="info,report", help="CLI commands to time (default info,report)")
    ap.add_argument("--gz-level", type=int, default=9, help="gzip level of the .json.gz copies (default 9)")
    ap.add_argument("--out", default=str(HERE / "out"), help="folder of the traces and scaling-results.json")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed per process (default 1800)")
    args = ap.parse_args(argv)
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = [float(x) for x in args.sizes.split(",") if x.strip()]
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    fp_start = B._tracekit_fingerprint()
    traces = []
    for mb in sizes:
        js, gz, info = _prepare(mb, out_dir, args.gz_level)
        traces.append(
            {
                "mb": mb,
                "json": js,
                "gz": gz,
                "bytes": js.stat().st_size,
                "gz_bytes": gz.stat().st_size,
                "records": info.get("records"),
            }
        )
    B._warm_page_cache(*[t["gz"] for t in traces])
    cli = str(Path(sys.executable).with_name("tracekit"))
    cache_dir = tempfile.mkdtemp(prefix="tracekit-scaling-cache-")
    env = dict(os.environ, TRACEKIT_CACHE_DIR=cache_dir)  # --no-cache anyway; never the user's cache
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package's bytecode is compiled; users pay no recompile
    runs: dict[tuple, list] = {(t["mb"], c): [] for t in traces for c in commands}
    base: dict[str, list] = {c: [] for c in commands}  # the fixed cost: the same command on the 5 kB bundled sample
    touch: list[float] = []  # the machine's fresh-page cost at the start and end of every round
    for i in range(args.repeat):
        touch.append(B.first_touch_us(env, args.timeout))
        for c in commands:
            cmd = [cli, c, "--no-cache", str(SAMPLE)] + (["-f", "json"] if c != "info" else [])
            base[c].append(
                B._run_logged(
                    f"{c} --no-cache {SAMPLE.name} (fixed cost)",
                    cmd,
                    f"round {i + 1}/{args.repeat}",
                    env=env,
                    stdout_devnull=True,
                    timeout=args.timeout,
                )
            )
        for t in traces:
            for c in commands:
                cmd = [cli, c, "--no-cache", str(t["gz"])] + (["-f", "json"] if c != "info" else [])
                runs[(t["mb"], c)].append(
                    B._run_logged(
                        f"{c} --no-cache {t['gz'].name}",
                        cmd,
                        f"round {i + 1}/{args.repeat}",
                        env=env,
                        stdout_devnull=True,
                        timeout=args.timeout,
                    )
                )
        touch.append(B.first_touch_us(env, args.timeout))
    B._log(f"  fresh-page cost per round (start, end): {touch} µs per 4 KiB page")
    fixed = {}
    for c in commands:
        ok = [r for r in base[c] if "error" not in r]
        if ok:
            fixed[c] = {"wall_s": min(r["wall_s"] for r in ok), "peak_mib": max(B._peak_mib(r) for r in ok)}
    rows = []
    for t in traces:
        for c in commands:
            ok = [r for r in runs[(t["mb"], c)] if "error" not in r]
            row = {
                "mb": t["mb"],
                "bytes": t["bytes"],
                "command": c,
                "ok": bool(ok),
                "runs": [
                    {k: r.get(k) for k in ("wall_s", "user_s", "sys_s", "polled_vmhwm_kib", "rc", "error")}
                    for r in runs[(t["mb"], c)]
                ],
            }
            if ok:
                walls = [r["wall_s"] for r in ok]
                peak = max(B._peak_mib(r) for r in ok)
                row.update(
                    wall_s=min(walls),
                    wall_s_median=statistics.median(walls),
                    s_per_mb=min(walls) / (t["bytes"] / MB),
                    peak_mib=peak,
                    peak_over_size=peak * MIB / t["bytes"],
                )
                if c in fixed:  # what the trace itself costs: the run less the same command on the bundled sample
                    row.update(
                        net_s_per_mb=(min(walls) - fixed[c]["wall_s"]) / (t["bytes"] / MB),
                        net_peak_over_size=(peak - fixed[c]["peak_mib"]) * MIB / t["bytes"],
                    )
            rows.append(row)
    flat = {}
    for c in commands:
        mine = [r for r in rows if r["command"] == c and r["ok"]]
        if len(mine) > 1:
            flat[c] = {
                k: max(r[k] for r in mine) / min(r[k] for r in mine)
                for k in ("s_per_mb", "peak_over_size", "net_s_per_mb", "net_peak_over_size")
                if all(r.get(k, 0) > 0 for r in mine)
            }
    marginal = {c: _marginal(rows, c) for c in commands}
    for c, m in marginal.items():
        if len(m) > 1 and all(x["s_per_mb"] > 0 for x in m):
            flat.setdefault(c, {})["marginal_s_per_mb"] = max(x["s_per_mb"] for x in m) / min(x["s_per_mb"] for x in m)
    head = (
        "command",
        "JSON MB",
        "gz MB",
        "wall s",
        "med",
        "s/MB",
        "net s/MB",
        "peak RSS MiB",
        "peak/size",
        "net peak/size",
    )
    lines = []
    for r in rows:
        t = next(x for x in traces if x["mb"] == r["mb"])
        if not r["ok"]:
            lines.append(
                (
                    f"{r['command']} --no-cache",
                    f"{r['bytes'] / MB:.0f}",
                    f"{t['gz_bytes'] / MB:.1f}",
                    "FAILED",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                )
            )
            continue
        net_t, net_p = r.get("net_s_per_mb"), r.get("net_peak_over_size")
        lines.append(
            (
                f"{r['command']} --no-cache",
                f"{r['bytes'] / MB:.0f}",
                f"{t['gz_bytes'] / MB:.1f}",
                f"{r['wall_s']:.2f}",
                f"{r['wall_s_median']:.2f}",
                f"{r['s_per_mb'] * 1000:.1f} ms",
                f"{net_t * 1000:.1f} ms" if net_t is not None else "-",
                f"{r['peak_mib']:.0f}",
                f"{r['peak_over_size']:.2f}",
                f"{net_p:.2f}" if net_p is not None else "-",
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = lambda cells: "  ".join(
        str(c).ljust(w) if i == 0 else str(c).rjust(w)  # noqa: E731
        for i, (c, w) in enumerate(zip(cells, widths))
    )
    text = [
        f"machine: {B._cpu_model()}, {os.cpu_count()} CPUs, {(B._meminfo_total() or 0) / (1 << 20):.0f} GiB, python"
        f" {platform.python_version()}; best of {args.repeat} rounds; tracekit sources sha1 {fp_start['sha1'][:12]}",
        "",
        fmt(head),
        fmt(["-" * w for w in widths]),
        *[fmt(x) for x in lines],
        "",
    ]
    for c, fx in fixed.items():
        text.append(
            f"{c}'s fixed cost (the same command on the 5 kB bundled sample: interpreter, imports, start-up):"
            f" {fx['wall_s']:.2f} s, {fx['peak_mib']:.0f} MiB; net = the run less it"
        )
    for c, f in flat.items():
        text.append(
            f"{c}: largest / smallest s per MB {f.get('s_per_mb', float('nan')):.2f}, peak per MB"
            f" {f.get('peak_over_size', float('nan')):.2f}; net of the fixed cost"
            f" {f.get('net_s_per_mb', float('nan')):.2f} and {f.get('net_peak_over_size', float('nan')):.2f}"
            " (flat within 20 % means <= 1.20)"
        )
    for c, m in marginal.items():
        if m:
            steps = "; ".join(
                f"{x['from_mb']:.0f}->{x['to_mb']:.0f} MB: {x['s_per_mb'] * 1000:.1f} ms and"
                f" {x['peak_over_size']:.2f} MiB per extra MB"
                for x in m
            )
            ratio = (
                f" (largest / smallest {flat[c]['marginal_s_per_mb']:.2f})"
                if "marginal_s_per_mb" in flat.get(c, {})
                else ""
            )
            text.append(f"{c}, marginal cost (no fixed cost in it): {steps}{ratio}")
    known = [x for x in touch if x is not None]
    if known:
        text.append(
            f"this machine's fresh-page cost during the run: {min(known):.1f}-{max(known):.1f} µs per 4 KiB page"
            f" ({B.TOUCH_MIB} MiB allocated and written in a new process at the start and end of each round;"
            " bare metal: ~0.2-0.5 µs)"
        )
    fp_end = B._tracekit_fingerprint()
    if fp_end["sha1"] != fp_start["sha1"]:
        text.append(
            f"note: tracekit's sources changed during the run ({fp_start['sha1'][:12]} -> "
            f"{fp_end['sha1'][:12]}): rows may mix two versions"
        )
    print("\n".join(text), flush=True)
    result = {
        "started": started,
        "argv": sys.argv,
        "traces": [{k: str(v) if isinstance(v, Path) else v for k, v in t.items()} for t in traces],
        "rows": rows,
        "fixed": fixed,
        "flat": flat,
        "marginal": marginal,
        "first_touch_us_per_page": touch,
        "tracekit_source": {"start": fp_start, "end": fp_end},
        "table": "\n".join(text),
    }
    (out_dir / "scaling-results.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
