"""Launch-log analyses: the records (``log``), the memory ledger (A11, ``ledger``) and KV capacity (A12, ``capacity``).

All memory is GiB (sglang prints "GB" for bytes / 2**30). How the ledger is computed is in docs/ledger.md;
in short, per rank:

* the *timeline* is every free-memory reading of the rank in log order (Load weight begin/end, the fork's
  weight-shard release, Memory pool end, graph capture begin/end, the scheduler's available_gpu_mem);
* each pair of neighbouring readings is an *interval*. A weight load, a graph capture or a line that says
  what it released is *measured*: the log's own "mem usage" explains its fall. Any other interval is a
  *residual* interval: residual = fall in free memory − the allocations logged inside it (may be negative);
* the study's rows follow: weights resident = load peak − released after it, CUDA graph per graph, NCCL init,
  workspace residual = Σ residuals, runtime margin = the last reading, fixed overhead = their sum, state
  pools = the logged pools (KV, SSM state, fork pools, draft KV), request slots and the req_to_token table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from ...ingest.sglang_log import Record, SglangLog, rank_label
from ...result import Result
from .ledger_engine import GIB, OptionError, RankLedger, completeness, frame, one_launch, resolve_rank, round_gib
from .ledger_rows import graph_buckets, rank_ledger
from ..steps.keywords import options_as_objects

__all__ = ["GIB", "OptionError", "records_frame", "log_records", "ledger"]


def records_frame(records: Sequence[Record]) -> pd.DataFrame:
    """The ``records`` table: ``line, ranks, kind, fields`` where ``fields`` holds each record's own dict.

    ``attrs["spread"] = "fields"`` asks JSON writers to merge that dict into the row (the JSON contract is
    ``{line, ranks, kind, ...fields}``: fields absent from the line are absent from the row)."""
    df = pd.DataFrame(
        {
            "line": pd.Series([r.line for r in records], dtype="int64"),
            "ranks": pd.Series([dict(r.ranks) for r in records], dtype=object),
            "kind": pd.Series([r.kind for r in records], dtype=object),
            "fields": pd.Series([dict(r.fields) for r in records], dtype=object),
        }
    )
    df.attrs["spread"] = "fields"
    return df


def _unrecognised_rows(log: SglangLog, tag: str | None = None) -> list[dict[str, Any]]:
    return [
        {**({"log": tag} if tag else {}), "line": ln, "ranks": dict(rk), "text": text}
        for ln, rk, text in log.unrecognised
    ]


@options_as_objects
def log_records(log: SglangLog, *, rank: str | None = None, kinds: Sequence[str] | None = None) -> Result:
    """``tracekit log``: every recognised record with its line number and rank tags, and the unrecognised
    lines that mention memory."""
    recs = log.records
    params: dict[str, Any] = {"rank": rank, "kinds": list(kinds) if kinds else None}
    if rank is not None:
        want = resolve_rank(log, rank)
        recs = [r for r in recs if r.ranks == want]
    if kinds:
        recs = [r for r in recs if r.kind in set(kinds)]
    complete, reason = completeness(log)
    counts: dict[str, int] = {}
    for r in recs:
        counts[r.kind] = counts.get(r.kind, 0) + 1
    summary = {
        "lines": log.lines,
        "records": len(recs),
        "unrecognised": log.unrecognised_total,
        "complete": complete,
        "incomplete_reason": reason,
        "ranks_present": [rank_label(r) for r in log.ranks_present()],
        "pattern_sets": dict(log.set_counts),
        "kinds": counts,
    }
    warnings = list(log.warnings)
    if log.unrecognised and log.unrecognised_total == len(log.unrecognised):  # else the log's own warning says it
        warnings.append(
            f"{log.path}: {log.unrecognised_total:,} line(s) mention memory but match no pattern"
            " (see tables.unrecognised)"
        )
    if not complete:
        warnings.append(f"{log.path}: the launch is incomplete ({reason})")
    return Result(
        command="log",
        inputs=[{"path": log.path}],
        params=params,
        summary=summary,
        tables={
            "records": records_frame(recs),
            "unrecognised": frame(_unrecognised_rows(log), ["line", "ranks", "text"]),
        },
        warnings=warnings,
    )


TIMELINE_COLUMNS = ["log", "stage", "avail_gib", "line", "kind"]
INTERVAL_COLUMNS = [
    "log",
    "name",
    "type",
    "from_stage",
    "to_stage",
    "from_line",
    "to_line",
    "avail_before_gib",
    "avail_after_gib",
    "fall_gib",
    "logged_gib",
    "residual_gib",
]
ALLOC_COLUMNS = ["log", "what", "role", "gib", "mib", "line", "interval", "counted_in", "state_pool"]
BUCKET_COLUMNS = ["log", "graph", "size", "avail_gib", "cost_gib", "line"]
SKEW_DERIVED = ("usable_gib", "weights_resident_gib", "cuda_graph_gib", "fixed_overhead_gib")
DISAGREE_METRICS = ("kv_gib", "kv_tokens", "state_pools_gib")
SKEW_COLUMNS = ["log", "metric", "ranks", "min", "max", "skew", "min_rank", "max_rank"]
ROW_COLUMNS = ["row", "value", "lines", "how", "note"]
PAIR_COLUMNS = ["row", "value_a", "value_b", "diff", "lines_a", "lines_b", "note"]


def _skew(log: SglangLog, tag: str) -> list[dict[str, Any]]:
    ranks = [r for r in log.ranks_present() if r]
    if len(ranks) < 2:
        return []
    metrics: dict[str, list[tuple[float, str]]] = {}
    for rk in ranks:
        led = rank_ledger(log, rk)
        label = rank_label(rk)
        seen: set[str] = set()
        for p in led.points:
            key = f"{p.stage}.avail_gib"
            if key not in seen:
                seen.add(key)
                metrics.setdefault(key, []).append((p.avail, label))
        for row in led.rows:  # rows read from one line each rank prints, and what they add up to
            if (row["how"] == "read" or row["row"] in SKEW_DERIVED) and isinstance(row["value"], (int, float)):
                metrics.setdefault(row["row"], []).append((row["value"], label))
    out = []
    for key, vals in metrics.items():
        if len(vals) < 2:
            continue
        lo, hi = min(vals), max(vals)
        out.append(
            {
                "log": tag,
                "metric": key,
                "ranks": len(vals),
                "min": lo[0],
                "max": hi[0],
                "skew": _sub(hi[0], lo[0]),
                "min_rank": lo[1],
                "max_rank": hi[1],
            }
        )
    return out


def _tables_for(log: SglangLog, led: RankLedger, tag: str) -> dict[str, list[dict[str, Any]]]:
    bucket_rows = []
    for gr in led.graphs:
        for b in graph_buckets(gr):
            bucket_rows.append(
                {
                    "log": tag,
                    "graph": gr.label,
                    "size": b["size"],
                    "avail_gib": b["avail_gib"],
                    "cost_gib": round_gib(b["cost_gib"]),
                    "line": b["lines"][0],
                }
            )
    return {
        "timeline": [
            {"log": tag, "stage": p.stage, "avail_gib": p.avail, "line": p.line, "kind": p.kind} for p in led.points
        ],
        "intervals": [{"log": tag, **iv} for iv in led.intervals],
        "allocations": [
            {
                "log": tag,
                "what": a.what,
                "role": a.role,
                "gib": round_gib(a.gib),
                "mib": round_gib(a.mib),
                "line": a.line,
                "interval": a.interval,
                "counted_in": a.counted_in,
                "state_pool": a.state_pool,
            }
            for a in led.allocs
        ],
        "graph_buckets": bucket_rows,
        "skew": _skew(log, tag),
        "unrecognised": _unrecognised_rows(log, tag),
    }


def _summary_for(log: SglangLog, led: RankLedger) -> dict[str, Any]:
    return {
        "rank": rank_label(led.ranks),
        "ranks_present": [rank_label(r) for r in log.ranks_present()],
        "complete": led.complete,
        "incomplete_reason": led.incomplete_reason,
        "last_line": led.last_line,
        "lines": log.lines,
        "records": len(log.records),
        "unrecognised": log.unrecognised_total,
        "pattern_sets": dict(log.set_counts),
        "unaccounted_gib": led.unaccounted_gib,
        "missing_rows": list(led.missing),
        **led.values(),
    }


def _warnings_for(log: SglangLog, led: RankLedger) -> list[str]:
    w = list(log.warnings)
    if not led.complete:
        w.append(
            f"{log.path}: the launch is incomplete ({led.incomplete_reason}); the ledger of "
            f"{rank_label(led.ranks)} shows what was read up to line {led.last_line}"
        )
    if log.unrecognised and log.unrecognised_total == len(log.unrecognised):  # else the log's own warning says it
        w.append(
            f"{log.path}: {log.unrecognised_total:,} line(s) mention memory but match no pattern"
            " (see tables.unrecognised)"
        )
    if led.unaccounted_gib is not None and abs(led.unaccounted_gib) > 0.05:
        w.append(
            f"{log.path}: usable − fixed overhead − state pools leaves {led.unaccounted_gib} GiB unaccounted"
            " (a measured interval whose fall differs from its logged usage)"
        )
    return w


@options_as_objects
def ledger(
    log: SglangLog,
    log_b: SglangLog | None = None,
    *,
    rank: str | None = None,
    launch: int | None = None,
    launch_b: int | None = None,
) -> Result:
    """``tracekit ledger``: the memory ledger of one rank (default the lowest present) of one launch (default the
    last complete one); with ``log_b`` both side by side (``diff`` = b − a). Tables: rows, timeline, intervals,
    allocations, graph_buckets, skew, unrecognised."""
    log, launch_warnings = one_launch(log, launch)
    if log_b is not None:
        log_b, more = one_launch(log_b, launch_b)
        launch_warnings += more
    logs = [log] + ([log_b] if log_b is not None else [])
    tags = ["a", "b"][: len(logs)]
    leds = [rank_ledger(lg, resolve_rank(lg, rank)) for lg in logs]
    tables: dict[str, list[dict[str, Any]]] = {}
    for lg, led, tag in zip(logs, leds, tags):
        for name, rows in _tables_for(lg, led, tag).items():
            tables.setdefault(name, []).extend(rows)
    warnings = launch_warnings + [w for lg, led in zip(logs, leds) for w in _warnings_for(lg, led)]
    for lg, led, tag in zip(logs, leds, tags):  # the rows are one rank's: say so when the ranks' pools differ
        for sk in tables["skew"]:
            if sk["log"] == tag and sk["metric"] in DISAGREE_METRICS and sk["skew"]:
                warnings.append(
                    f"{lg.path}: the ranks disagree on {sk['metric']} ({sk['min']:g} on {sk['min_rank']},"
                    f" {sk['max']:g} on {sk['max_rank']}); these rows are {rank_label(led.ranks)}'s own"
                    " readings, not every rank's (tables.skew; --rank picks another)"
                )
    if log_b is None:
        rows_df = frame(leds[0].rows, ROW_COLUMNS)
        summary = _summary_for(log, leds[0])
    else:
        rows_df = frame(_pair_rows(leds[0], leds[1]), PAIR_COLUMNS)
        sa, sb = _summary_for(log, leds[0]), _summary_for(log_b, leds[1])
        diff = {r: _sub(leds[1].values().get(r), leds[0].values().get(r)) for r in _row_order(leds[0], leds[1])}
        summary = {
            "logs": 2,
            "complete": sa["complete"] and sb["complete"],
            "a": sa,
            "b": sb,
            "diff": {k: v for k, v in diff.items() if v is not None},
        }
    return Result(
        command="ledger",
        inputs=[{"path": lg.path, "rank": rank_label(led.ranks)} for lg, led in zip(logs, leds)],
        params={"rank": rank, "launch": launch},
        summary=summary,
        tables={
            "rows": rows_df,
            "timeline": frame(tables["timeline"], TIMELINE_COLUMNS),
            "intervals": frame(tables["intervals"], INTERVAL_COLUMNS),
            "allocations": frame(tables["allocations"], ALLOC_COLUMNS),
            "graph_buckets": frame(tables["graph_buckets"], BUCKET_COLUMNS),
            "skew": frame(tables["skew"], SKEW_COLUMNS),
            "unrecognised": frame(tables["unrecognised"], ["log", "line", "ranks", "text"]),
        },
        warnings=warnings,
    )


def _sub(b: Any, a: Any) -> Any:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    d = b - a
    return round_gib(d) if isinstance(d, float) else d


def _row_order(a: RankLedger, b: RankLedger) -> list[str]:
    names = [r["row"] for r in a.rows]
    return names + [r["row"] for r in b.rows if r["row"] not in names]


def _pair_rows(a: RankLedger, b: RankLedger) -> list[dict[str, Any]]:
    ra = {r["row"]: r for r in a.rows}
    rb = {r["row"]: r for r in b.rows}
    out = []
    for name in _row_order(a, b):
        x, y = ra.get(name), rb.get(name)
        out.append(
            {
                "row": name,
                "value_a": x["value"] if x else None,
                "value_b": y["value"] if y else None,
                "diff": _sub(y["value"] if y else None, x["value"] if x else None),
                "lines_a": x["lines"] if x else [],
                "lines_b": y["lines"] if y else [],
                "note": (x or y)["note"],
            }
        )
    return out
