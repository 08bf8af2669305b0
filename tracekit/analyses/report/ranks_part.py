"""The ranks part of `tracekit report RUN_DIR` (issue 28): the report of the reference rank (the lowest rank id) with
what every rank of the run adds — the imbalance per step and the straggler with its batch (``summary.ranks``),
the imbalance tables under ``rank_*`` names, and the rank findings among the findings. Read from a
``tracekit.imbalance`` result (contract ``tracekit.imbalance/2``); nothing here reads a trace."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...result import Result
from ..findings.imbalance_findings import rank_findings_of, straggler_batch
from ..fleet.multirank.api import imbalance_in_process, reference_files

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


def run_report_inputs(run, ranks: Result | None, steps):
    """``tracekit.report(run)`` of a ``tracekit.load_run`` Run: (its reference rank's trace, loaded, and the
    run's imbalance: ``ranks`` when given, else computed here, the files one after another)."""
    from ...ingest import load

    imb = ranks if ranks is not None else imbalance_in_process(run, steps=steps)
    dev, ref = run.reference_device(), load(reference_files(run, imb)[0])  # one export's processes: the reference's GPU
    return (ref if dev is None else ref.on_device(dev)), imb


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


def merge_findings(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Two findings tables (tracekit.findings/1 rows) as one, in the findings' order — time findings by gain, then
    memory by GiB, then those without a number, minor ones last — ranks renumbered from 1."""
    if not len(b):
        return a
    if not len(a):
        return b
    df = pd.concat([a, b], ignore_index=True)
    ms = df["gain_ms_per_step"].astype("Float64")
    gib = df["gain_gib"].astype("Float64")
    group = np.where(ms.notna() & gib.isna(), 0, np.where(gib.notna(), 1, 2))
    value = np.where(group == 0, ms.fillna(0).to_numpy(float), np.where(group == 1, gib.fillna(0).to_numpy(float), 0.0))
    key = pd.DataFrame(
        {
            "minor": df["minor"].astype(bool).to_numpy(),
            "group": group,
            "neg": -value,
            "kind": df["kind"].astype(str).to_numpy(),
            "title": df["title"].astype(str).to_numpy(),
        }
    )
    order = key.sort_values(["minor", "group", "neg", "kind", "title"], kind="stable").index
    df = df.loc[order].reset_index(drop=True)
    df["rank"] = np.arange(1, len(df) + 1, dtype=np.int64)
    return df


def add_ranks(imb: Result, summary: dict, tables: dict, inputs: list, params: dict, warnings: list):
    """Adds the ranks part to a report's ``summary`` and ``tables`` (in place); returns (inputs, warnings) with
    every rank's file and the imbalance warnings (prefixed ``ranks:``)."""
    ref = imb.summary.get("reference_rank")
    summary["ranks"] = ranks_summary(imb)
    for name, src in RANK_TABLES.items():
        tables[name] = imb.tables[src]
    rf = rank_findings_of(imb)
    tables["findings"] = merge_findings(tables["findings"], rf.tables["findings"])
    summary["findings"] = int(len(tables["findings"]))
    summary["top_finding"] = str(tables["findings"]["title"].iloc[0]) if len(tables["findings"]) else None
    inputs = [{**inputs[0], "rank": ref}, *inputs[1:], *[dict(i) for i in imb.inputs if i.get("rank") != ref]]
    params["ranks"] = dict(imb.params)
    why = [r for r in rf.tables["sources"]["reason"].dropna().astype(str) if r]
    seen = set(warnings)
    new = [f"ranks: {w}" for w in list(imb.warnings) + why if f"ranks: {w}" not in seen]
    return inputs, list(warnings) + list(dict.fromkeys(new))
