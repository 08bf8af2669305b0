"""The memory-ledger engine over one launch log (docs/ledger.md): rank views, the free-memory timeline, measured and
residual intervals, the logged allocations and CUDA graphs, request slots, and one rank's ledger rows.

All memory is GiB (sglang prints "GB" for bytes / 2**30). :mod:`tracekit.analyses.memory.launch_log` turns this into the
``log`` and ``ledger`` results, :mod:`tracekit.analyses.memory.capacity` into KV capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pandas as pd

from ...errors import MissingDataError, UsageError
from ...ingest.sglang_log import Grammar, Record, SglangLog, parse_rank_spec, rank_label, rank_sort_key, split_launches

GIB = 1 << 30
_ROUND = 6
_UNITS_TO_GIB = {"_gib": 1.0, "_mib": 1.0 / 1024, "_bytes": 1.0 / GIB}
CRASH_KINDS = ("not_enough_memory", "oom")
FINISH_KINDS = ("summary", "ready")


class OptionError(UsageError):
    """Options that do not fit together (exit 2, a usage error)."""


def round_gib(x: float | None) -> float | None:
    return None if x is None else round(float(x) + 0.0, _ROUND) + 0.0


def _gib(name: str, value: Any) -> float | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    for suffix, factor in _UNITS_TO_GIB.items():
        if name.endswith(suffix):
            return float(value) * factor
    return None


# --------------------------------------------------------------------------- rank views


def _is_first_tp(ranks: dict[str, int]) -> bool:
    return ranks.get("TP", 0) == 0


def resolve_rank(log: SglangLog, spec: str | None) -> dict[str, int]:
    """The rank a ledger is about: the one ``spec`` names (all its tags must match), else the lowest present."""
    present = log.ranks_present()
    tagged = [r for r in present if r]
    if spec is None:
        return (tagged or present)[0]
    try:
        want = parse_rank_spec(spec)
    except ValueError:
        err = OptionError(f"--rank {spec!r} is not a rank: write tags such as 'DP0 TP0' or 'TP1' (or 'untagged')")
        raise err from None
    hits = [r for r in present if all(r.get(k) == v for k, v in want.items()) and (want or not r)]
    if not hits:
        names = ", ".join(rank_label(r) for r in present)
        raise MissingDataError(
            f"{log.path} has no line of rank {spec!r}; ranks present: {names}; pass one of them to --rank"
        )
    return min(hits, key=rank_sort_key)


def rank_view(log: SglangLog, ranks: dict[str, int]) -> list[Record]:
    """The rank's own records in log order, plus the untagged tqdm capture bars when the rank is TP0.

    sglang draws the capture progress bars (``Capturing batches (bs=… avail_mem=…)``) on TP rank 0 only, and
    tqdm lines carry no prefix, so they are attributed to a TP0 rank (or to an untagged log's only rank)."""
    tagged = any(r.ranks for r in log.records)
    if not tagged:
        return list(log.records)
    take_bars = bool(ranks) and _is_first_tp(ranks)
    return [r for r in log.records if r.ranks == ranks or (take_bars and not r.ranks and r.kind == "graph_progress")]


# --------------------------------------------------------------------------- one rank's ledger


@dataclass
class Point:
    stage: str
    avail: float
    line: int
    pos: int
    kind: str
    record: Record


@dataclass
class Alloc:
    what: str
    role: str
    gib: float
    mib: float
    line: int
    pos: int
    state_pool: bool
    interval: str = ""
    counted_in: str = ""


@dataclass
class Graph:
    graph: str
    phase: str | None
    begin: Record | None
    end: Record | None
    begin_pos: int
    end_pos: int | None
    progress: list[Record] = field(default_factory=list)
    sizes: list[int] | None = None

    @property
    def label(self) -> str:
        return self.graph + (f"_{self.phase}" if self.phase and self.phase not in ("decode", "prefill") else "")

    def usage(self) -> tuple[float | None, str]:
        if self.end is None:
            return None, ""
        if "usage_gib" in self.end.fields:
            return self.end.fields["usage_gib"], "read"
        if self.begin is not None and "avail_gib" in self.begin.fields and "avail_gib" in self.end.fields:
            return self.begin.fields["avail_gib"] - self.end.fields["avail_gib"], "derived"
        return None, ""


@dataclass
class RankLedger:
    """Everything the ledger found for one rank of one log."""

    ranks: dict[str, int]
    points: list[Point]
    allocs: list[Alloc]
    intervals: list[dict[str, Any]]
    graphs: list[Graph]
    rows: list[dict[str, Any]]
    complete: bool
    incomplete_reason: str | None
    last_line: int
    missing: list[str]
    unaccounted_gib: float | None

    def values(self) -> dict[str, Any]:
        return {r["row"]: r["value"] for r in self.rows}


def role_prefix(role: str) -> str:
    return "draft_" if role == "draft" else ""


def walk_timeline(view: list[Record], g: Grammar) -> tuple[list[Point], list[Alloc], list[Graph], dict[str, Any]]:
    """One pass over a rank's records: timeline points, allocations, graph captures and the notable records."""
    points: list[Point] = []
    allocs: list[Alloc] = []
    graphs: list[Graph] = []
    open_graphs: dict[tuple[str, str | None], Graph] = {}
    notes: dict[str, Any] = {
        "weight_begin": [],
        "weight_end": [],
        "dist_init_end": [],
        "kv": [],
        "released": [],
        "sizes": [],
        "rejected_allocs": [],
    }
    wb = we = pe = 0
    loading: str | None = None
    for pos, r in enumerate(view):
        f, k = r.fields, r.kind
        pat = g.pattern_of(r)
        stage = None
        if k == "weight_begin":
            loading = "target" if wb == 0 else "draft"
            wb += 1
            stage = role_prefix(loading) + "load_weight_begin"
            notes["weight_begin"].append((loading, r))
        elif k == "weight_end":
            role = "target" if we == 0 else "draft"
            we += 1
            loading = None
            stage = role_prefix(role) + "load_weight_end"
            notes["weight_end"].append((role, r))
        elif k == "pool_end":
            stage = ("target" if pe == 0 else "draft") + "_memory_pool_end"
            pe += 1
        elif k in ("graph_begin", "graph_end"):
            stage = _graph_mark(r, pos, graphs, open_graphs)
        elif k == "graph_progress":
            gr = next(reversed(list(open_graphs.values())), None) if open_graphs else None
            if gr is not None:
                gr.progress.append(r)
        elif k == "graph_sizes":
            notes["sizes"].append((pos, r))
        elif k == "summary" and "available_gpu_mem_gib" in f:
            points.append(Point("scheduler_ready", f["available_gpu_mem_gib"], r.line, pos, k, r))
        elif k == "dist_init_end":
            notes["dist_init_end"].append(r)
            if len(notes["dist_init_end"]) > 1 and "usage_gib" in f:  # a second process group (the draft's)
                allocs.append(Alloc("nccl_init", "draft", f["usage_gib"], f["usage_gib"] * 1024, r.line, pos, False))
        if pat is not None and pat.stage and stage is None:
            stage = pat.stage
            if pat.measured and pat.measured[0] in f and pat.measured[1] < 0:
                notes["released"].append(r)
        if stage is not None and "avail_gib" in f and k != "summary":
            points.append(Point(stage, f["avail_gib"], r.line, pos, k, r))
        if pat is not None and pat.alloc is not None and any(x in f.get("rejected", {}) for x in pat.alloc.fields):
            notes["rejected_allocs"].append((pat.alloc.what, pat.alloc.state_pool, r))
        elif pat is not None and pat.alloc is not None:
            parts = [_gib(x, f[x]) for x in pat.alloc.fields if x in f]
            parts = [p for p in parts if p is not None]
            if parts:
                role = loading or ("target" if pe == 0 else "draft")
                size = sum(parts)
                allocs.append(Alloc(pat.alloc.what, role, size, size * 1024, r.line, pos, pat.alloc.state_pool))
                if pat.alloc.what == "kv" and "tokens" in f:
                    notes["kv"].append((role, r))
    _fill_graph_sizes(graphs, notes["sizes"])
    return points, allocs, graphs, notes


def _graph_mark(r: Record, pos: int, graphs: list[Graph], open_graphs: dict[tuple[str, str | None], Graph]) -> str:
    """A graph capture's begin or end record: open its ``Graph`` (or close the open one of its graph and phase; an
    end with no begin is a graph of its own) and return the timeline stage it marks."""
    f, k = r.fields, r.kind
    key = (str(f.get("graph", "target")), f.get("phase"))
    gname = key[0] if key[0] != "target" else ""
    phase = key[1] if key[1] not in (None, "decode", "prefill") else None
    base = "_".join(x for x in (gname, phase, "capture") if x)
    if k == "graph_begin":
        gr = Graph(
            graph=key[0],
            phase=key[1],
            begin=r,
            end=None,
            begin_pos=pos,
            end_pos=None,
            sizes=f.get("bs") or f.get("num_tokens"),
        )
        graphs.append(gr)
        open_graphs[key] = gr
        return base + "_begin"
    gr = open_graphs.pop(key, None)
    if gr is None:
        gr = Graph(graph=key[0], phase=key[1], begin=None, end=r, begin_pos=pos, end_pos=pos)
        graphs.append(gr)
    gr.end, gr.end_pos = r, pos
    return base + "_end"


def _fill_graph_sizes(graphs: list[Graph], sizes: list[tuple[int, Record]]) -> None:
    """A capture whose begin line gave no batch sizes takes them from the first whole sizes line of its graph
    logged inside it."""
    for gr in graphs:
        if gr.sizes is None:
            near = [
                r
                for pos, r in sizes
                if r.fields.get("graph") == gr.graph
                and pos > gr.begin_pos
                and (gr.end_pos is None or pos < gr.end_pos)
                and "truncated" not in r.fields
            ]
            if near:
                gr.sizes = near[0].fields.get("bs") or near[0].fields.get("num_tokens")


def _measured(a: Point, b: Point, g: Grammar) -> tuple[str, float | None, str] | None:
    """(name, explained GiB, how) when the log itself measures the interval a → b, else None."""
    fa, fb = a.record.fields, b.record.fields
    if b.kind == "weight_end" and a.kind == "weight_begin":
        name = b.stage.replace("_end", "")
        if "usage_gib" in fb:
            return name, fb["usage_gib"], "read"
        return name, fa["avail_gib"] - fb["avail_gib"], "derived"
    if b.kind == "graph_end" and a.kind == "graph_begin" and fa.get("graph") == fb.get("graph"):
        name = b.stage.replace("_end", "")
        if "usage_gib" in fb:
            return name, fb["usage_gib"], "read"
        return name, fa["avail_gib"] - fb["avail_gib"], "derived"
    pat = g.pattern_of(b.record)
    if pat is not None and pat.measured and pat.measured[0] in fb:
        return b.stage, pat.measured[1] * fb[pat.measured[0]], "read"
    return None


def _interval_name(a: Point, b: Point) -> str:
    if b.stage.endswith("_memory_pool_end"):
        return b.stage[: -len("_end")]
    return f"{a.stage}_to_{b.stage}"


def ledger_intervals(points: list[Point], allocs: list[Alloc], g: Grammar) -> list[dict[str, Any]]:
    out = []
    for al in allocs:
        if points and al.pos < points[0].pos:
            al.interval, al.counted_in = "before_timeline", "init"
        elif not points or al.pos > points[-1].pos:
            al.interval, al.counted_in = "after_timeline", "unplaced"
    for a, b in pairwise(points):
        fall = a.avail - b.avail
        inside = [al for al in allocs if a.pos < al.pos < b.pos]
        meas = _measured(a, b, g)
        if meas is not None:
            name, explained, _how = meas
            for al in inside:
                al.interval, al.counted_in = name, "measured"
            typ = "measured"
        else:
            name = _interval_name(a, b)
            explained = sum(al.gib for al in inside)
            for al in inside:
                al.interval, al.counted_in = name, "interval"
            typ = "residual"
        out.append(
            {
                "name": name,
                "type": typ,
                "from_stage": a.stage,
                "to_stage": b.stage,
                "from_line": a.line,
                "to_line": b.line,
                "avail_before_gib": round_gib(a.avail),
                "avail_after_gib": round_gib(b.avail),
                "fall_gib": round_gib(fall),
                "logged_gib": round_gib(explained),
                "residual_gib": round_gib(fall - explained),
            }
        )
    return out


def completeness(log: SglangLog, view: Sequence[Record] | None = None) -> tuple[bool, str | None]:
    """(complete, why not): a launch is complete when it finished graph capture and reached the scheduler summary
    or the ready line, and did not crash."""
    recs = log.records if view is None else view
    crash = next((r for r in log.records if r.kind in CRASH_KINDS), None)
    if crash is not None:
        return False, f"the launch failed: {crash.kind.replace('_', ' ')} at line {crash.line}"
    open_: dict[tuple, Record] = {}
    for r in recs:
        key = (frozenset(r.ranks.items()), r.fields.get("graph"), r.fields.get("phase"))
        if r.kind == "graph_begin":
            open_[key] = r
        elif r.kind == "graph_end":
            open_.pop(key, None)
    if open_:
        r = min(open_.values(), key=lambda x: x.line)
        who = f" on {rank_label(r.ranks)}" if r.ranks else ""
        return False, (
            f"capture of the {r.fields.get('graph', 'target')} graph began at line {r.line}{who} and never ended"
        )
    if not any(r.kind in FINISH_KINDS for r in log.records):
        return False, (
            f"no max_total_num_tokens or ready line: the log stops at line {log.lines}, last recognised"
            f" record '{log.records[-1].kind}' at line {log.records[-1].line}"
        )
    return True, None


def global_record(log: SglangLog, kind: str, ranks: dict[str, int]) -> Record | None:
    own = [r for r in log.records if r.kind == kind and r.ranks == ranks]
    anyr = [r for r in log.records if r.kind == kind]
    return (own or anyr or [None])[0]


def server_arg(args: dict[str, Any], names: Sequence[str]) -> Any:
    for n in names:
        if n in args and args[n] is not None:
            return args[n]
    return None


def frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    return pd.DataFrame({c: pd.Series([r.get(c) for r in rows], dtype=object) for c in columns})


def one_launch(log: SglangLog, launch: int | None = None) -> tuple[SglangLog, list[str]]:
    """The launch a ledger is of: ``launch`` (1-based), else the last complete one, else the last; and a warning
    when the log holds several (a restart appended to the file: two launches' pools would add up)."""
    parts = split_launches(log)
    if launch is not None:
        if not 1 <= launch <= len(parts):
            raise OptionError(f"--launch {launch}: {log.path} holds {len(parts)} launch(es)")
        chosen = launch
    elif len(parts) == 1:
        return log, []
    else:
        complete = [i for i, p in enumerate(parts, 1) if completeness(p)[0]]
        chosen = complete[-1] if complete else len(parts)
    part = parts[chosen - 1]
    lines = [r.line for r in part.records]
    warnings = (
        []
        if len(parts) == 1
        else [
            f"{log.path} holds {len(parts)} launches (the server was restarted into the same log); this is launch"
            f" {chosen} (lines {min(lines)}–{max(lines)}), the last complete one unless --launch N says otherwise"
        ]
    )
    return part, warnings
