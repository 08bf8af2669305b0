"""Exact (integer-nanosecond) reference for the HTA oracle traces -- stdlib only, no HTA.

Run standalone with any Python >= 3.10:

    python3 tests/data/hta_oracle/exact_ref.py /work/shared/corpus/hta/tests/data

It prints a JSON object {relpath: result}.  ``regen.py`` imports ``exact_reference``
from this file and stores the same results under the key "exact_reference" of
hta_050.json.

Definitions (all times are integer nanoseconds, in the trace's own ts clock, i.e.
``ts`` in µs * 1000; ``baseTimeNanoseconds`` is NOT added):

* ts and dur are parsed from the JSON text exactly (``parse_float=decimal.Decimal``)
  and converted with ``Decimal * 1000``; a value that is not a whole number of ns is
  reported in ``non_integral_ns_values`` (expected 0) and rounded half-even.
* GPU activity = events with ph == "X" and cat in {kernel, gpu_memcpy, gpu_memset}
  (category-based, independent of args.stream).
* span_ns   = max(ts + dur) - min(ts) over GPU activity
  busy_ns   = |union of [ts, ts + dur)|
  idle_ns   = span_ns - busy_ns
* With HTA 0.5.0's name classes applied to the same rows (see README):
  compute_ns     = |union of COMPUTATION rows|
  non_compute_ns = span_ns - compute_ns - idle_ns
  comm_ns        = |union of COMMUNICATION rows|
  comm_comp_overlap_ns = |union(COMMUNICATION) ∩ union(COMPUTATION)|
  comm_comp_overlap_pctg = 100 * overlap / comm_ns (null when comm_ns == 0)
"""

from __future__ import annotations

import collections
import decimal
import gzip
import json
import re
import sys
from typing import Any, Dict, Iterable, List, Tuple

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

# Traces covered by the oracle, relative to the HTA repository's tests/data directory.
TRACES = (
    "nccl_parser_config/nccl_data.json.gz",
    "trace_filter/sampled_rank-0.json.gz",
    "trace_filter/sampled_rank-1.json.gz",
    "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
)

# HTA 0.5.0 name classes (hta/utils/utils.py, semantics restated here):
#   COMMUNICATION: re.match('^nccl.*Kernel')
#   MEMORY:        re.match('^Memcpy|^Memset|^dma')
#   COMPUTATION:   NOT re.match('(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)')
#                  i.e. not (nccl...Kernel prefix, 'Memcpy' anywhere, 'Memset' prefix,
#                  'Sync' anywhere)
#   OTHER:         the rest (in practice names containing 'Sync')
_COMM = re.compile(r"^nccl.*Kernel")
_MEM = re.compile(r"^Memcpy|^Memset|^dma")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta050_kernel_type(name: str) -> str:
    if _COMM.match(name):
        return "COMMUNICATION"
    if _MEM.match(name):
        return "MEMORY"
    if not _NOT_COMPUTE.match(name):
        return "COMPUTATION"
    return "OTHER"


def _to_ns(v: Any, bad: List[int]) -> int:
    d = decimal.Decimal(v) if not isinstance(v, decimal.Decimal) else v
    ns = d * 1000
    if ns != ns.to_integral_value():
        bad[0] += 1
    return int(ns.to_integral_value(rounding=decimal.ROUND_HALF_EVEN))


def _union(intervals: Iterable[Tuple[int, int]]) -> List[Tuple[int, int]]:
    out: List[Tuple[int, int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _length(merged: List[Tuple[int, int]]) -> int:
    return sum(e - s for s, e in merged)


def _intersection_length(a: List[Tuple[int, int]], b: List[Tuple[int, int]]) -> int:
    i = j = 0
    tot = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            tot += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tot


def _hta_stream(v: Any) -> int:
    """What HTA 0.5.0's normalize_gpu_stream_numbers makes of args.stream (default -1)."""
    try:
        return int(v)
    except (ValueError, TypeError):
        return -1


def exact_for_file(path: str) -> Dict[str, Any]:
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as fh:
        doc = json.loads(fh.read(), parse_float=decimal.Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    bad = [0]
    rows = []  # (ts_ns, end_ns, cat, name)
    cat_counts: Dict[str, int] = collections.Counter()
    gpu_without_stream = 0
    zero_dur = 0
    cuda_sync = 0
    stream_carrying_non_gpu: Dict[str, int] = collections.Counter()
    hta_effective_non_gpu: Dict[str, int] = collections.Counter()
    for ev in events:
        if not isinstance(ev, dict):
            continue
        cat = ev.get("cat")
        ph = ev.get("ph")
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        if cat == "cuda_sync":
            cuda_sync += 1
        if cat in GPU_CATS and ph == "X":
            cat_counts[cat] += 1
            if "stream" not in args:
                gpu_without_stream += 1
            ts = _to_ns(ev["ts"], bad)
            dur = _to_ns(ev.get("dur", 0), bad)
            if dur == 0:
                zero_dur += 1
            rows.append((ts, ts + dur, cat, str(ev.get("name", ""))))
        elif "stream" in args:
            key = f"{ph}/{cat}"
            stream_carrying_non_gpu[key] += 1
            # HTA keeps rows with a dur and cat != 'Trace'; stream != -1 => "GPU"
            if ev.get("dur") is not None and cat != "Trace" and _hta_stream(args["stream"]) != -1:
                hta_effective_non_gpu[key] += 1

    res: Dict[str, Any] = {
        "unit": "ns (integer, trace ts clock: ts_us*1000)",
        "gpu_activity_definition": "ph=='X' and cat in kernel/gpu_memcpy/gpu_memset",
        "n_gpu_rows": len(rows),
        "n_by_cat": dict(sorted(cat_counts.items())),
        "gpu_rows_without_stream_arg": gpu_without_stream,
        "zero_dur_gpu_rows": zero_dur,
        "cuda_sync_events": cuda_sync,
        "stream_carrying_non_gpu_events_raw": dict(sorted(stream_carrying_non_gpu.items())),
        "stream_carrying_non_gpu_events_hta_counts_as_gpu": dict(sorted(hta_effective_non_gpu.items())),
        "non_integral_ns_values": bad[0],
        "baseTimeNanoseconds": (doc.get("baseTimeNanoseconds") if isinstance(doc, dict) else None),
    }
    if not rows:
        res.update(span_ns=None, busy_ns=None, idle_ns=None)
        return res
    min_ts = min(r[0] for r in rows)
    max_end = max(r[1] for r in rows)
    span = max_end - min_ts
    busy = _length(_union((r[0], r[1]) for r in rows))
    types = collections.Counter(hta050_kernel_type(r[3]) for r in rows)
    comp = _union((r[0], r[1]) for r in rows if hta050_kernel_type(r[3]) == "COMPUTATION")
    comm = _union((r[0], r[1]) for r in rows if hta050_kernel_type(r[3]) == "COMMUNICATION")
    comp_ns = _length(comp)
    comm_ns = _length(comm)
    ov = _intersection_length(comm, comp)
    res.update(
        first_ts_ns=min_ts,
        last_end_ns=max_end,
        span_ns=span,
        busy_ns=busy,
        idle_ns=span - busy,
        hta050_class_counts=dict(sorted(types.items())),
        compute_ns=comp_ns,
        non_compute_ns=span - comp_ns - (span - busy),
        comm_ns=comm_ns,
        comm_comp_overlap_ns=ov,
        comm_comp_overlap_pctg=(100.0 * ov / comm_ns) if comm_ns else None,
        idle_pctg=100.0 * (span - busy) / span if span else None,
        compute_pctg=100.0 * comp_ns / span if span else None,
    )
    return res


def exact_reference(root: str, relpaths: Iterable[str]) -> Dict[str, Any]:
    import os

    return {rp: exact_for_file(os.path.join(root, rp)) for rp in relpaths}


if __name__ == "__main__":
    print(json.dumps(exact_reference(sys.argv[1], TRACES), indent=1))
