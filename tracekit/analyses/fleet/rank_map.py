"""A14 — DP-attention rank mapping (which attention group and TP rank each global rank is)."""

from __future__ import annotations

import pandas as pd

from ...errors import UsageError
from ...result import Result


def rank_map(
    *, tp: int, dp: int = 1, attn_cp: int = 1, dp_attention: bool = True, dcp: int = 1, ep: int | None = None
) -> Result:
    """`tracekit ranks`: attn_tp_size = tp ÷ dp ÷ attn_cp; attn_tp_rank = tp_rank mod attn_tp_size;
    attn_cp_rank = (tp_rank ÷ attn_tp_size) mod attn_cp; attn_dp_rank = tp_rank ÷ (attn_tp_size × attn_cp).
    Without DP attention the whole TP group is one attention group (attn_tp_size = tp ÷ attn_cp, dp rank 0).

    ``dcp``: decode context parallel — the KV cache of one attention TP group split across ``dcp`` of its ranks
    (dcp_rank = attn_tp_rank mod dcp; the attention TP size is unchanged: DP2 × DCP8 on 16 GPUs is attention TP 8,
    each request's KV split 8 ways). ``ep``: expert parallel size of the MoE (default tp): moe_tp_size = tp ÷ ep,
    ep_rank = tp_rank ÷ moe_tp_size, moe_tp_rank = tp_rank mod moe_tp_size (sglang's formulas)."""
    ep = tp if ep is None else ep
    for name, v in (("--tp", tp), ("--dp", dp), ("--attn-cp", attn_cp), ("--dcp", dcp), ("--ep", ep)):
        if v < 1:
            raise _usage(f"{name} must be at least 1, not {v}")
    eff_dp = dp if dp_attention else 1
    if tp % (eff_dp * attn_cp):
        raise _usage(f"--tp {tp} is not divisible by dp × attn_cp = {eff_dp} × {attn_cp}; sglang requires it")
    size = tp // eff_dp // attn_cp
    if size % dcp:
        raise _usage(
            f"--dcp {dcp} does not divide the attention TP size {size} (tp {tp} ÷ dp {eff_dp} ÷ attn_cp"
            f" {attn_cp}): the KV cache is split across ranks of one attention TP group"
        )
    if tp % ep:
        raise _usage(f"--tp {tp} is not divisible by --ep {ep}; the MoE's TP size is tp ÷ ep")
    moe_tp = tp // ep
    rows = [
        {
            "tp_rank": r,
            "attn_tp_size": size,
            "attn_tp_rank": r % size,
            "attn_cp_rank": (r // size) % attn_cp,
            "attn_dp_rank": r // (size * attn_cp),
            "dcp_rank": (r % size) % dcp,
            "ep_rank": r // moe_tp,
            "moe_tp_rank": r % moe_tp,
        }
        for r in range(tp)
    ]
    summary = {
        "tp": tp,
        "dp": dp,
        "attn_cp": attn_cp,
        "dp_attention": dp_attention,
        "attn_tp_size": size,
        "attention_groups": eff_dp,
        "dcp": dcp,
        "kv_split": dcp,
        "ep": ep,
        "moe_tp_size": moe_tp,
    }
    return Result(
        command="ranks",
        inputs=[],
        params={"tp": tp, "dp": dp, "attn_cp": attn_cp, "dp_attention": dp_attention, "dcp": dcp, "ep": ep},
        summary=summary,
        tables={"ranks": pd.DataFrame(rows)},
    )


def _usage(msg: str) -> UsageError:
    return UsageError(msg)
