"""The ranks part of `tracekit report RUN_DIR` (issue 28): the report of the reference rank (the lowest rank id) with
what every rank of the run adds — the imbalance per step and the straggler with its batch (``summary.ranks``),
the imbalance tables under ``rank_*`` names, and the rank findings among the findings. Read from a
``tracekit.imbalance`` result (contract ``tracekit.imbalance/2``); nothing here reads a trace."""

from __future__ import annotations

from ...result import Result
from ..findings.imbalance_findings import merge_findings, run_inputs, straggler_batch

run_report_inputs = run_inputs  # its old name here (tracekit.report(run) and tracekit.findings(run) share it)
__all__ = ["merge_findings", "run_report_inputs", "ranks_summary", "add_ranks", "RANK_TABLES", "SUMMARY_KEYS"]

# report's table name -> the imbalance table it is (report has its own `steps`, the reference rank's)
RANK_TABLES = {
    "ranks": "ranks",
    "rank_by_step": "by_step",
    "rank_steps": "steps",
    "rank_collectives": "collectives",
    "rank_per_collective": "per_collective",
}
SUMMARY_KEYS = (
    "ranks",
    "reference_rank",
    "clock",
    "steps",
    "partial_steps",
    "collectives",
    "unmatched",
    "imbalance_ns_per_step",
    "world_size",  # the ranks the run had, and which of them have no trace (issue 40): the imbalance a lower bound
    "world_size_from",
    "missing_ranks",
    "imbalance_is_lower_bound",
    "imbalance_ns_mean_per_step",
    "worst_steps",
    "straggler_rotates",
    "stragglers",
)


def ranks_summary(imb: Result) -> dict:
    """``summary.ranks`` of a report: the imbalance summary, its straggler with ``bs`` (lower median over the steps
    it was last in) and ``median_bs`` (lower median over all steps of the median rank's bs)."""
    s = imb.summary
    out = {k: s.get(k) for k in SUMMARY_KEYS}
    st = s.get("straggler")
    if st is not None:
        bs, median_bs = straggler_batch(imb)
        st = {**st, "bs": bs, "median_bs": median_bs}
    out["straggler"] = st
    return out


def add_ranks(imb: Result, summary: dict, tables: dict, inputs: list, params: dict, warnings: list, fnd: Result):
    """Adds the ranks part to a report's ``summary`` and ``tables`` (in place); returns (inputs, warnings) with
    every rank's file and the imbalance warnings (prefixed ``ranks:``). ``fnd``: the report's findings, those of a
    run (``findings(trace, ranks=imb)``: the analysed rank's and the rank findings ranked together), whose
    ``summary.rank`` is the rank this report's trace is of."""
    ref = imb.summary.get("reference_rank")
    mine = fnd.summary.get("rank", ref)
    summary["ranks"] = {**ranks_summary(imb), "analysed_rank": mine}
    for name, src in RANK_TABLES.items():
        tables[name] = imb.tables[src]
    inputs = [{**inputs[0], "rank": mine}, *inputs[1:], *[dict(i) for i in imb.inputs if i.get("rank") != mine]]
    params["ranks"] = dict(imb.params)
    src = fnd.tables["sources"]
    why = [r for r in src[src["source"] == "ranks"]["reason"].dropna().astype(str) if r]
    seen = set(warnings)
    new = [f"ranks: {w}" for w in list(imb.warnings) + why if f"ranks: {w}" not in seen]
    return inputs, list(warnings) + list(dict.fromkeys(new))
