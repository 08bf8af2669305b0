"""One rank's ledger rows (docs/ledger.md): the study's rows from the timeline, the intervals, the logged
allocations and CUDA graphs of :mod:`tracekit.analyses.memory.ledger_engine`, and the request slots."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from ...ingest.sglang_log import Grammar, Record, SglangLog, grammar_default
from .ledger_engine import (
    GIB,
    Alloc,
    Graph,
    RankLedger,
    completeness,
    global_record,
    ledger_intervals,
    rank_view,
    role_prefix,
    round_gib,
    server_arg,
    walk_timeline,
)


def request_slots(log: SglangLog, ranks: dict[str, int], g: Grammar) -> tuple[int | None, int | None, list[int], str]:
    """(slots, context_len, lines, note): slots = max_running_requests (per DP) + decode extra slots + padding."""
    sa_names = g.common.get("server_args", {})
    summ = global_record(log, "summary", ranks)
    sargs = global_record(log, "server_args", ranks)
    args = sargs.fields.get("args", {}) if sargs else {}
    lines = []
    running = summ.fields.get("max_running_requests") if summ else None
    if running is not None:
        lines.append(summ.line)
    else:
        running = server_arg(args, sa_names.get("max_running_requests", ()))
        if running is not None:
            lines.append(sargs.line)
    if not isinstance(running, int):
        return None, None, [], ""
    extra = 0
    when = sa_names.get("extra_slots_when", {})
    if all(args.get(k) == v for k, v in when.items()):
        extra = server_arg(args, sa_names.get("extra_slots", ())) or 0
        if extra and sargs.line not in lines:
            lines.append(sargs.line)
    pad = int(g.common.get("request_slot_padding", 1))
    ctx = summ.fields.get("context_len") if summ else None
    if ctx is None:
        ctx = server_arg(args, sa_names.get("context", ()))
        if ctx is not None and sargs.line not in lines:
            lines.append(sargs.line)
    elif summ.line not in lines:
        lines.append(summ.line)
    note = f"max_running_requests {running} + extra slots {extra} + {pad}"
    return running + int(extra) + pad, (ctx if isinstance(ctx, int) else None), sorted(lines), note


class _Rows:
    """Builds the study's rows of one rank, group by group (see docs/ledger.md for each definition)."""

    WHERE: ClassVar[dict[str, str]] = {
        "measured": "inside a measured interval (part of its usage)",
        "init": "during init (part of NCCL init)",
        "interval": "subtracted in its residual interval",
        "unplaced": "after the last free-memory reading",
    }

    def __init__(self, log: SglangLog, ranks: dict[str, int], g: Grammar, view: list[Record]) -> None:
        self.log, self.ranks, self.g, self.view = log, ranks, g, view
        self.points, self.allocs, self.graphs, self.notes = walk_timeline(view, g)
        self.intervals = ledger_intervals(self.points, self.allocs, g)
        self.complete, self.reason = completeness(log, view)
        self.rows: list[dict[str, Any]] = []
        self.missing: list[str] = []
        self.v: dict[str, Any] = {}  # the components of the fixed overhead, None when unknown

    def add(self, row: str, value: Any, lines: Iterable[int], how: str, note: str = "") -> None:
        if isinstance(value, float):
            value = round_gib(value)
        self.rows.append({"row": row, "value": value, "lines": sorted(set(lines)), "how": how, "note": note})

    def _role(self, key: str, role: str) -> list[Record]:
        return [r for rl, r in self.notes[key] if rl == role]

    def weights(self) -> None:
        begin = next(iter(self._role("weight_begin", "target")), None)
        end = next(iter(self._role("weight_end", "target")), None)
        init = self.notes["dist_init_end"][0] if self.notes["dist_init_end"] else None
        nccl = init.fields.get("usage_gib") if init else None
        if nccl is not None and _avail(begin) is not None:
            self.add(
                "usable_gib",
                nccl + _avail(begin),
                [init.line, begin.line],
                "derived",
                "Init torch distributed mem usage + Load weight begin avail mem",
            )
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
        elif _avail(end) is not None and _avail(begin) is not None:
            peak = _avail(begin) - _avail(end)
            self.add("load_peak_gib", peak, [begin.line, end.line], "derived", "target Load weight begin − end avail")
        else:
            self.missing.append("load_peak_gib")
        rel = self.notes["released"]
        released = sum(r.fields[self.g.pattern_of(r).measured[0]] for r in rel)
        if rel:
            self.add(
                "released_after_load_gib",
                released,
                [r.line for r in rel],
                "read",
                "memory the log says was released after the load peak",
            )
        self.v["weights"] = None if peak is None else peak - released
        if peak is not None:
            self.add(
                "weights_resident_gib",
                peak - released,
                ([end.line] if end else []) + [r.line for r in rel],
                "derived",
                "load peak − released after load",
            )
        self._draft_weights()

    def _draft_weights(self) -> None:
        ends, begins = self._role("weight_end", "draft"), self._role("weight_begin", "draft")
        total, lines, how, known = 0.0, [], "read", True
        for i, r in enumerate(ends):
            if "usage_gib" in r.fields:
                total += r.fields["usage_gib"]
                lines.append(r.line)
            elif i < len(begins) and _avail(begins[i]) is not None and _avail(r) is not None:
                total += _avail(begins[i]) - _avail(r)
                lines += [begins[i].line, r.line]
                how = "derived"
            else:
                known = False  # a draft load the log does not measure: the total is unknown, not smaller
        if ends and known:
            self.add("draft_weights_gib", total, lines, how, "draft Load weight end: mem usage")
        elif ends:
            self.missing.append("draft_weights_gib")
        self.v["draft_weights"] = total if known else None

    def allocations(self, state_pool: bool) -> None:
        chosen = [a for a in self.allocs if a.state_pool == state_pool]
        # a size no GPU can have (the log's warnings name its line): that pool is unknown, never left out of a sum
        rejected = sorted({what for what, pool, _r in self.notes["rejected_allocs"] if pool == state_pool})
        self.missing += [f"{what}_gib" for what in rejected]
        for (what, role), group in _group_allocs(chosen).items():
            if what in rejected:
                continue
            note = (
                f"{len(group)} logged allocation(s)"
                if state_pool
                else "; ".join(sorted({f"{a.interval}: {self.WHERE.get(a.counted_in, a.counted_in)}" for a in group}))
            )
            self.add(f"{role_prefix(role)}{what}_gib", sum(a.gib for a in group), [a.line for a in group], "read", note)
        if state_pool:
            self.v["state"] = sum(a.gib for a in chosen) if chosen and not rejected else None
            if rejected:
                self.missing.append("state_pools_gib")
            if chosen and not rejected:
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
            self.add(
                f"cuda_graph_{label}_gib",
                sum(v for v, _ in vals),
                ends,
                "derived" if any(h == "derived" for _, h in vals) else "read",
                f"Capture {label} graph end: mem usage",
            )
            total += sum(v for v, _ in vals)
            lines += ends
        if self.graphs and ok:
            self.add("cuda_graph_gib", total, lines, "derived", "sum of every graph capture")
        self.v["graphs"] = total if ok else None
        target = next(
            (gr for gr in self.graphs if gr.graph in ("target", "npu") and gr.phase in (None, "decode")), None
        )
        if target is not None:
            self._bucket_rows(target)

    def _bucket_rows(self, target: Graph) -> None:
        buckets = graph_buckets(target)
        # the bars give the static buffers and the largest bucket only when the first bar seen is the first one
        # drawn (the largest size); a pasted log often keeps only tqdm's final redraw
        sizes = target.sizes or [b["size"] for b in buckets]
        first_is_largest = (
            bool(buckets) and buckets[0]["size"] == max(sizes) and (bool(target.sizes) or len(buckets) > 1)
        )
        first = target.progress[0] if target.progress else None
        if _avail(target.begin) is not None and first_is_largest and _avail(first) is not None:
            self.add(
                "cuda_graph_static_gib",
                target.begin.fields["avail_gib"] - first.fields["avail_gib"],
                [target.begin.line, first.line],
                "derived",
                "capture begin avail − first progress bar avail",
            )
            if buckets[0]["cost_gib"] is not None:
                self.add(
                    "cuda_graph_largest_bucket_gib",
                    buckets[0]["cost_gib"],
                    buckets[0]["lines"],
                    "derived",
                    f"bs {buckets[0]['size']}: its progress bar avail − the next one",
                )
        if target.sizes or buckets:
            self.add(
                "cuda_graph_buckets",
                len(target.sizes) if target.sizes else len(buckets),
                [target.begin.line] if target.begin else [],
                "read",
                "captured batch sizes" + (f" {target.sizes}" if target.sizes else ""),
            )

    def margin_and_fixed(self) -> None:
        residual = [iv for iv in self.intervals if iv["type"] == "residual"]
        workspace = sum(iv["residual_gib"] for iv in residual) if residual else None
        if workspace is not None:
            self.add(
                "workspace_residual_gib",
                workspace,
                [iv["to_line"] for iv in residual],
                "derived",
                "Σ residual of the intervals not measured by the log",
            )
        # the runtime margin is the free memory left once everything is set up: the scheduler's reading, the last
        # capture end (a rank that does not print the summary), or a complete launch's last pool end (no graphs)
        margin = self.points[-1] if self.points else None
        no_capture = self.complete and not any(r.kind == "graph_begin" for r in self.log.records)
        if margin is not None and (
            margin.kind in ("summary", "graph_end") or (no_capture and margin.kind == "pool_end")
        ):
            self.add(
                "runtime_margin_gib", margin.avail, [margin.line], "read", f"last free-memory reading ({margin.stage})"
            )
        else:
            margin = None
            self.missing.append("runtime_margin_gib")
        parts = [
            self.v["weights"],
            self.v["nccl"],
            workspace,
            margin.avail if margin else None,
            self.v["graphs"],
            self.v["draft_weights"],
        ]
        self.v["fixed"] = None
        if self.complete and all(x is not None for x in parts):
            self.v["fixed"] = sum(parts)
            self.add(
                "fixed_overhead_gib",
                self.v["fixed"],
                [],
                "derived",
                "weights resident + draft weights + CUDA graph + NCCL init + workspace residual + runtime margin",
            )
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
                self.add(
                    "req_to_token_gib",
                    slots * ctx * nbytes / GIB,
                    lines,
                    "derived",
                    f"{slots} rows × context_len {ctx} × {nbytes} B",
                )


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
        unaccounted = round_gib(usable - b.v["fixed"] - b.v["state"])
    return RankLedger(
        ranks=ranks,
        points=b.points,
        allocs=b.allocs,
        intervals=b.intervals,
        graphs=b.graphs,
        rows=b.rows,
        complete=b.complete,
        incomplete_reason=b.reason,
        last_line=max((r.line for r in b.view), default=0),
        missing=b.missing,
        unaccounted_gib=unaccounted,
    )


def _avail(r: Record | None) -> float | None:
    """The free-memory reading of a record; None without one (or when it was rejected as impossible)."""
    return None if r is None else r.fields.get("avail_gib")


def _group_allocs(allocs: list[Alloc]) -> dict[tuple[str, str], list[Alloc]]:
    out: dict[tuple[str, str], list[Alloc]] = {}
    for a in allocs:
        out.setdefault((a.what, a.role), []).append(a)
    return out


def graph_buckets(gr: Graph) -> list[dict[str, Any]]:
    """Per captured size: its progress-bar reading and cost (drop to the next bar, or to the capture end)."""
    bars: list[Record] = []
    for r in gr.progress:
        if "avail_gib" not in r.fields:
            continue  # a reading rejected as impossible (the log's warnings name the line)
        size = r.fields.get("bs", r.fields.get("num_tokens"))
        if bars and bars[-1].fields.get("bs", bars[-1].fields.get("num_tokens")) == size:
            continue  # tqdm's final redraw repeats the last size
        bars.append(r)
    out = []
    for i, r in enumerate(bars):
        nxt = bars[i + 1] if i + 1 < len(bars) else gr.end
        cost = (
            r.fields["avail_gib"] - nxt.fields["avail_gib"] if nxt is not None and "avail_gib" in nxt.fields else None
        )
        out.append(
            {
                "size": r.fields.get("bs", r.fields.get("num_tokens")),
                "avail_gib": r.fields["avail_gib"],
                "cost_gib": cost,
                "lines": [r.line] + ([nxt.line] if nxt is not None else []),
            }
        )
    return out
