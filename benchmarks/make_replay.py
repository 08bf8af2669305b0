"""A big graph-replayed decode trace with its capture traces, written fast: the replay benchmark's input.

Usage::

    python benchmarks/make_replay.py OUT_DIR [--mb 300] [--mode PIECEWISE] [--layers 32] [--bs 16]
                                     [--captures 8,16,32] [--block-steps 4] [--seed 0] [--gz-level 9]

or, from Python, ``make_replay(out_dir, mb=..., ...)``. It writes::

    OUT_DIR/replay.trace.json                         the replay, >= ``mb`` MB of JSON (10^6 bytes)
    OUT_DIR/replay.trace.json.gz                      its gzip copy at ``gz_level`` (unless gz_level is 0)
    OUT_DIR/capture_traces/execution_details.json     as fixtures/synthlib/graph_replay.py writes them
    OUT_DIR/capture_traces/graph_capture_rank_0.bs<N>_<MODE>.pt.trace.json.gz
    OUT_DIR/replay.info.json                          what was written (sizes, records, steps, seconds)

How: the graph generator (``fixtures/synthlib/graph_replay.py``, ``build_case``) builds a *block* of
``block_steps`` decode steps and the captures, exactly as it builds the committed fixtures (the same model, kernel
names, grids, shapes and step annotations). Each event of the block becomes a text template once (its ``ts``,
``correlation`` and ``External id`` left as fields); the replay is then the block repeated, tile ``b`` shifted by
``b`` block spans in time and by ``b`` blocks' worth of correlation and External ids, streamed to the file in
Kineto's order (every tile's CPU records, then every tile's GPU records) without building the events in memory.
Every tile replays the same graphs as the block, so the captures attribute all of them. Deterministic byte for byte
for given options (gzip: for one zlib build). At the defaults: 300 MB, ~0.75 M records, in seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from fixtures.synthlib.graph_replay import build_case, capture_name  # noqa: E402
from fixtures.synthlib.kineto import TAIL_KEYS, Us, write_trace  # noqa: E402
from make_trace import gzip_file  # noqa: E402

GENERATOR_VERSION = 1
MB = 1_000_000
GAP_NS = 400_000  # idle time between one tile's last event and the next tile's first
_T, _C, _E = "@@T@@", "@@C@@", "@@E@@"


def _template(ev: dict) -> tuple[str, int, int | None, int | None]:
    """(format string with fields {0} ts, {1} correlation, {2} External id; ts ns; correlation; External id) of
    one X event, rendered as the generator's writer renders it."""
    args = ev.get("args")
    corr = ext = None
    parts = []
    for k, v in ev.items():
        if k == "ts":
            text = _T
        elif isinstance(v, Us):
            text = f"{v.ns // 1000}.{v.ns % 1000:03d}"
        elif k == "args" and isinstance(args, dict):
            a = dict(args)
            if "correlation" in a:
                corr, a["correlation"] = int(a["correlation"]), _C
            if "External id" in a:
                ext, a["External id"] = int(a["External id"]), _E
            text = json.dumps(a)
        else:
            text = json.dumps(v)
        parts.append(f"{json.dumps(k)}: {text}")
    s = "{" + ", ".join(parts) + "}"
    s = s.replace("{", "{{").replace("}", "}}")
    s = s.replace(_T, "{0}").replace(f'"{_C}"', "{1}").replace(f'"{_E}"', "{2}")
    return "  " + s, ev["ts"].ns, corr, ext


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _write_tiles(fh, templates: list, tiles: int, span: int, dc: int, de: int) -> int:
    """Write every tile of ``templates`` (tile-major), ',\\n'-separated; returns the bytes written."""
    n = 0
    for b in range(tiles):
        off, oc, oe = b * span, b * dc, b * de
        chunk = ",\n".join(
            t.format(_us(ts + off), 0 if c is None else c + oc, 0 if e is None else e + oe) for t, ts, c, e in templates
        )
        n += fh.write(",\n" + chunk)
    return n


def make_replay(
    out_dir,
    *,
    mb: float = 300,
    mode: str = "PIECEWISE",
    layers: int = 32,
    bs: int = 16,
    captures: tuple = (8, 16, 32),
    block_steps: int = 4,
    seed: int = 0,
    gz_level: int = 9,
    platform: str = "cuda",
) -> dict:
    """Write the replay (>= ``mb`` MB of JSON), its gzip copy and its captures under ``out_dir``; return the info."""
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    replay, caps, truth, _ = build_case(
        platform=platform, mode=mode, bs=bs, layers=layers, steps=block_steps, captures=tuple(captures), seed=seed
    )
    for fname, doc in caps.items():
        write_trace(out / "capture_traces" / fname, doc)
    if caps:
        det = [{"file": capture_name(c["batch_size"], mode), "batch_size": c["batch_size"], "mode": mode}
               for c in truth["captures"]]  # fmt: skip
        (out / "capture_traces" / "execution_details.json").write_text(json.dumps(det, indent=2) + "\n")
    events = replay["traceEvents"]
    meta = [e for e in events if e.get("ph") != "X"]
    xs = [e for e in events if e.get("ph") == "X"]
    cpu = [_template(e) for e in xs if e["pid"] != 0]
    gpu = [_template(e) for e in xs if e["pid"] == 0]
    first = min(e["ts"].ns for e in xs)
    last = max(e["ts"].ns + e["dur"].ns for e in xs)
    span = last - first + GAP_NS
    corrs = [c for _, _, c, _ in cpu + gpu if c is not None]
    exts = [e for _, _, _, e in cpu + gpu if e is not None]
    dc = max(corrs) - min(corrs) + 1
    de = max(exts) - min(exts) + 1
    one = sum(len(t.format(_us(ts), c or 0, e or 0)) + 2 for t, ts, c, e in cpu + gpu)  # tile 0's bytes (ids grow)
    tiles = max(1, -(-int(mb * MB) // one))
    js = out / "replay.trace.json"
    head = {k: v for k, v in replay.items() if k != "traceEvents" and k not in TAIL_KEYS}
    head["traceName"] = f"synthetic: benchmarks/make_replay.py ({mode}, {layers} layers, bs {bs}, seed {seed})"
    with open(js, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items() if k != "traceName"))
        fh.write('  "traceEvents": [\n')
        fh.write(",\n".join("  " + json.dumps(m) for m in meta))
        _write_tiles(fh, cpu, tiles, span, dc, de)
        _write_tiles(fh, gpu, tiles, span, dc, de)
        fh.write("\n  ],\n")
        tail = [k for k in TAIL_KEYS if k in replay]
        tail_vals = {**{k: replay[k] for k in tail}, "traceName": head["traceName"]}
        fh.write(",\n".join(f"  {json.dumps(k)}: {json.dumps(tail_vals[k])}" for k in tail) + "\n}\n")
    gen_s = time.perf_counter() - t0
    info = {
        "generator": "benchmarks/make_replay.py",
        "generator_version": GENERATOR_VERSION,
        "mode": mode,
        "layers": layers,
        "bs": bs,
        "captures": list(captures),
        "block_steps": block_steps,
        "seed": seed,
        "platform": platform,
        "steps": tiles * block_steps,
        "records": len(meta) + tiles * (len(cpu) + len(gpu)),
        "replayed_kernels": tiles * truth["summary"]["replayed_kernels"],
        "graph_launches": tiles * truth["summary"]["graph_launches"],
        "json": str(js),
        "bytes": js.stat().st_size,
        "generate_s": round(gen_s, 2),
    }
    if gz_level:
        t1 = time.perf_counter()
        gz = out / "replay.trace.json.gz"
        info.update(gz=str(gz), gz_level=gz_level, gz_bytes=gzip_file(js, gz, gz_level))
        info["gzip_s"] = round(time.perf_counter() - t1, 2)
    (out / "replay.info.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a big graph-replayed decode trace with its captures (benchmarks)")
    ap.add_argument("out_dir")
    ap.add_argument("--mb", type=float, default=300, help="JSON floor in MB (default 300)")
    ap.add_argument("--mode", default="PIECEWISE", choices=("FULL", "PIECEWISE"))
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--bs", type=int, default=16)
    ap.add_argument("--captures", default="8,16,32", help="captured batch sizes (default 8,16,32)")
    ap.add_argument("--block-steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gz-level", type=int, default=9, help="gzip copy's level; 0: none (default 9)")
    a = ap.parse_args(argv)
    info = make_replay(
        a.out_dir,
        mb=a.mb,
        mode=a.mode,
        layers=a.layers,
        bs=a.bs,
        captures=tuple(int(x) for x in a.captures.split(",") if x.strip()),
        block_steps=a.block_steps,
        seed=a.seed,
        gz_level=a.gz_level,
    )
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
