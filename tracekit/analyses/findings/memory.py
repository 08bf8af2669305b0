"""Memory findings of `tracekit findings --log LOG`: launch parameters whose memory would serve better elsewhere,
each priced by the ledger replay of `tracekit whatif` (docs/whatif.md) — GiB per GPU and KV tokens per instance."""

from __future__ import annotations

import math

from ...errors import MissingDataError
from .rules import finding, finding_rules, log_server_args
from ..memory.whatif import whatif


def _gain(res) -> tuple[float, int, float, float]:
    """(the finding's GiB per GPU: what moves into the KV pool, else what the runtime margin gains; the KV tokens per
    instance it adds; KV GiB moved; margin GiB moved)."""
    s = res.summary
    kv = float(s.get("kv_pool_delta_gib") or 0.0)
    margin = float(s.get("runtime_margin_delta_gib") or 0.0)
    tokens = int((s.get("tokens_per_instance_after") or 0) - (s.get("tokens_per_instance_before") or 0))
    return (kv if kv > 0 else max(margin, 0.0)), tokens, kv, margin


def extra_slots(ctx) -> list[dict]:
    """Extra request slots above the headroom of ``kinds.extra_slots.headroom``: what the replay moves into KV."""
    args = log_server_args(ctx.log)
    mrr, extra = args.get("max_running_requests"), args.get("disaggregation_decode_extra_slots")
    if mrr is None or extra is None:
        raise MissingDataError(f"{ctx.log.path} gives no max_running_requests or disaggregation_decode_extra_slots")
    spec = finding_rules()["kinds"]["extra_slots"]
    target = max(1, math.ceil(int(mrr) * float(spec["headroom"])))
    if int(extra) <= target:
        return []
    res = whatif(ctx.log, settings={"disaggregation_decode_extra_slots": target})
    gib, tokens, kv, margin = _gain(res)
    slots = res.summary.get("request_slots_before")
    per_slot = _per_slot(res)
    return [
        finding(
            ctx,
            "extra_slots",
            "memory",
            gain_gib=gib,
            gain_tokens=tokens,
            whole_gib=res.summary.get("total_gpu_memory_gib"),
            extra=extra,
            mrr=mrr,
            slots=slots,
            per_slot=f"{per_slot:.2f}" if per_slot is not None else "–",
            target=target,
            headroom=f"{target / int(mrr):.0%}",
            evidence=f"KV pool {res.summary['kv_pool_gib_before']:.2f} → {res.summary['kv_pool_gib_after']:.2f}"
            f" GiB per GPU (+{kv:.2f}), runtime margin {margin:+.2f} GiB; KV tokens per instance "
            f"{res.summary['tokens_per_instance_before']:,} → {res.summary['tokens_per_instance_after']:,}",
        )
    ]


def _per_slot(res) -> float | None:
    rows = res.tables["before_after"]
    moved = rows[(rows["flows_to"] == "kv_pool")] if "flows_to" in rows else rows.iloc[0:0]
    n = (res.summary.get("request_slots_before") or 0) - (res.summary.get("request_slots_after") or 0)
    if not n or moved.empty:
        return None
    return float(-moved["delta_gib"].astype(float).sum()) / n


def deepep_buffer(ctx) -> list[dict]:
    """DeepEP's low-latency buffer sized for more tokens per rank than the largest captured batch dispatches."""
    args = log_server_args(ctx.log)
    max_bs = args.get("cuda_graph_max_bs") or max(args.get("cuda_graph_bs") or [0]) or None
    if not max_bs:
        raise MissingDataError(f"{ctx.log.path} gives no cuda_graph_max_bs")
    if str(args.get("moe_a2a_backend") or "").lower() != "deepep":
        raise MissingDataError(f"{ctx.log.path}: the MoE all-to-all backend is not DeepEP")
    q_len = int(args.get("speculative_num_draft_tokens") or 1)
    tp, dp = int(args.get("tp_size") or 1), int(args.get("dp_size") or 1)
    group = max(1, tp // max(dp, 1))  # rows of a DP group are split over its ranks before dispatch
    needed = math.ceil(int(max_bs) * q_len / group)
    probe = whatif(ctx.log, settings={"deepep_max_dispatch_tokens": needed})
    now = (probe.summary.get("changes") or {}).get("deepep_max_dispatch_tokens", {}).get("before")
    if now is None or int(now) <= needed:
        return []
    gib, tokens, kv, margin = _gain(probe)
    return [
        finding(
            ctx,
            "deepep_buffer",
            "memory",
            gain_gib=gib,
            gain_tokens=tokens or None,
            whole_gib=probe.summary.get("total_gpu_memory_gib"),
            tokens=now,
            needed=needed,
            max_bs=max_bs,
            q_len=q_len,
            attn_tp=group,
            evidence=f"runtime margin {probe.summary['runtime_margin_gib_before']:.2f} → "
            f"{probe.summary['runtime_margin_gib_after']:.2f} GiB per GPU ({margin:+.2f}); the KV pool"
            f" gains it only if mem_fraction_static rises to "
            f"{probe.summary.get('mem_fraction_static_to_move_margin_gain', '–')}",
        )
    ]


MEMORY_SOURCES = [("memory: extra slots", extra_slots), ("memory: DeepEP buffer", deepep_buffer)]
