"""Regenerate the HTA 0.5.0 oracle numbers (tests/data/hta_oracle/hta_050.json).

Exact command (run from the repository root, with the separate HTA venv):

    python3 -m venv /tmp/hta050 && /tmp/hta050/bin/pip install HolisticTraceAnalysis==0.5.0
    HTA_DISABLE_NS_ROUNDING=1 /tmp/hta050/bin/python tests/data/hta_oracle/regen.py \
        /work/shared/corpus/hta/tests/data > tests/data/hta_oracle/hta_050.json

The argument is the HTA repository's tests/data directory (read in place, never
copied).  HTA's logging goes to stderr; only the JSON goes to stdout.  This script is
NOT part of tracekit and is not collected by pytest; it needs HTA, which tracekit
does not depend on.  See README.md in this directory for what every number means.

Variants computed per HTA load (numbers are per rank, HTA units = microseconds):

* filtered_default       -- public API: TraceAnalysis(trace_dir=...) then
                            get_temporal_breakdown(visualize=False) /
                            get_comm_comp_overlap(visualize=False).  HTA drops the last
                            ProfilerStep and GPU rows without a kept CPU correlation.
* include_last_step_api  -- public API with include_last_profiler_step=True.  Because of
                            HTA's stale 'end' column this still drops GPU rows whose
                            correlation has no CPU row (and keeps the last step).
* unfiltered             -- Trace(...).parse_traces() + _align_all_ranks() only (no
                            _filter_irrelevant_gpu_kernels), then HTA's own
                            BreakdownAnalysis / CommunicationAnalysis classmethods.  This
                            is the variant to compare tracekit against.
* unfiltered_script      -- the same four temporal numbers + overlap recomputed in this
                            script with numpy from the unfiltered HTA dataframe (rows with
                            stream != -1, HTA kernel classes), as a cross-check and to get
                            the overlap unrounded (HTA's API rounds it to 2 decimals).
                            The filtered variants carry the same recomputation under
                            "script_check".
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import sys
import tempfile
from typing import Any, Dict, List

sys.dont_write_bytecode = True  # keep tests/data free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exact_ref import TRACES, exact_reference  # noqa: E402

TWO_RANK_DIR = "trace_filter"
COMMAND = (
    "HTA_DISABLE_NS_ROUNDING=1 /tmp/hta050/bin/python tests/data/hta_oracle/regen.py "
    "/work/shared/corpus/hta/tests/data > tests/data/hta_oracle/hta_050.json"
)


def _num(x: Any) -> Any:
    """numpy scalar -> python; NaN -> None."""
    if x is None:
        return None
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def _temporal(df) -> List[Dict[str, Any]]:
    out = []
    for _, r in df.iterrows():
        out.append(
            {
                "rank": int(r["rank"]),
                "kernel_time_us": _num(r["kernel_time(us)"]),
                "idle_us": _num(r["idle_time(us)"]),
                "compute_us": _num(r["compute_time(us)"]),
                "non_compute_us": _num(r["non_compute_time(us)"]),
                "idle_pctg": _num(r["idle_time_pctg"]),
                "compute_pctg": _num(r["compute_time_pctg"]),
                "non_compute_pctg": _num(r["non_compute_time_pctg"]),
            }
        )
    return out


def _overlap(df) -> List[Dict[str, Any]]:
    return [
        {
            "rank": int(r["rank"]),
            "comm_comp_overlap_pctg": _num(r["comp_comm_overlap_pctg"]),
        }
        for _, r in df.iterrows()
    ]


def _row_stats(t) -> Dict[str, Any]:
    """Counts of the rows HTA treats as GPU activity (stream != -1), per rank."""
    from hta.utils.utils import get_kernel_type

    sym = t.symbol_table.get_sym_table()
    res = {}
    for rank, df in sorted(t.traces.items()):
        g = df[df["stream"].ne(-1)]
        cats = g["cat"].map(lambda i: sym[i]).value_counts().to_dict()
        types = g["name"].map(lambda i: get_kernel_type(sym[i])).value_counts().to_dict()
        names = [sym[i] for i in g["name"].unique()]
        res[str(rank)] = {
            "n_rows_total": int(len(df)),
            "n_gpu_rows_stream_ne_minus1": int(len(g)),
            "by_cat": {k: int(v) for k, v in sorted(cats.items())},
            "by_hta_kernel_type": {k: int(v) for k, v in sorted(types.items())},
            "comm_kernel_names": sorted(n for n in names if get_kernel_type(n) == "COMMUNICATION"),
            "other_class_names": sorted(n for n in names if get_kernel_type(n) == "OTHER"),
            "n_profiler_step_rows": int(df["name"].map(lambda i: "ProfilerStep" in sym[i]).sum()),
            "ts_dtype": str(df["ts"].dtype),
            "dur_dtype": str(df["dur"].dtype),
            "n_negative_dur_gpu_rows": int((g["dur"] < 0).sum()),
        }
    return res


def _union(ts, end):
    """numpy interval union -> (starts, ends) arrays."""
    import numpy as np

    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    if len(ts) == 0:
        return ts, end
    run_max = np.maximum.accumulate(end)
    new = np.empty(len(ts), dtype=bool)
    new[0] = True
    new[1:] = ts[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    starts = ts[idx]
    ends = np.maximum.reduceat(end, idx)
    return starts, ends


def _inter_len(a, b) -> float:
    (as_, ae), (bs, be) = a, b
    i = j = 0
    tot = 0.0
    while i < len(as_) and j < len(bs):
        lo, hi = max(as_[i], bs[j]), min(ae[i], be[j])
        if hi > lo:
            tot += float(hi - lo)
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return tot


def _script_numbers(t) -> List[Dict[str, Any]]:
    """Recompute the temporal breakdown + overlap from the HTA dataframe with numpy."""
    import numpy as np
    from hta.utils.utils import get_kernel_type

    sym = t.symbol_table.get_sym_table()
    out = []
    for rank, df in sorted(t.traces.items()):
        g = df[df["stream"].ne(-1)]
        ts = g["ts"].to_numpy(dtype="float64")
        end = ts + g["dur"].to_numpy(dtype="float64")  # HTA's 'end' column is stale
        kt = np.array([get_kernel_type(sym[i]) for i in g["name"]])
        if len(ts) == 0:
            out.append({"rank": int(rank), "error": "no rows with stream != -1"})
            continue
        span = float(end.max() - ts.min())
        s, e = _union(ts, end)
        busy = float((e - s).sum())
        comp = _union(ts[kt == "COMPUTATION"], end[kt == "COMPUTATION"])
        comm = _union(ts[kt == "COMMUNICATION"], end[kt == "COMMUNICATION"])
        comp_len = float((comp[1] - comp[0]).sum())
        comm_len = float((comm[1] - comm[0]).sum())
        ov = _inter_len(comm, comp)
        out.append(
            {
                "rank": int(rank),
                "kernel_time_us": span,
                "idle_us": span - busy,
                "compute_us": comp_len,
                "non_compute_us": span - comp_len - (span - busy),
                "comm_us": comm_len,
                "comm_comp_overlap_pctg": (100.0 * ov / comm_len) if comm_len else None,
            }
        )
    return out


def _run(label: str, fn) -> Any:
    try:
        return fn()
    except Exception as exc:  # record, don't abort the whole oracle
        return {"error": f"{type(exc).__name__}: {exc}"}


def analyse_dir(trace_dir: str) -> Dict[str, Any]:
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.analyzers.communication_analysis import CommunicationAnalysis
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    res: Dict[str, Any] = {}

    def filtered(include_last: bool):
        ta = TraceAnalysis(trace_dir=trace_dir, include_last_profiler_step=include_last)
        sym = ta.t.symbol_table.get_sym_id_map()
        return {
            "rank_files": {str(k): os.path.basename(v) for k, v in sorted(ta.t.trace_files.items())},
            "alignment_min_ts_us": _num(ta.t.min_ts),
            "n_distinct_profiler_step_names": sum("ProfilerStep" in k for k in sym),
            "temporal": _temporal(ta.get_temporal_breakdown(visualize=False)),
            "overlap": _overlap(ta.get_comm_comp_overlap(visualize=False)),
            "gpu_rows": _row_stats(ta.t),
            "script_check": _run("s", lambda: _script_numbers(ta.t)),
        }

    res["filtered_default"] = _run("filtered_default", lambda: filtered(False))
    res["include_last_step_api"] = _run("include_last_step_api", lambda: filtered(True))

    def unfiltered():
        t = Trace(trace_dir=trace_dir)
        t.parse_traces(use_multiprocessing=False)
        t._align_all_ranks()  # what load_traces does, minus _filter_irrelevant_gpu_kernels
        for rank, df in list(t.traces.items()):
            df = df.set_index("index", drop=False)
            df.index.names = [None]
            t.traces[rank] = df
        t.is_parsed = True
        return t

    t = _run("unfiltered", unfiltered)
    if isinstance(t, dict):
        res["unfiltered"] = t
        res["unfiltered_script"] = t
        return res
    res["unfiltered"] = {
        "rank_files": {str(k): os.path.basename(v) for k, v in sorted(t.trace_files.items())},
        "alignment_min_ts_us": _num(t.min_ts),
        "temporal": _run("t", lambda: _temporal(BreakdownAnalysis.get_temporal_breakdown(t, visualize=False))),
        "overlap": _run("o", lambda: _overlap(CommunicationAnalysis.get_comm_comp_overlap(t, visualize=False))),
        "gpu_rows": _row_stats(t),
    }
    res["unfiltered_script"] = _run("s", lambda: _script_numbers(t))
    return res


def main(root: str) -> Dict[str, Any]:
    import hta
    import numpy
    import pandas
    from importlib.metadata import version

    env = os.environ.get("HTA_DISABLE_NS_ROUNDING")
    if env != "1":
        print("warning: HTA_DISABLE_NS_ROUNDING is not 1", file=sys.stderr)
    out: Dict[str, Any] = {
        "generator": "tests/data/hta_oracle/regen.py",
        "command": COMMAND,
        "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hta_version": version("HolisticTraceAnalysis"),
        "hta_module_file": hta.__file__,
        "env": {"HTA_DISABLE_NS_ROUNDING": env},
        "python": platform.python_version(),
        "pandas": pandas.__version__,
        "numpy": numpy.__version__,
        "corpus_root": "HTA repository tests/data (here: " + root + ")",
        "units": {
            "hta": "microseconds (float64; HTA's ts/dur columns in µs after alignment)",
            "exact_reference": "integer nanoseconds",
            "pctg": "percent (HTA rounds to 2 decimals)",
        },
        "traces": {},
        "two_rank_dir_loads": {},
    }
    with tempfile.TemporaryDirectory(prefix="hta_oracle_") as tmp:
        for i, rel in enumerate(TRACES):
            d = os.path.join(tmp, f"t{i}")
            os.mkdir(d)
            os.symlink(os.path.join(os.path.abspath(root), rel), os.path.join(d, os.path.basename(rel)))
            entry = {"relpath": rel, "load": "single file (symlink in its own temp dir)"}
            entry.update(analyse_dir(d))
            out["traces"][rel] = entry
    two = os.path.join(os.path.abspath(root), TWO_RANK_DIR)
    entry = {
        "relpath": TWO_RANK_DIR + "/",
        "load": "whole directory (both ranks; HTA subtracts the global min ts)",
    }
    entry.update(analyse_dir(two))
    out["two_rank_dir_loads"][TWO_RANK_DIR] = entry

    out["exact_reference"] = exact_reference(root, TRACES)

    # convenience: HTA 'unfiltered' minus exact, in µs (single-file loads, rank 0 row);
    # the overlap uses the unrounded unfiltered_script value.
    deltas = {}
    for rel in TRACES:
        ex = out["exact_reference"][rel]
        unf = out["traces"][rel].get("unfiltered", {}).get("temporal")
        if not isinstance(unf, list) or not unf or ex.get("span_ns") is None:
            continue
        h = unf[0]
        sc = out["traces"][rel].get("unfiltered_script")
        ovp = sc[0].get("comm_comp_overlap_pctg") if isinstance(sc, list) else None
        deltas[rel] = {
            "kernel_time_us": h["kernel_time_us"] - ex["span_ns"] / 1000,
            "idle_us": h["idle_us"] - ex["idle_ns"] / 1000,
            "compute_us": h["compute_us"] - ex["compute_ns"] / 1000,
            "non_compute_us": h["non_compute_us"] - ex["non_compute_ns"] / 1000,
            "overlap_pctg_unrounded": (
                None if ovp is None or ex["comm_comp_overlap_pctg"] is None else ovp - ex["comm_comp_overlap_pctg"]
            ),
        }
    out["hta_unfiltered_minus_exact"] = deltas
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with contextlib.redirect_stdout(sys.stderr):
        result = main(sys.argv[1])
    json.dump(result, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
