"""A14 — DP-attention rank mapping (which attention group and TP rank each global rank is)."""
from __future__ import annotations

import pandas as pd

from ..errors import UsageError
from ..result import Result


def rank_map(*, tp: int, dp: int = 1, attn_cp: int = 1, dp_attention: bool = True) -> Result:
    """`tracekit ranks`: attn_tp_size = tp ÷ dp ÷ attn_cp; attn_tp_rank = tp_rank mod attn_tp_size;
    attn_cp_rank = (tp_rank ÷ attn_tp_size) mod attn_cp; attn_dp_rank = tp_rank ÷ (attn_tp_size × attn_cp).
    Without DP attention the whole TP group is one attention group (attn_tp_size = tp ÷ attn_cp, dp rank 0)."""
    for name, v in (("--tp", tp), ("--dp", dp), ("--attn-cp", attn_cp)):
        if v < 1:
            raise _usage(f"{name} must be at least 1, not {v}")
    eff_dp = dp if dp_attention else 1
    if tp % (eff_dp * attn_cp):
        raise _usage(f"--tp {tp} is not divisible by dp × attn_cp = {eff_dp} × {attn_cp}; sglang requires it")
    size = tp // eff_dp // attn_cp
    rows = [{"tp_rank": r, "attn_tp_size": size, "attn_tp_rank": r % size,
             "attn_cp_rank": (r // size) % attn_cp, "attn_dp_rank": r // (size * attn_cp)} for r in range(tp)]
    summary = {"tp": tp, "dp": dp, "attn_cp": attn_cp, "dp_attention": dp_attention, "attn_tp_size": size,
               "attention_groups": eff_dp}
    return Result(command="ranks", inputs=[], params={"tp": tp, "dp": dp, "attn_cp": attn_cp,
                                                      "dp_attention": dp_attention},
                  summary=summary, tables={"ranks": pd.DataFrame(rows)})


def _usage(msg: str) -> UsageError:
    return UsageError(msg)
