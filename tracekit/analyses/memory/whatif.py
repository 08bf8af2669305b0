"""Memory what-ifs (``tracekit whatif``, docs/whatif.md): replay one rank's ledger with changed launch parameters.

The rules (which pools follow which parameter, the formulas, where a freed GiB flows, their sources) are data:
``tracekit/data/whatif.json``, read and the settings parsed by :mod:`.whatif_rules`. The replay engine
(:class:`.replay.Replay`) reads the logged figures through the ledger and moves the rows; this module runs the
replay in order for the settings given, refuses what it cannot model with one sentence, and sets the capacity
(:func:`capacity`) before and after beside it.
"""

from __future__ import annotations

from typing import Any

from ...errors import MissingDataError
from ...ingest.sglang_log import SglangLog, rank_label
from ...result import Result
from .capacity import capacity
from .ledger_engine import GIB, OptionError, frame, one_launch, resolve_rank, round_gib
from .ledger_rows import rank_ledger
from .whatif_replay import Replay, sink_rows
from .whatif_rules import parse_dims, parse_settings
from ..steps.keywords import options_as_objects

ROW_COLUMNS = [
    "item",
    "before_gib",
    "after_gib",
    "delta_gib",
    "rule",
    "flows_to",
    "basis",
    "parameter",
    "formula",
    "source",
    "lines",
]
CAPACITY_COLUMNS = ["level", "gpus", "kv_gib_before", "kv_gib_after", "tokens_before", "tokens_after", "delta_tokens"]
SETTING_COLUMNS = ["parameter", "before", "after", "given_as"]
EACH_DP_OWN = "each DP rank's own #tokens"


def _replay_settings(rp: Replay, new: dict[str, Any]) -> tuple[tuple[int, int], float | None]:
    """Move the rows of every setting, in the replay's order: request slots, draft tokens, the per-slot pools and
    req_to_token, DeepEP's buffer, CUDA graphs, the static budget. → (slots before/after, total GiB if it was read)."""
    slots = (0, 0)
    if "max_running_requests" in new or "disaggregation_decode_extra_slots" in new:
        slots = rp.slots(new)
    dt_before = rp.args.get(rp.rules["draft_tokens"]["server_arg"])
    if "speculative_num_draft_tokens" in new:
        if not isinstance(dt_before, int):
            raise MissingDataError(
                f"{rp.log.path}: --set speculative_num_draft_tokens needs the launch's own value "
                "(the server_args line), which the log does not give"
            )
        rp.changes["speculative_num_draft_tokens"] = {"before": dt_before, "after": new["speculative_num_draft_tokens"]}
        rp.warnings.append(f"{rp.log.path}: {rp.rules['draft_tokens']['warning']}")
    tokens = (dt_before or 1, new.get("speculative_num_draft_tokens", dt_before or 1))
    scales = (["slots"] if slots != (0, 0) else []) + (["draft_tokens"] if tokens[0] != tokens[1] else [])
    if scales:
        rp.pools(slots if slots != (0, 0) else (1, 1), tokens, scales)
    if "slots" in scales:
        rp.req_to_token(slots)
    deepep_now = rp.deepep_size()
    if "deepep_max_dispatch_tokens" in new:
        rp.deepep(new["deepep_max_dispatch_tokens"], new)
    elif (
        {"cuda_graph_bs", "cuda_graph_max_bs", "speculative_num_draft_tokens"} & set(new)
        and deepep_now is not None
        and "moe_a2a_backend" in rp.args
    ):
        rp.check_dispatch_rows(deepep_now[1], new)
    if "cuda_graph_bs" in new or "cuda_graph_max_bs" in new:
        rp.cuda_graph(new, deepep_now[0] if deepep_now else None)
    total = None
    if "mem_fraction_static" in new:
        rp.mem_fraction(new["mem_fraction_static"])
        total = rp.total
    return slots, total


def _margin_to_move(rp: Replay, new: dict[str, Any], total: float | None) -> float | None:
    """The mem_fraction_static that would move the GiB freed into the runtime margin into the KV pool (None when
    nothing was freed there), with a warning that says so."""
    msf_after = new.get("mem_fraction_static", rp.args.get("mem_fraction_static"))
    margin_gain = -sum(r["delta_gib"] for r in rp.rows if r["flows_to"] == "runtime_margin")
    if not (margin_gain > 1e-9 and total and isinstance(msf_after, (int, float))):
        return None
    to_move = round(msf_after + margin_gain / total, 4)
    rp.warnings.append(
        f"{rp.log.path}: {round_gib(margin_gain)} GiB freed outside the static budget (DeepEP buffer,"
        " CUDA graphs, req_to_token, draft SWA KV) goes to the runtime margin, not the KV pool;"
        f" raising mem_fraction_static by {margin_gain / total:.4f} ({msf_after:g} → {to_move:g})"
        " would move it into the KV pool"
    )
    return to_move


def _capacity_rows(
    part: SglangLog, rank: str | None, kv_before: float, kv_d: float
) -> tuple[Result, dict[str, Any], list[dict[str, Any]]]:
    """Capacity before and after the KV pool moves by ``kv_d`` GiB per rank: (the capacity before, the summary
    after, one row per level)."""
    before_cap = capacity(log=part, rank=rank)
    bpt = before_cap.summary["bytes_per_token"]
    tokens_rank = before_cap.summary["tokens_per_rank"]
    after_cap = capacity(log=part, rank=rank, pool_gib=(tokens_rank * bpt + kv_d * GIB) / GIB) if kv_d else before_cap
    sb, sa = before_cap.summary, dict(after_cap.summary)
    inst_after = None
    if after_cap is not before_cap and sb.get("tokens_per_instance_source") == EACH_DP_OWN:
        # the DP groups logged different pools: each moves by the same change, from its own reading
        inst_after = sb["tokens_per_instance"] + (sa["tokens_per_dp"] - sb["tokens_per_dp"]) * sb["dp"]
        sa["tokens_per_instance"] = inst_after
    rows = []
    for lb, la in zip(before_cap.tables["levels"].to_dict("records"), after_cap.tables["levels"].to_dict("records")):
        gpus = lb["gpus"]
        own = sb.get("tokens_per_instance_source") == EACH_DP_OWN and lb["level"] == "instance"
        after_tokens = inst_after if inst_after is not None and own else la["tokens"]
        gib_before = lb["kv_gib"] if own else kv_before * gpus
        rows.append(
            {
                "level": lb["level"],
                "gpus": gpus,
                "kv_gib_before": round_gib(gib_before),
                "kv_gib_after": round_gib(gib_before + kv_d * gpus),
                "tokens_before": lb["tokens"],
                "tokens_after": after_tokens,
                "delta_tokens": after_tokens - lb["tokens"],
            }
        )
    return before_cap, sa, rows


@options_as_objects
def whatif(
    log: SglangLog,
    *,
    settings: list[str] | dict[str, str] | None = None,
    rank: str | None = None,
    launch: int | None = None,
    dims: list[str] | dict | None = None,
) -> Result:
    """``tracekit whatif``: replay the memory ledger of one rank with changed launch parameters (``settings``:
    ``NAME=VALUE`` items or a dict) and show what moves — per-slot pools, the CUDA-graph estimate, DeepEP's buffer,
    the runtime margin and the KV pool — with capacity per rank, DP group and instance before and after.

    ``dims`` (``hidden_size``, ``num_experts``, ``num_max_dispatch_tokens_per_rank``) feed DeepEP's layout formula
    when the log has no DeepEP buffer line. A parameter the replay cannot model is refused with one sentence."""
    new, given = parse_settings(settings)
    d = parse_dims(dims)
    part, warnings = one_launch(log, launch)
    ranks = resolve_rank(part, rank)
    led = rank_ledger(part, ranks)
    if not led.complete:
        raise MissingDataError(
            f"{part.path}: the launch is incomplete ({led.incomplete_reason}); a what-if needs a complete launch log"
        )
    rp = Replay(part, ranks, led, d)
    kv_before = rp.need("kv_gib", next(iter(new)), "the target KV pool ('KV Cache is allocated')")
    margin_before = rp.need("runtime_margin_gib", next(iter(new)), "the runtime margin (the last free-memory reading)")
    slots, total = _replay_settings(rp, new)
    kv_d, margin_d = sink_rows(rp, kv_before, margin_before)
    kv_after, margin_after = kv_before + kv_d, margin_before + margin_d
    if not kv_after > 0:
        raise OptionError(
            f"--set {', '.join(given.values())}: the KV pool would be {round_gib(kv_after)} GiB, so "
            "sglang would refuse to start; choose values that leave a KV pool"
        )
    if margin_after < 0:
        rp.warnings.append(
            f"{part.path}: the runtime margin would be {round_gib(margin_after)} GiB: below zero the "
            "launch runs out of memory capturing CUDA graphs or at the first large batch"
        )
    if total is None:
        total = (
            rp.total_gib(next(iter(new)))[0]
            if any(pt.stage == rp.rules["mem_fraction_static"]["total_stage"] for pt in led.points)
            else None
        )
    to_move = _margin_to_move(rp, new, total)
    before_cap, sa, cap_rows = _capacity_rows(part, rank, kv_before, kv_d)
    sb = before_cap.summary
    summary = {
        "kv_pool_gib_before": round_gib(kv_before),
        "kv_pool_gib_after": round_gib(kv_after),
        "tokens_per_instance_before": sb["tokens_per_instance"],
        "tokens_per_instance_after": sa["tokens_per_instance"],
        "kv_pool_delta_gib": round_gib(kv_d),
        "runtime_margin_gib_before": round_gib(margin_before),
        "runtime_margin_gib_after": round_gib(margin_after),
        "runtime_margin_delta_gib": round_gib(margin_d),
        "tokens_per_rank_before": sb["tokens_per_rank"],
        "tokens_per_rank_after": sa["tokens_per_rank"],
        "tokens_per_dp_before": sb["tokens_per_dp"],
        "tokens_per_dp_after": sa["tokens_per_dp"],
        "bytes_per_token": sb["bytes_per_token"],
        "rank": rank_label(ranks),
        "request_slots_before": slots[0] or led.values().get("request_slots"),
        "request_slots_after": slots[1] or led.values().get("request_slots"),
        "total_gpu_memory_gib": total,
        "mem_fraction_static_to_move_margin_gain": to_move,
        "changes": rp.changes,
    }
    settings_rows = [
        {"parameter": k, "before": v["before"], "after": v["after"], "given_as": given.get(k, k)}
        for k, v in rp.changes.items()
    ]
    return Result(
        command="whatif",
        inputs=[{"path": log.path}],
        params={"settings": {k: v for k, v in new.items()}, "rank": rank, "launch": launch, "dims": d or None},
        summary=summary,
        tables={
            "before_after": frame(rp.rows, ROW_COLUMNS),
            "capacity": frame(cap_rows, CAPACITY_COLUMNS),
            "settings": frame(settings_rows, SETTING_COLUMNS),
        },
        warnings=warnings
        + list(part.warnings)
        + rp.warnings
        + [w for w in before_cap.warnings if w not in part.warnings],
    )


__all__ = ["whatif"]
