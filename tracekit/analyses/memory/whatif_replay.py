"""The what-if replay engine: one rank's logged figures (through the ledger, :func:`rank_ledger`,
:func:`request_slots`, :func:`graph_buckets`) and the rows that changed launch parameters move — per-slot pools,
req_to_token, the static budget, DeepEP's buffer, CUDA-graph buckets — then where each freed GiB flows (the KV pool
or the runtime margin). The rules come from :mod:`.whatif_rules`; ``tracekit whatif`` (:mod:`.whatif`) drives it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ...errors import InputError, MissingDataError
from ...ingest.sglang_log import Record, SglangLog, grammar_default, rank_label
from .ledger_engine import OptionError, RankLedger, global_record, rank_view, round_gib, server_arg
from .ledger_rows import graph_buckets, rank_ledger, request_slots
from .whatif_rules import eval_rule, load_rules

SINKS = ("kv_pool", "runtime_margin")


class Replay:
    """The logged figures of one rank and the rows the settings move."""

    def __init__(self, log: SglangLog, ranks: dict[str, int], led: RankLedger, dims: dict[str, int]) -> None:
        self.log, self.ranks, self.led, self.dims = log, ranks, led, dims
        self.g = log.grammar or grammar_default()
        self.rules = load_rules()
        self.v = led.values()
        self.view = rank_view(log, ranks)
        sargs = global_record(log, "server_args", ranks)
        self.args: dict[str, Any] = sargs.fields.get("args", {}) if sargs else {}
        self.args_line = sargs.line if sargs else None
        self.rows: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.changes: dict[str, dict[str, Any]] = {}

    # ----------------------------------------------------------------- what the log says

    def need(self, row: str, param: str, why: str) -> Any:
        value = self.v.get(row)
        if value is None:
            kinds = {
                "kv_gib": lambda r: r.kind == "kv_alloc",
                "runtime_margin_gib": lambda r: any(k.startswith("avail") for k in r.fields["rejected"]),
            }
            rejected = next(
                (r for r in self.view if r.fields.get("rejected") and kinds.get(row, lambda _r: False)(r)), None
            )
            if rejected is not None:  # the line is there, its value is one no GPU can have
                bad = "; ".join(f"{k} = {v:g} is {w}" for k, (v, w) in rejected.fields["rejected"].items())
                raise InputError(
                    f"{self.log.path} line {rejected.line}: --set {param} needs {why}, and that line's value"
                    f" is not one a GPU can have ({bad}); the line is damaged"
                )
            raise MissingDataError(
                f"{self.log.path}: --set {param} needs {why}, which the log of "
                f"{rank_label(self.ranks)} does not give; the replay cannot model it from this log"
            )
        return value

    def arg(self, name: str, param: str) -> Any:
        value = self.args.get(name)
        if value is None:
            raise MissingDataError(
                f"{self.log.path}: --set {param} needs the server argument {name}, which the log's"
                " server_args line does not hold; the replay cannot model it from this log"
            )
        return value

    def record_of(self, what: str, role: str) -> tuple[Record, Any] | None:
        """The record of the rank's first logged allocation ``what`` of ``role`` (the ledger's), with its alloc."""
        al = next((a for a in self.led.allocs if a.what == what and a.role == role), None)
        if al is None:
            return None
        rec = next(
            (
                r
                for r in self.view
                if r.line == al.line
                and (pat := self.g.pattern_of(r)) is not None
                and pat.alloc is not None
                and pat.alloc.what == what
            ),
            None,
        )
        return (rec, al) if rec is not None else None

    def find(self, kind: str) -> Record | None:
        own = [r for r in self.view if r.kind == kind]
        return own[0] if own else None

    def add(
        self,
        item: str,
        before: float,
        after: float,
        *,
        rule: str,
        flows_to: str,
        basis: str,
        parameter: str,
        formula: str,
        source: str,
        lines: list[int],
    ) -> None:
        self.rows.append(
            {
                "item": item,
                "before_gib": round_gib(before),
                "after_gib": round_gib(after),
                "delta_gib": round_gib(after - before),
                "rule": rule,
                "flows_to": flows_to,
                "basis": basis,
                "parameter": parameter,
                "formula": formula,
                "source": source,
                "lines": sorted({ln for ln in lines if ln}),
            }
        )

    # ----------------------------------------------------------------- slots and per-slot pools

    def slots(self, new: dict[str, Any]) -> tuple[int, int]:
        """(slots before, after) by the ledger's own request_slots, on the log with its inputs changed."""
        before, _ctx, _lines, _note = request_slots(self.log, self.ranks, self.g)
        param = next(p for p in ("max_running_requests", "disaggregation_decode_extra_slots") if p in new)
        if before is None:
            raise MissingDataError(
                f"{self.log.path}: --set {param} needs the request slots (max_running_requests"
                " in the scheduler summary or server_args), which the log does not give"
            )
        changed = self._with_slot_inputs(new)
        after, _ctx, _lines, _note = request_slots(changed, self.ranks, self.g)
        extra = new.get("disaggregation_decode_extra_slots")
        if extra is not None:
            old = int(self.args.get("disaggregation_decode_extra_slots") or 0)
            moved = after - before - (new.get("max_running_requests", self._running()) - self._running())
            if extra != old and moved == 0:
                when = self.g.common.get("server_args", {}).get("extra_slots_when", {})
                raise OptionError(
                    f"--set disaggregation_decode_extra_slots: {self.log.path} is not a launch where "
                    f"extra slots count ({', '.join(f'{k}={v!r}' for k, v in when.items())}), so the"
                    " replay cannot model it"
                )
            self.changes["disaggregation_decode_extra_slots"] = {"before": old, "after": extra}
        if "max_running_requests" in new:
            self.changes["max_running_requests"] = {"before": self._running(), "after": new["max_running_requests"]}
        self._slot_log = changed
        return before, after

    def _running(self) -> int:
        summ = global_record(self.log, "summary", self.ranks)
        if summ is not None and isinstance(summ.fields.get("max_running_requests"), int):
            return summ.fields["max_running_requests"]
        names = self.g.common.get("server_args", {}).get("max_running_requests", ())
        return int(server_arg(self.args, names) or 0)

    def _with_slot_inputs(self, new: dict[str, Any]) -> SglangLog:
        sa = self.g.common.get("server_args", {})
        recs = []
        for r in self.log.records:
            if r.kind == "summary" and "max_running_requests" in new and "max_running_requests" in r.fields:
                r = replace(r, fields={**r.fields, "max_running_requests": new["max_running_requests"]})
            elif r.kind == "server_args":
                args = dict(r.fields.get("args", {}))
                if "max_running_requests" in new:
                    for n in sa.get("max_running_requests", ()):
                        args[n] = new["max_running_requests"]
                if "disaggregation_decode_extra_slots" in new:
                    for n in sa.get("extra_slots", ()):
                        args[n] = new["disaggregation_decode_extra_slots"]
                r = replace(r, fields={**r.fields, "args": args})
            recs.append(r)
        return replace(self.log, records=recs)

    def pools(self, slots: tuple[int, int], tokens: tuple[int, int], params: list[str]) -> None:
        """The per-slot pools (and those that follow the draft tokens) of the data's ``pools``."""
        for i, spec in enumerate(self.rules["pools"]):
            scales = [s for s in spec["scales_with"] if s in params]
            if not scales:
                continue
            found = self.record_of(spec["alloc"]["what"], spec["alloc"]["role"])
            if found is None or spec["field"] not in found[0].fields:
                continue
            rec, _al = found
            gib = float(rec.fields[spec["field"]])
            if "slots" in scales and "slots" in rec.fields and rec.fields["slots"] != slots[0]:
                raise OptionError(
                    f"--set {self._slot_param()}: {self.log.path} line {rec.line} sizes "
                    f"{spec['item']} for {rec.fields['slots']} slots, not the {slots[0]} request slots;"
                    " the replay cannot tell how it follows them"
                )
            if "requires" in spec and "slots" in scales:
                req = spec["requires"]
                other = self.find(req["record"])
                env = {
                    **{k: v for k, v in rec.fields.items() if isinstance(v, (int, float))},
                    **({k: v for k, v in other.fields.items() if isinstance(v, (int, float))} if other else {}),
                    "slots_before": slots[0],
                }
                if (
                    other is None
                    or any(n not in env for n in req["vars"])
                    or eval_rule(req, "identity", env, f"$.pools[{i}].requires") != 0
                ):
                    self.warnings.append(
                        f"{self.log.path}: {spec['item']} ({gib} GiB, line {rec.line}) is not shown "
                        "to follow the request slots; the replay keeps it"
                    )
                    continue
            env = {
                "gib": gib,
                "slots_before": slots[0],
                "slots_after": slots[1],
                "draft_tokens_before": tokens[0],
                "draft_tokens_after": tokens[1],
            }
            after = eval_rule(spec, "formula", env, f"$.pools[{i}]")
            basis = (
                spec.get("basis_draft_tokens", spec["basis"])
                if "draft_tokens" in scales and tokens[0] != tokens[1]
                else spec["basis"]
            )
            parts = []
            if "slots" in scales:
                parts.append(f"{gib:g} GiB ÷ {slots[0]} slots × {slots[1]}")
            if "draft_tokens" in scales:
                parts.append(f"{'' if parts else f'{gib:g} GiB '}× draft tokens {tokens[1]}/{tokens[0]}")
            self.add(
                spec["item"],
                gib,
                after,
                rule=" ".join(parts),
                flows_to=spec["flows_to"],
                basis=basis,
                parameter=", ".join(self._params_of(scales)),
                formula=spec["formula"],
                source=spec["source"],
                lines=[rec.line],
            )

    def _slot_param(self) -> str:
        return next(
            (p for p in ("max_running_requests", "disaggregation_decode_extra_slots") if p in self.changes),
            "max_running_requests",
        )

    def _params_of(self, scales: list[str]) -> list[str]:
        out = []
        if "slots" in scales:
            out += [p for p in ("max_running_requests", "disaggregation_decode_extra_slots") if p in self.changes]
        if "draft_tokens" in scales:
            out.append("speculative_num_draft_tokens")
        return out

    def req_to_token(self, slots: tuple[int, int]) -> None:
        spec = self.rules["req_to_token"]
        before = self.v.get(spec["ledger_row"])
        if before is None:
            self.warnings.append(f"{self.log.path}: no context_len, so the req_to_token table is not replayed")
            return
        after = rank_ledger(self._slot_log, self.ranks).values().get(spec["ledger_row"])
        row = next(r for r in self.led.rows if r["row"] == spec["ledger_row"])
        self.add(
            spec["item"],
            before,
            after,
            rule=f"{slots[0]} → {slots[1]} rows × context_len × 4 B",
            flows_to=spec["flows_to"],
            basis=spec["basis"],
            parameter=", ".join(self._params_of(["slots"])),
            formula=spec["formula"],
            source=spec["source"],
            lines=row["lines"],
        )

    # ----------------------------------------------------------------- mem_fraction_static

    def total_gib(self, param: str) -> tuple[float, int]:
        stage = self.rules["mem_fraction_static"]["total_stage"]
        p = next((pt for pt in self.led.points if pt.stage == stage), None)
        if p is None:
            raise MissingDataError(
                f"{self.log.path}: --set {param} needs the target 'Load weight begin' free memory"
                " (sglang's total_gpu_memory), which the log does not give"
            )
        return p.avail, p.line

    def mem_fraction(self, msf_after: float) -> None:
        spec = self.rules["mem_fraction_static"]
        msf = float(self.arg(spec["server_arg"], "mem_fraction_static"))
        mamba = self.record_of("ssm_state", "target")
        if mamba is not None:
            slots, *_ = request_slots(self.log, self.ranks, self.g)
            if mamba[0].fields.get("slots") != slots:
                raise OptionError(
                    f"--set mem_fraction_static: {self.log.path} line {mamba[0].line} sizes the mamba "
                    f"pool for {mamba[0].fields.get('slots')} slots, not the {slots} request slots, so "
                    "sglang splits the budget by mamba_full_memory_ratio; the replay models only "
                    f"{spec['requires_fixed_mamba']}"
                )
        total, line = self.total_gib("mem_fraction_static")
        delta = eval_rule(
            spec, "formula", {"total_gib": total, "msf_before": msf, "msf_after": msf_after}, "$.mem_fraction_static"
        )
        self.changes["mem_fraction_static"] = {"before": msf, "after": msf_after}
        self.total = total
        self.add(
            spec["item"],
            total * msf,
            total * msf + delta,
            rule=f"{total:g} GiB pre-load free × ({msf_after:g} − {msf:g}); the runtime margin gives the same",
            flows_to=spec["flows_to"],
            basis=spec["basis"],
            parameter="mem_fraction_static",
            formula=spec["formula"],
            source=spec["source"],
            lines=[line, self.args_line],
        )

    # ----------------------------------------------------------------- DeepEP

    def deepep_size(self, tokens: int | None = None) -> tuple[float, int, str, list[int]] | None:
        """(GiB, tokens, basis, lines) of DeepEP's low-latency buffer now (``tokens`` None) or at ``tokens``."""
        spec = self.rules["deepep"]
        rec = self.find(spec["record"]) or next((r for r in self.log.records if r.kind == spec["record"]), None)
        if rec is not None and spec["size_field"] in rec.fields and spec["tokens_field"] in rec.fields:
            t0, size = int(rec.fields[spec["tokens_field"]]), float(rec.fields[spec["size_field"]])
            if tokens is None:
                return size, t0, "measured", [rec.line]
            after = eval_rule(
                spec, "formula", {"size_gib": size, "tokens_before": t0, "tokens_after": tokens}, "$.deepep"
            )
            return after, tokens, "measured", [rec.line]
        d = self.dims
        names = spec["dims"]
        env = next(
            (
                r
                for r in self.log.records
                if r.kind == "environment" and r.fields.get("deepep_max_dispatch_tokens") is not None
            ),
            None,
        )  # the launch's env line
        t_now = d.get(names["t"], int(env.fields["deepep_max_dispatch_tokens"]) if env is not None else None)
        if names["h"] in d and names["e"] in d and (tokens is not None or t_now is not None):
            t = tokens if tokens is not None else t_now
            size = eval_rule(spec, "layout_formula", {"t": t, "h": d[names["h"]], "e": d[names["e"]]}, "$.deepep")
            return size, t, "estimated", []
        return None

    def deepep(self, tokens_after: int, new: dict[str, Any]) -> None:
        spec = self.rules["deepep"]
        now = self.deepep_size()
        if now is None:
            raise MissingDataError(
                f"{self.log.path} has no 'DeepEP low-latency buffer allocated' line; pass --dim "
                "hidden_size=N --dim num_experts=N (and --dim num_max_dispatch_tokens_per_rank=N "
                "when the log's environment line does not give "
                "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK) to use DeepEP's layout formula"
            )
        size, t0, basis, lines = now
        self.check_dispatch_rows(tokens_after, new)
        after, _t, basis_after, _ = self.deepep_size(tokens_after)
        self.changes["deepep_max_dispatch_tokens"] = {"before": t0, "after": tokens_after}
        largest = self.v.get(spec["inside"])
        where = (
            f"inside the largest CUDA-graph bucket ({largest:g} GiB)"
            if largest is not None
            else "allocated at the first dispatch"
        )
        self.add(
            spec["item"],
            size,
            after,
            rule=f"{size:g} GiB × {tokens_after}/{t0} tokens per rank, {where}",
            flows_to=spec["flows_to"],
            basis=basis_after if basis == "measured" else "estimated",
            parameter="deepep_max_dispatch_tokens",
            formula=spec["formula"] if basis == "measured" else spec["layout_formula"],
            source=spec["source"],
            lines=lines,
        )

    def check_dispatch_rows(self, tokens: int, new: dict[str, Any]) -> None:
        spec = self.rules["deepep"]
        sizes = self._captured()
        draft = new.get("speculative_num_draft_tokens", self.args.get("speculative_num_draft_tokens"))
        tp, dp = self.args.get("tp_size"), self.args.get("dp_size") or 1
        if not sizes or not isinstance(draft, int) or not isinstance(tp, int):
            return
        max_bs = max(self._new_sizes(new) if ("cuda_graph_bs" in new or "cuda_graph_max_bs" in new) else sizes)
        rows = eval_rule(
            spec, "dispatch_rows", {"max_bs": max_bs, "draft_tokens": draft, "dp": dp, "tp": tp}, "$.deepep"
        )
        if tokens < rows:
            raise OptionError(
                f"--set deepep_max_dispatch_tokens={tokens}: the largest CUDA-graph bucket dispatches "
                f"{rows:g} rows per rank (bs {max_bs} × {draft} draft tokens × dp {dp} ÷ tp {tp}); give "
                f"at least {math.ceil(rows)}"
            )

    # ----------------------------------------------------------------- CUDA graphs

    def _target(self):
        return next((gr for gr in self.led.graphs if gr.label == "target"), None)

    def _captured(self) -> list[int]:
        gr = self._target()
        if gr is None:
            return []
        return sorted(gr.sizes or [b["size"] for b in graph_buckets(gr)])

    def _new_sizes(self, new: dict[str, Any]) -> list[int]:
        captured = self._captured()
        sizes = new.get("cuda_graph_bs", captured)
        missing = [b for b in sizes if b not in captured]
        if missing:
            raise OptionError(
                f"--set cuda_graph_bs: bs {', '.join(map(str, missing))} was not captured in "
                f"{self.log.path} (captured {captured}); the replay can only drop captured sizes"
            )
        if "cuda_graph_max_bs" in new:
            if new["cuda_graph_max_bs"] > max(captured) and "cuda_graph_bs" not in new:
                raise OptionError(
                    f"--set cuda_graph_max_bs={new['cuda_graph_max_bs']}: above the largest captured bs "
                    f"{max(captured)}, whose new buckets' cost the log does not give; give at most "
                    f"{max(captured)}"
                )
            sizes = [b for b in sizes if b <= new["cuda_graph_max_bs"]]
        if not sizes:
            raise OptionError(
                f"--set cuda_graph_bs / cuda_graph_max_bs leave no captured batch size (captured "
                f"{captured}); keep at least one"
            )
        return sizes

    def cuda_graph(self, new: dict[str, Any], deepep_before: float | None) -> None:
        spec = self.rules["cuda_graph"]
        param = "cuda_graph_bs" if "cuda_graph_bs" in new else "cuda_graph_max_bs"
        gr = self._target()
        largest = self.v.get("cuda_graph_largest_bucket_gib")
        if gr is None or largest is None:
            raise MissingDataError(
                f"{self.log.path}: --set {param} needs the target graph's per-bucket costs (the "
                "progress bars from the largest size on), which the log of "
                f"{rank_label(self.ranks)} does not give"
            )
        buckets = {b["size"]: b for b in graph_buckets(gr)}
        captured = self._captured()
        sizes = self._new_sizes(new)
        if any(buckets.get(b, {}).get("cost_gib") is None for b in captured):
            raise MissingDataError(
                f"{self.log.path}: --set {param} needs every captured bucket's progress bar; some "
                "are missing from the log"
            )
        self.changes[param] = {
            "before": captured if param == "cuda_graph_bs" else max(captured),
            "after": sizes if param == "cuda_graph_bs" else max(sizes),
        }
        max_bs, new_max = max(captured), max(sizes)
        for b in sorted(set(captured) - set(sizes), reverse=True):
            bk = buckets[b]
            self.add(
                f"cuda_graph_bucket_bs{b}",
                bk["cost_gib"],
                0.0,
                rule=f"bs {b} no longer captured" + (" (it was the largest)" if b == max_bs else ""),
                flows_to=spec["removed"]["flows_to"],
                basis=spec["removed"]["basis"],
                parameter=param,
                formula=spec["removed"]["formula"],
                source=spec["new_largest"]["source"],
                lines=bk["lines"],
            )
        if new_max == max_bs:
            return
        if deepep_before is None:
            if str(self.args.get("moe_a2a_backend")) == "deepep":
                raise MissingDataError(
                    f"{self.log.path}: the largest bucket holds DeepEP's buffer, whose size the log"
                    " does not print; pass --dim hidden_size=N --dim num_experts=N --dim "
                    "num_max_dispatch_tokens_per_rank=N to estimate the new largest bucket"
                )
            deepep_before = 0.0
        nl, st = spec["new_largest"], spec["static"]
        env = {"deepep_gib": deepep_before, "largest_gib": largest, "new_max_bs": new_max, "max_bs": max_bs}
        est = eval_rule(nl, "formula", env, "$.cuda_graph.new_largest")
        bk = buckets[new_max]
        self.add(
            f"cuda_graph_bucket_bs{new_max}",
            bk["cost_gib"],
            est,
            rule=f"bs {new_max} becomes the largest: DeepEP {deepep_before:g} + ({largest:g} − {deepep_before:g})"
            f" × {new_max}/{max_bs}",
            flows_to=nl["flows_to"],
            basis=nl["basis"],
            parameter=param,
            formula=nl["formula"],
            source=nl["source"],
            lines=bk["lines"],
        )
        static = self.v.get("cuda_graph_static_gib")
        if static is not None:
            after = eval_rule(
                st, "formula", {"static_gib": static, "new_max_bs": new_max, "max_bs": max_bs}, "$.cuda_graph.static"
            )
            row = next(r for r in self.led.rows if r["row"] == "cuda_graph_static_gib")
            self.add(
                "cuda_graph_static",
                static,
                after,
                rule=f"{static:g} GiB × {new_max}/{max_bs}",
                flows_to=st["flows_to"],
                basis=st["basis"],
                parameter=param,
                formula=st["formula"],
                source=st["source"],
                lines=row["lines"],
            )
        if self.v.get("cuda_graph_draft_gib"):
            self.warnings.append(
                f"{self.log.path}: the draft graph ({self.v['cuda_graph_draft_gib']:g} GiB) has no "
                "per-bucket bars in the log; the replay keeps its cost"
            )


def sink_rows(rp: Replay, kv_before: float, margin_before: float) -> tuple[float, float]:
    """The KV pool and runtime margin after: each row's freed GiB (− delta) into its sink; the static budget's
    growth into the KV pool, out of the runtime margin."""
    msf = rp.rules["mem_fraction_static"]
    kv_d = margin_d = 0.0
    for r in rp.rows:
        if r["item"] == msf["item"]:
            kv_d += r["delta_gib"]
            margin_d -= r["delta_gib"]
        elif r["flows_to"] == "kv_pool":
            kv_d -= r["delta_gib"]
        elif r["flows_to"] == "runtime_margin":
            margin_d -= r["delta_gib"]
    flows = [r for r in rp.rows if r["flows_to"] in SINKS]
    rp.add(
        "kv_pool",
        kv_before,
        kv_before + kv_d,
        rule="KV pool + Σ freed by the rows that flow into it",
        flows_to="",
        basis="measured" if all(r["basis"] == "measured" for r in flows if r["flows_to"] == "kv_pool") else "estimated",
        parameter="",
        formula="kv_gib − Σ delta (flows_to kv_pool) + static_pool_budget delta",
        source=rp.rules["kv"]["source"],
        lines=[ln for r in flows if r["flows_to"] == "kv_pool" for ln in r["lines"]],
    )
    rp.add(
        "runtime_margin",
        margin_before,
        margin_before + margin_d,
        rule="free memory after startup + Σ freed by the rows that flow into it − the static budget's growth",
        flows_to="",
        basis="measured"
        if all(r["basis"] == "measured" for r in flows if r["flows_to"] == "runtime_margin")
        else "estimated",
        parameter="",
        formula="runtime_margin_gib − Σ delta (flows_to runtime_margin) − static_pool_budget delta",
        source=msf["source"],
        lines=[ln for r in flows if r["flows_to"] == "runtime_margin" for ln in r["lines"]],
    )
    return kv_d, margin_d


__all__ = ["Replay", "SINKS", "sink_rows"]
