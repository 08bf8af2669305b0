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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, ClassVar

import pandas as pd

from ..errors import MissingDataError, UsageError
from ..ingest.sglang_log import (Grammar, Record, SglangLog, grammar_default, parse_rank_spec, rank_label,
                                 rank_sort_key)
from ..result import Result

GIB = 1 << 30
_ROUND = 6
_UNITS_TO_GIB = {"_gib": 1.0, "_mib": 1.0 / 1024, "_bytes": 1.0 / GIB}
CRASH_KINDS = ("not_enough_memory", "oom")
FINISH_KINDS = ("summary", "ready")


class OptionError(UsageError):
    """Options that do not fit together (exit 2, a usage error)."""


def _r(x: float | None) -> float | None:
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
        raise MissingDataError(f"{log.path} has no line of rank {spec!r}; ranks present: {names}; pass one of them"
                               " to --rank")
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


def _prefix(role: str) -> str:
    return "draft_" if role == "draft" else ""


def _walk(view: list[Record], g: Grammar) -> tuple[list[Point], list[Alloc], list[Graph], dict[str, Any]]:
    """One pass over a rank's records: timeline points, allocations, graph captures and the notable records."""
    points: list[Point] = []
    allocs: list[Alloc] = []
    graphs: list[Graph] = []
    open_graphs: dict[tuple[str, str | None], Graph] = {}
    notes: dict[str, Any] = {"weight_begin": [], "weight_end": [], "dist_init_end": [], "kv": [], "released": [],
                             "sizes": []}
    wb = we = pe = 0
    loading: str | None = None
    for pos, r in enumerate(view):
        f, k = r.fields, r.kind
        pat = g.pattern_of(r)
        stage = None
        if k == "weight_begin":
            loading = "target" if wb == 0 else "draft"
            wb += 1
            stage = _prefix(loading) + "load_weight_begin"
            notes["weight_begin"].append((loading, r))
        elif k == "weight_end":
            role = "target" if we == 0 else "draft"
            we += 1
            loading = None
            stage = _prefix(role) + "load_weight_end"
            notes["weight_end"].append((role, r))
        elif k == "pool_end":
            stage = ("target" if pe == 0 else "draft") + "_memory_pool_end"
            pe += 1
        elif k in ("graph_begin", "graph_end"):
            key = (str(f.get("graph", "target")), f.get("phase"))
            gname = key[0] if key[0] != "target" else ""
            phase = key[1] if key[1] not in (None, "decode", "prefill") else None
            base = "_".join(x for x in (gname, phase, "capture") if x)
            if k == "graph_begin":
                gr = Graph(graph=key[0], phase=key[1], begin=r, end=None, begin_pos=pos, end_pos=None,
                           sizes=f.get("bs") or f.get("num_tokens"))
                graphs.append(gr)
                open_graphs[key] = gr
                stage = base + "_begin"
            else:
                gr = open_graphs.pop(key, None)
                if gr is None:
                    gr = Graph(graph=key[0], phase=key[1], begin=None, end=r, begin_pos=pos, end_pos=pos)
                    graphs.append(gr)
                gr.end, gr.end_pos = r, pos
                stage = base + "_end"
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
        if pat is not None and pat.alloc is not None:
            parts = [_gib(x, f[x]) for x in pat.alloc.fields if x in f]
            parts = [p for p in parts if p is not None]
            if parts:
                role = loading or ("target" if pe == 0 else "draft")
                size = sum(parts)
                allocs.append(Alloc(pat.alloc.what, role, size, size * 1024, r.line, pos, pat.alloc.state_pool))
                if pat.alloc.what == "kv" and "tokens" in f:
                    notes["kv"].append((role, r))
    for gr in graphs:
        if gr.sizes is None:
            near = [r for pos, r in notes["sizes"] if r.fields.get("graph") == gr.graph and pos > gr.begin_pos
                    and (gr.end_pos is None or pos < gr.end_pos) and "truncated" not in r.fields]
            if near:
                gr.sizes = near[0].fields.get("bs") or near[0].fields.get("num_tokens")
    return points, allocs, graphs, notes


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


def _intervals(points: list[Point], allocs: list[Alloc], g: Grammar) -> list[dict[str, Any]]:
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
        out.append({"name": name, "type": typ, "from_stage": a.stage, "to_stage": b.stage, "from_line": a.line,
                    "to_line": b.line, "avail_before_gib": _r(a.avail), "avail_after_gib": _r(b.avail),
                    "fall_gib": _r(fall), "logged_gib": _r(explained), "residual_gib": _r(fall - explained)})
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
        return False, (f"capture of the {r.fields.get('graph', 'target')} graph began at line {r.line}{who} and never"
                       " ended")
    if not any(r.kind in FINISH_KINDS for r in log.records):
        return False, (f"no max_total_num_tokens or ready line: the log stops at line {log.lines}, last recognised"
                       f" record '{log.records[-1].kind}' at line {log.records[-1].line}")
    return True, None


def _global(log: SglangLog, kind: str, ranks: dict[str, int]) -> Record | None:
    own = [r for r in log.records if r.kind == kind and r.ranks == ranks]
    anyr = [r for r in log.records if r.kind == kind]
    return (own or anyr or [None])[0]


def _arg(args: dict[str, Any], names: Sequence[str]) -> Any:
    for n in names:
        if n in args and args[n] is not None:
            return args[n]
    return None


def request_slots(log: SglangLog, ranks: dict[str, int], g: Grammar) -> tuple[int | None, int | None, list[int], str]:
    """(slots, context_len, lines, note): slots = max_running_requests (per DP) + decode extra slots + padding."""
    sa_names = g.common.get("server_args", {})
    summ = _global(log, "summary", ranks)
    sargs = _global(log, "server_args", ranks)
    args = sargs.fields.get("args", {}) if sargs else {}
    lines = []
    running = summ.fields.get("max_running_requests") if summ else None
    if running is not None:
        lines.append(summ.line)
    else:
        running = _arg(args, sa_names.get("max_running_requests", ()))
        if running is not None:
            lines.append(sargs.line)
    if not isinstance(running, int):
        return None, None, [], ""
    extra = 0
    when = sa_names.get("extra_slots_when", {})
    if all(args.get(k) == v for k, v in when.items()):
        extra = _arg(args, sa_names.get("extra_slots", ())) or 0
        if extra and sargs.line not in lines:
            lines.append(sargs.line)
    pad = int(g.common.get("request_slot_padding", 1))
    ctx = summ.fields.get("context_len") if summ else None
    if ctx is None:
        ctx = _arg(args, sa_names.get("context", ()))
        if ctx is not None and sargs.line not in lines:
            lines.append(sargs.line)
    elif summ.line not in lines:
        lines.append(summ.line)
    note = f"max_running_requests {running} + extra slots {extra} + {pad}"
    return running + int(extra) + pad, (ctx if isinstance(ctx, int) else None), sorted(lines), note


class _Rows:
    """Builds the study's rows of one rank, group by group (see docs/ledger.md for each definition)."""

    WHERE: ClassVar[dict[str, str]] = {"measured": "inside a measured interval (part of its usage)", "init": "during init (part of NCCL init)",
             "interval": "subtracted in its residual interval", "unplaced": "after the last free-memory reading"}

    def __init__(self, log: SglangLog, ranks: dict[str, int], g: Grammar, view: list[Record]) -> None:
        self.log, self.ranks, self.g, self.view = log, ranks, g, view
        self.points, self.allocs, self.graphs, self.notes = _walk(view, g)
        self.intervals = _intervals(self.points, self.allocs, g)
        self.complete, self.reason = completeness(log, view)
        self.rows: list[dict[str, Any]] = []
        self.missing: list[str] = []
        self.v: dict[str, Any] = {}  # the components of the fixed overhead, None when unknown

    def add(self, row: str, value: Any, lines: Iterable[int], how: str, note: str = "") -> None:
        if isinstance(value, float):
            value = _r(value)
        self.rows.append({"row": row, "value": value, "lines": sorted(set(lines)), "how": how, "note": note})

    def _role(self, key: str, role: str) -> list[Record]:
        return [r for rl, r in self.notes[key] if rl == role]

    def weights(self) -> None:
        begin = next(iter(self._role("weight_begin", "target")), None)
        end = next(iter(self._role("weight_end", "target")), None)
        init = self.notes["dist_init_end"][0] if self.notes["dist_init_end"] else None
        nccl = init.fields.get("usage_gib") if init else None
        if nccl is not None and begin is not None:
            self.add("usable_gib", nccl + begin.fields["avail_gib"], [init.line, begin.line], "derived",
                     "Init torch distributed mem usage + Load weight begin avail mem")
        else:
            self.missing.append("usable_gib")
        if nccl is not None:
            self.add("nccl_init_gib", nccl, [init.line], "read", "Init torch distributed ends: mem usage")
        else:
            self.missing.append("nccl_init_gib")
        self.v["nccl"] = nccl
        peak = None
        if end is not None and "usage_gib" in end.fields:
            peak = end.fields["usage_gib"]
            self.add("load_peak_gib", peak, [end.line], "read", "target Load weight end: mem usage")
        elif end is not None and begin is not None:
            peak = begin.fields["avail_gib"] - end.fields["avail_gib"]
            self.add("load_peak_gib", peak, [begin.line, end.line], "derived", "target Load weight begin − end avail")
        else:
            self.missing.append("load_peak_gib")
        rel = self.notes["released"]
        released = sum(r.fields[self.g.pattern_of(r).measured[0]] for r in rel)
        if rel:
            self.add("released_after_load_gib", released, [r.line for r in rel], "read",
                     "memory the log says was released after the load peak")
        self.v["weights"] = None if peak is None else peak - released
        if peak is not None:
            self.add("weights_resident_gib", peak - released, ([end.line] if end else []) + [r.line for r in rel],
                     "derived", "load peak − released after load")
        self._draft_weights()

    def _draft_weights(self) -> None:
        ends, begins = self._role("weight_end", "draft"), self._role("weight_begin", "draft")
        total, lines, how = 0.0, [], "read"
        for i, r in enumerate(ends):
            if "usage_gib" in r.fields:
                total += r.fields["usage_gib"]
                lines.append(r.line)
            elif i < len(begins):
                total += begins[i].fields["avail_gib"] - r.fields["avail_gib"]
                lines += [begins[i].line, r.line]
                how = "derived"
        if ends:
            self.add("draft_weights_gib", total, lines, how, "draft Load weight end: mem usage")
        self.v["draft_weights"] = total

    def allocations(self, state_pool: bool) -> None:
        chosen = [a for a in self.allocs if a.state_pool == state_pool]
        for (what, role), group in _group_allocs(chosen).items():
            note = (f"{len(group)} logged allocation(s)" if state_pool else
                    "; ".join(sorted({f"{a.interval}: {self.WHERE.get(a.counted_in, a.counted_in)}" for a in group})))
            self.add(f"{_prefix(role)}{what}_gib", sum(a.gib for a in group), [a.line for a in group], "read", note)
        if state_pool:
            self.v["state"] = sum(a.gib for a in chosen) if chosen else None
            if chosen:
                self.add("state_pools_gib", self.v["state"], [a.line for a in chosen], "derived", "Σ state pools")

    def graph_rows(self) -> None:
        total, lines, ok = 0.0, [], True
        by_label: dict[str, list[Graph]] = {}
        for gr in self.graphs:
            by_label.setdefault(gr.label, []).append(gr)
        for label, grs in by_label.items():
            vals = [gr.usage() for gr in grs]
            if any(v is None for v, _ in vals):
                ok = False
                self.missing.append(f"cuda_graph_{label}_gib")
                continue
            ends = [gr.end.line for gr in grs]
            self.add(f"cuda_graph_{label}_gib", sum(v for v, _ in vals), ends,
                     "derived" if any(h == "derived" for _, h in vals) else "read", f"Capture {label} graph end: mem usage")
            total += sum(v for v, _ in vals)
            lines += ends
        if self.graphs and ok:
            self.add("cuda_graph_gib", total, lines, "derived", "sum of every graph capture")
        self.v["graphs"] = total if ok else None
        target = next((gr for gr in self.graphs if gr.graph in ("target", "npu") and gr.phase in (None, "decode")),
                      None)
        if target is not None:
            self._buckets(target)

    def _buckets(self, target: Graph) -> None:
        buckets = _buckets(target)
        # the bars give the static buffers and the largest bucket only when the first bar seen is the first one
        # drawn (the largest size); a pasted log often keeps only tqdm's final redraw
        sizes = target.sizes or [b["size"] for b in buckets]
        first_is_largest = bool(buckets) and buckets[0]["size"] == max(sizes) and (bool(target.sizes) or len(buckets) > 1)
        if target.begin is not None and first_is_largest:
            first = target.progress[0]
            self.add("cuda_graph_static_gib", target.begin.fields["avail_gib"] - first.fields["avail_gib"],
                     [target.begin.line, first.line], "derived", "capture begin avail − first progress bar avail")
            if buckets[0]["cost_gib"] is not None:
                self.add("cuda_graph_largest_bucket_gib", buckets[0]["cost_gib"], buckets[0]["lines"], "derived",
                         f"bs {buckets[0]['size']}: its progress bar avail − the next one")
        if target.sizes or buckets:
            self.add("cuda_graph_buckets", len(target.sizes) if target.sizes else len(buckets),
                     [target.begin.line] if target.begin else [], "read",
                     "captured batch sizes" + (f" {target.sizes}" if target.sizes else ""))

    def margin_and_fixed(self) -> None:
        residual = [iv for iv in self.intervals if iv["type"] == "residual"]
        workspace = sum(iv["residual_gib"] for iv in residual) if residual else None
        if workspace is not None:
            self.add("workspace_residual_gib", workspace, [iv["to_line"] for iv in residual], "derived",
                     "Σ residual of the intervals not measured by the log")
        # the runtime margin is the free memory left once everything is set up: the scheduler's reading, the last
        # capture end (a rank that does not print the summary), or a complete launch's last pool end (no graphs)
        margin = self.points[-1] if self.points else None
        no_capture = self.complete and not any(r.kind == "graph_begin" for r in self.log.records)
        if margin is not None and (margin.kind in ("summary", "graph_end") or (no_capture and margin.kind == "pool_end")):
            self.add("runtime_margin_gib", margin.avail, [margin.line], "read", f"last free-memory reading ({margin.stage})")
        else:
            margin = None
            self.missing.append("runtime_margin_gib")
        parts = [self.v["weights"], self.v["nccl"], workspace, margin.avail if margin else None, self.v["graphs"]]
        self.v["fixed"] = None
        if self.complete and all(x is not None for x in parts):
            self.v["fixed"] = sum(parts) + self.v["draft_weights"]
            self.add("fixed_overhead_gib", self.v["fixed"], [], "derived",
                     "weights resident + draft weights + CUDA graph + NCCL init + workspace residual + runtime margin")
        else:
            self.missing.append("fixed_overhead_gib")

    def slots(self) -> None:
        kv = next(iter(self._role("kv", "target")), None)
        if kv is not None:
            self.add("kv_tokens", kv.fields["tokens"], [kv.line], "read", "KV Cache is allocated: #tokens (per rank)")
        slots, ctx, lines, note = request_slots(self.log, self.ranks, self.g)
        if slots is not None:
            self.add("request_slots", slots, lines, "derived", note)
            if ctx is not None:
                nbytes = int(self.g.common.get("req_to_token_bytes", 4))
                self.add("req_to_token_gib", slots * ctx * nbytes / GIB, lines, "derived",
                         f"{slots} rows × context_len {ctx} × {nbytes} B")


def rank_ledger(log: SglangLog, ranks: dict[str, int]) -> RankLedger:
    """The ledger of one rank (see the module docstring and docs/ledger.md)."""
    b = _Rows(log, ranks, log.grammar or grammar_default(), rank_view(log, ranks))
    b.weights()
    b.allocations(state_pool=False)
    b.graph_rows()
    b.margin_and_fixed()
    b.allocations(state_pool=True)
    b.slots()
    usable = next((r["value"] for r in b.rows if r["row"] == "usable_gib"), None)
    unaccounted = None
    if usable is not None and b.v["fixed"] is not None and b.v["state"] is not None:
        unaccounted = _r(usable - b.v["fixed"] - b.v["state"])
    return RankLedger(ranks=ranks, points=b.points, allocs=b.allocs, intervals=b.intervals, graphs=b.graphs,
                      rows=b.rows, complete=b.complete, incomplete_reason=b.reason,
                      last_line=max((r.line for r in b.view), default=0), missing=b.missing, unaccounted_gib=unaccounted)


def _group_allocs(allocs: list[Alloc]) -> dict[tuple[str, str], list[Alloc]]:
    out: dict[tuple[str, str], list[Alloc]] = {}
    for a in allocs:
        out.setdefault((a.what, a.role), []).append(a)
    return out


def _buckets(gr: Graph) -> list[dict[str, Any]]:
    """Per captured size: its progress-bar reading and cost (drop to the next bar, or to the capture end)."""
    bars: list[Record] = []
    for r in gr.progress:
        size = r.fields.get("bs", r.fields.get("num_tokens"))
        if bars and bars[-1].fields.get("bs", bars[-1].fields.get("num_tokens")) == size:
            continue  # tqdm's final redraw repeats the last size
        bars.append(r)
    out = []
    for i, r in enumerate(bars):
        nxt = bars[i + 1] if i + 1 < len(bars) else gr.end
        cost = r.fields["avail_gib"] - nxt.fields["avail_gib"] if nxt is not None and "avail_gib" in nxt.fields else None
        out.append({"size": r.fields.get("bs", r.fields.get("num_tokens")), "avail_gib": r.fields["avail_gib"],
                    "cost_gib": cost, "lines": [r.line] + ([nxt.line] if nxt is not None else [])})
    return out


# --------------------------------------------------------------------------- results


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    return pd.DataFrame({c: pd.Series([r.get(c) for r in rows], dtype=object) for c in columns})


RECORD_COLUMNS = ["line", "ranks", "kind", "fields"]


def records_frame(records: Sequence[Record]) -> pd.DataFrame:
    """The ``records`` table: ``line, ranks, kind, fields`` where ``fields`` holds each record's own dict.

    ``attrs["spread"] = "fields"`` asks JSON writers to merge that dict into the row (the JSON contract is
    ``{line, ranks, kind, ...fields}``: fields absent from the line are absent from the row)."""
    df = pd.DataFrame({"line": pd.Series([r.line for r in records], dtype="int64"),
                       "ranks": pd.Series([dict(r.ranks) for r in records], dtype=object),
                       "kind": pd.Series([r.kind for r in records], dtype=object),
                       "fields": pd.Series([dict(r.fields) for r in records], dtype=object)})
    df.attrs["spread"] = "fields"
    return df


def _unrecognised_rows(log: SglangLog, tag: str | None = None) -> list[dict[str, Any]]:
    return [{**({"log": tag} if tag else {}), "line": ln, "ranks": dict(rk), "text": text}
            for ln, rk, text in log.unrecognised]


def log_result(log: SglangLog, *, rank: str | None = None, kinds: Sequence[str] | None = None) -> Result:
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
    summary = {"lines": log.lines, "records": len(recs), "unrecognised": len(log.unrecognised), "complete": complete,
               "incomplete_reason": reason, "ranks_present": [rank_label(r) for r in log.ranks_present()],
               "pattern_sets": dict(log.set_counts), "kinds": counts}
    warnings = list(log.warnings)
    if log.unrecognised:
        warnings.append(f"{log.path}: {len(log.unrecognised)} line(s) mention memory but match no pattern"
                        " (see tables.unrecognised)")
    if not complete:
        warnings.append(f"{log.path}: the launch is incomplete ({reason})")
    return Result(command="log", inputs=[{"path": log.path}], params=params, summary=summary,
                  tables={"records": records_frame(recs),
                          "unrecognised": _frame(_unrecognised_rows(log), ["line", "ranks", "text"])},
                  warnings=warnings)


TIMELINE_COLUMNS = ["log", "stage", "avail_gib", "line", "kind"]
INTERVAL_COLUMNS = ["log", "name", "type", "from_stage", "to_stage", "from_line", "to_line", "avail_before_gib",
                    "avail_after_gib", "fall_gib", "logged_gib", "residual_gib"]
ALLOC_COLUMNS = ["log", "what", "role", "gib", "mib", "line", "interval", "counted_in", "state_pool"]
BUCKET_COLUMNS = ["log", "graph", "size", "avail_gib", "cost_gib", "line"]
SKEW_DERIVED = ("usable_gib", "weights_resident_gib", "cuda_graph_gib", "fixed_overhead_gib")
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
        out.append({"log": tag, "metric": key, "ranks": len(vals), "min": lo[0], "max": hi[0],
                    "skew": _sub(hi[0], lo[0]), "min_rank": lo[1], "max_rank": hi[1]})
    return out


def _tables_for(log: SglangLog, led: RankLedger, tag: str) -> dict[str, list[dict[str, Any]]]:
    bucket_rows = []
    for gr in led.graphs:
        for b in _buckets(gr):
            bucket_rows.append({"log": tag, "graph": gr.label, "size": b["size"], "avail_gib": b["avail_gib"],
                                "cost_gib": _r(b["cost_gib"]), "line": b["lines"][0]})
    return {
        "timeline": [{"log": tag, "stage": p.stage, "avail_gib": p.avail, "line": p.line, "kind": p.kind}
                     for p in led.points],
        "intervals": [{"log": tag, **iv} for iv in led.intervals],
        "allocations": [{"log": tag, "what": a.what, "role": a.role, "gib": _r(a.gib), "mib": _r(a.mib),
                         "line": a.line, "interval": a.interval, "counted_in": a.counted_in,
                         "state_pool": a.state_pool} for a in led.allocs],
        "graph_buckets": bucket_rows,
        "skew": _skew(log, tag),
        "unrecognised": _unrecognised_rows(log, tag),
    }


def _summary_for(log: SglangLog, led: RankLedger) -> dict[str, Any]:
    return {"rank": rank_label(led.ranks), "ranks_present": [rank_label(r) for r in log.ranks_present()],
            "complete": led.complete, "incomplete_reason": led.incomplete_reason, "last_line": led.last_line,
            "lines": log.lines, "records": len(log.records), "unrecognised": len(log.unrecognised),
            "pattern_sets": dict(log.set_counts), "unaccounted_gib": led.unaccounted_gib,
            "missing_rows": list(led.missing), **led.values()}


def _warnings_for(log: SglangLog, led: RankLedger) -> list[str]:
    w = list(log.warnings)
    if not led.complete:
        w.append(f"{log.path}: the launch is incomplete ({led.incomplete_reason}); the ledger of "
                 f"{rank_label(led.ranks)} shows what was read up to line {led.last_line}")
    if log.unrecognised:
        w.append(f"{log.path}: {len(log.unrecognised)} line(s) mention memory but match no pattern"
                 " (see tables.unrecognised)")
    if led.unaccounted_gib is not None and abs(led.unaccounted_gib) > 0.05:
        w.append(f"{log.path}: usable − fixed overhead − state pools leaves {led.unaccounted_gib} GiB unaccounted"
                 " (a measured interval whose fall differs from its logged usage)")
    return w


def ledger(log: SglangLog, log_b: SglangLog | None = None, *, rank: str | None = None) -> Result:
    """``tracekit ledger``: the memory ledger of one rank (default the lowest present); with ``log_b`` both side
    by side (``diff`` = b − a). Tables: rows, timeline, intervals, allocations, graph_buckets, skew,
    unrecognised."""
    logs = [log] + ([log_b] if log_b is not None else [])
    tags = ["a", "b"][: len(logs)]
    leds = [rank_ledger(lg, resolve_rank(lg, rank)) for lg in logs]
    tables: dict[str, list[dict[str, Any]]] = {}
    for lg, led, tag in zip(logs, leds, tags):
        for name, rows in _tables_for(lg, led, tag).items():
            tables.setdefault(name, []).extend(rows)
    warnings = [w for lg, led in zip(logs, leds) for w in _warnings_for(lg, led)]
    if log_b is None:
        rows_df = _frame(leds[0].rows, ROW_COLUMNS)
        summary = _summary_for(log, leds[0])
    else:
        rows_df = _frame(_pair_rows(leds[0], leds[1]), PAIR_COLUMNS)
        sa, sb = _summary_for(log, leds[0]), _summary_for(log_b, leds[1])
        diff = {r: _sub(leds[1].values().get(r), leds[0].values().get(r)) for r in _row_order(leds[0], leds[1])}
        summary = {"logs": 2, "complete": sa["complete"] and sb["complete"], "a": sa, "b": sb,
                   "diff": {k: v for k, v in diff.items() if v is not None}}
    return Result(command="ledger", inputs=[{"path": lg.path, "rank": rank_label(led.ranks)} for lg, led in
                                            zip(logs, leds)],
                  params={"rank": rank}, summary=summary,
                  tables={"rows": rows_df,
                          "timeline": _frame(tables["timeline"], TIMELINE_COLUMNS),
                          "intervals": _frame(tables["intervals"], INTERVAL_COLUMNS),
                          "allocations": _frame(tables["allocations"], ALLOC_COLUMNS),
                          "graph_buckets": _frame(tables["graph_buckets"], BUCKET_COLUMNS),
                          "skew": _frame(tables["skew"], SKEW_COLUMNS),
                          "unrecognised": _frame(tables["unrecognised"], ["log", "line", "ranks", "text"])},
                  warnings=warnings)


def _sub(b: Any, a: Any) -> Any:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    d = b - a
    return _r(d) if isinstance(d, float) else d


def _row_order(a: RankLedger, b: RankLedger) -> list[str]:
    names = [r["row"] for r in a.rows]
    return names + [r["row"] for r in b.rows if r["row"] not in names]


def _pair_rows(a: RankLedger, b: RankLedger) -> list[dict[str, Any]]:
    ra = {r["row"]: r for r in a.rows}
    rb = {r["row"]: r for r in b.rows}
    out = []
    for name in _row_order(a, b):
        x, y = ra.get(name), rb.get(name)
        out.append({"row": name, "value_a": x["value"] if x else None, "value_b": y["value"] if y else None,
                    "diff": _sub(y["value"] if y else None, x["value"] if x else None),
                    "lines_a": x["lines"] if x else [], "lines_b": y["lines"] if y else [],
                    "note": (x or y)["note"]})
    return out
