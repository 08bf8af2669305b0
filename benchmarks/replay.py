"""What the attribution of graph-replayed kernels costs `report`: a 300 MB replay with its capture traces beside it
against the same replay with the captures folder moved away (issue 38: <= 1.3x).

One command::

    python benchmarks/replay.py [--mb 300] [--mode PIECEWISE] [--layers 32] [--captures 8,16,32] [--repeat 5]
                                [--input gz|json] [--out benchmarks/out]

The trace is ``make_replay.py``'s (the graph generator's decode model, tiled; reused from ``--out`` when its
options match). Every measurement is ``tracekit report --no-cache -f json REPLAY`` in a fresh process (output to
/dev/null), timed by the parent with its peak RSS (``ingest.py``'s runner). The runs go in rounds: each round times
the replay with its captures and the replay alone (``capture_traces/`` renamed away for that run and put back
after), the order alternating from round to round, with this machine's fresh-page cost measured at the start and
end of each round (``ingest.first_touch_us``). Before the rounds one untimed run of each checks what the report
says: with the captures its ``summary.capture_traces`` must be > 0 and ``summary.shapes_pct`` is printed; alone,
``capture_traces`` must be 0. The table: best and median wall of each, the ratios (best / best, median / median),
peak RSS. Everything also goes to ``<out>/replay-results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ingest as B  # noqa: E402  (the ingest benchmark's runner, fresh-page probe and fingerprint)
from make_replay import GENERATOR_VERSION, make_replay  # noqa: E402

MB, MIB = B.MB, B.MIB
TARGET = 1.3
AWAY = "capture_traces.away-replay-bench"


def _prepare(args, out_dir: Path) -> dict:
    caps = tuple(int(x) for x in args.captures.split(",") if x.strip())
    name = f"replay-{args.mode}-{args.layers}l-bs{args.bs}-{args.mb:g}mb-seed{args.seed}"
    folder = out_dir / name
    info_path = folder / "replay.info.json"
    if (folder / AWAY).exists() and not (folder / "capture_traces").exists():  # an interrupted run: put it back
        (folder / AWAY).rename(folder / "capture_traces")
    if info_path.is_file() and not args.regenerate:
        info = json.loads(info_path.read_text())
        js = Path(info["json"])
        if (
            info.get("generator_version") == GENERATOR_VERSION
            and info.get("captures") == list(caps)
            and info.get("gz_level") == args.gz_level
            and js.is_file()
            and js.stat().st_size == info["bytes"]
            and Path(info["gz"]).is_file()
        ):
            B._log(f"reusing {js} ({info['bytes'] / MB:.0f} MB, {info['records']:,} records)")
            return info
    B._log(f"generating {folder} (>= {args.mb:g} MB of JSON, {args.mode}, {args.layers} layers) ...")
    info = make_replay(
        folder,
        mb=args.mb,
        mode=args.mode,
        layers=args.layers,
        bs=args.bs,
        captures=caps,
        seed=args.seed,
        gz_level=args.gz_level,
    )
    B._log(
        f"  {info['bytes'] / MB:.0f} MB, {info['records']:,} records, {info['replayed_kernels']:,} replayed kernels,"
        f" {info['graph_launches']:,} graph launches; {info['generate_s']:.1f} s + gzip {info['gzip_s']:.1f} s"
    )
    return info


class _CapturesAway:
    """``capture_traces/`` renamed away for the block (the replay alone), put back after, whatever happens."""

    def __init__(self, folder: Path) -> None:
        self.here, self.away = folder / "capture_traces", folder / AWAY

    def __enter__(self):
        self.here.rename(self.away)
        return self

    def __exit__(self, *exc) -> None:
        self.away.rename(self.here)


def _check(cli: str, trace: Path, env: dict, timeout: float) -> dict:
    """One untimed run: the report's summary.capture_traces and summary.shapes_pct."""
    out = subprocess.run(
        [cli, "report", "--no-cache", "-f", "json", str(trace)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise SystemExit(f"report failed (exit {out.returncode}): {out.stderr[-2000:]}")
    s = json.loads(out.stdout)["summary"]
    return {k: s.get(k) for k in ("capture_traces", "shapes", "shapes_pct", "shaped_pct", "kernels", "steps")}


def _stats(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"ok": False}
    walls = [r["wall_s"] for r in ok]
    return {
        "ok": True,
        "wall_s": min(walls),
        "wall_s_median": statistics.median(walls),
        "peak_mib": max(B._peak_mib(r) for r in ok),
        "walls": walls,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="report with capture traces against report alone (benchmarks/README.md)")
    ap.add_argument("--mb", type=float, default=300, help="the replay's JSON floor in MB (default 300)")
    ap.add_argument("--mode", default="PIECEWISE", choices=("FULL", "PIECEWISE"))
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--bs", type=int, default=16)
    ap.add_argument("--captures", default="8,16,32", help="captured batch sizes (default 8,16,32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gz-level", type=int, default=9, help="gzip level of the .json.gz copy (default 9)")
    ap.add_argument("--input", default="gz", choices=("gz", "json"), help="time the .json.gz (default) or the .json")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--out", default=str(HERE / "out"), help="folder of the traces and replay-results.json")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed per process (default 1800)")
    ap.add_argument("--regenerate", action="store_true")
    args = ap.parse_args(argv)
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    fp_start = B._tracekit_fingerprint()
    info = _prepare(args, out_dir)
    trace = Path(info["gz"] if args.input == "gz" else info["json"])
    folder = trace.parent
    B._warm_page_cache(trace)
    cli = str(Path(sys.executable).with_name("tracekit"))
    cache_dir = tempfile.mkdtemp(prefix="tracekit-replay-bench-cache-")
    env = dict(os.environ, TRACEKIT_CACHE_DIR=cache_dir)  # --no-cache anyway (captures too); never the user's cache
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [cli, "report", "--no-cache", "-f", "json", str(trace)]
    check = {"with": _check(cli, trace, env, args.timeout)}
    with _CapturesAway(folder):
        check["alone"] = _check(cli, trace, env, args.timeout)
    if not check["with"]["capture_traces"] or check["alone"]["capture_traces"]:
        raise SystemExit(f"the reports do not differ by their captures as expected: {check}")
    B._log(f"  with captures: {check['with']}\n  alone: {check['alone']}")
    runs: dict[str, list] = {"with": [], "alone": []}
    touch: list = []
    for i in range(args.repeat):
        touch.append(B.first_touch_us(env, args.timeout))
        order = ("with", "alone") if i % 2 == 0 else ("alone", "with")
        for which in order:
            label = f"report --no-cache {trace.name} " + ("with its captures" if which == "with" else "alone")
            if which == "with":
                res = B._run_logged(label, cmd, f"round {i + 1}/{args.repeat}", env=env, stdout_devnull=True,
                                    timeout=args.timeout)  # fmt: skip
            else:
                with _CapturesAway(folder):
                    res = B._run_logged(label, cmd, f"round {i + 1}/{args.repeat}", env=env, stdout_devnull=True,
                                        timeout=args.timeout)  # fmt: skip
            runs[which].append(res)
        touch.append(B.first_touch_us(env, args.timeout))
    B._log(f"  fresh-page cost per round (start, end): {touch} µs per 4 KiB page")
    st = {k: _stats(v) for k, v in runs.items()}
    ratio = ratio_med = None
    if st["with"]["ok"] and st["alone"]["ok"]:
        ratio = st["with"]["wall_s"] / st["alone"]["wall_s"]
        ratio_med = st["with"]["wall_s_median"] / st["alone"]["wall_s_median"]
    paired = [
        w["wall_s"] / a["wall_s"] for w, a in zip(runs["with"], runs["alone"]) if "error" not in w and "error" not in a
    ]
    ratio_rounds = (
        statistics.median(paired) if paired else None
    )  # each round's own ratio: the same spell of the machine
    cap_bytes = sum(p.stat().st_size for p in (folder / "capture_traces").iterdir())
    known = [x for x in touch if x is not None]
    load = os.getloadavg()
    text = [
        f"machine: {B._cpu_model()}, {os.cpu_count()} CPUs, {(B._meminfo_total() or 0) / (1 << 20):.0f} GiB, python"
        f" {platform.python_version()}; load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f};"
        f" tracekit sources sha1 {fp_start['sha1'][:12]}",
        f"replay: {trace.name}, {info['bytes'] / MB:.0f} MB of JSON ({Path(info['gz']).stat().st_size / MB:.1f} MB"
        f" gzip -{info['gz_level']}), {info['mode']}, {info['layers']} layers, bs {info['bs']}, {info['steps']:,}"
        f" steps, {info['replayed_kernels']:,} replayed kernels, {info['graph_launches']:,} graph launches;"
        f" captures {info['captures']} ({cap_bytes / MB:.2f} MB gzipped)",
        f"with captures: shapes {check['with']['shapes']!r}; alone: capture_traces {check['alone']['capture_traces']}",
        "",
        f"{'tracekit report --no-cache -f json':40}  {'best s':>7}  {'median s':>8}  {'peak MiB':>8}",
    ]
    for k, lab in (("with", "the replay with its captures"), ("alone", "the replay alone (captures moved away)")):
        s = st[k]
        text.append(
            f"{lab:40}  {s['wall_s']:7.2f}  {s['wall_s_median']:8.2f}  {s['peak_mib']:8.0f}"
            if s["ok"]
            else f"{lab:40}  FAILED"
        )
    if ratio is not None:
        verdict = "meets" if ratio <= TARGET else "misses"
        text.append(
            f"ratio with / alone: {ratio:.3f} (best of {args.repeat}), {ratio_med:.3f} (median); target <= {TARGET}:"
            f" {verdict}"
        )
        text.append(
            f"per round: {', '.join(f'{x:.3f}' for x in paired)}; median of the rounds' ratios {ratio_rounds:.3f}"
        )
    if known:
        text.append(
            f"this machine's fresh-page cost during the run: {min(known):.1f}-{max(known):.1f} µs per 4 KiB page"
            f" ({B.TOUCH_MIB} MiB allocated and written in a new process at the start and end of each round;"
            " bare metal: ~0.2-0.5 µs)"
        )
    fp_end = B._tracekit_fingerprint()
    if fp_end["sha1"] != fp_start["sha1"]:
        text.append(
            f"note: tracekit's sources changed during the run ({fp_start['sha1'][:12]} -> {fp_end['sha1'][:12]})"
        )
    print("\n".join(text), flush=True)
    result = {
        "started": started,
        "argv": sys.argv,
        "trace": info,
        "check": check,
        "rows": {
            k: {
                **st[k],
                "runs": [
                    {x: r.get(x) for x in ("wall_s", "user_s", "sys_s", "polled_vmhwm_kib", "rc", "error")}
                    for r in runs[k]
                ],
            }
            for k in runs
        },  # fmt: skip
        "ratio_best": ratio,
        "ratio_median": ratio_med,
        "ratio_per_round": paired,
        "ratio_rounds_median": ratio_rounds,
        "target": TARGET,
        "first_touch_us_per_page": touch,
        "loadavg_end": load,
        "tracekit_source": {"start": fp_start, "end": fp_end},
        "table": "\n".join(text),
    }
    (out_dir / "replay-results.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
