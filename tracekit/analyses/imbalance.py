"""A14, beyond the study — rank imbalance: who makes the shared MoE wait.

With expert parallelism every rank enters each layer's MoE dispatch together, so the slowest attention
rank sets when the MoE can start and the others wait inside dispatch/combine. For every rank, step and
layer (the n-th dispatch of the step), this measures the attention time before the dispatch (from the
previous combine's end, or the step's start) and the time inside dispatch and combine; steps and layers
are aligned across ranks by index (each rank's clock is its own, so only durations are compared).
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from ..data import load_classes
from ..errors import MissingDataError
from ..events import name_mask
from ..result import Result
from .steps import get_steps


def rank_layers(trace, *, steps=None, step_name=None, min_step_ns=None) -> pd.DataFrame:
    """Per step and layer: attention_ns, dispatch_ns, combine_ns of one rank (vectorised per step)."""
    phases = load_classes().moe_phases
    ev = trace.events
    steps = get_steps(trace, steps, step_name=step_name, min_step_ns=min_step_ns).table
    disp = name_mask(ev, phases["dispatch"], kind="kernel")
    comb = name_mask(ev, phases["combine"], kind="kernel")
    if not disp.any():
        raise MissingDataError(f"{trace.path} has no MoE dispatch kernel (DeepEP); rank imbalance needs expert"
                               " parallelism")
    s, e = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    rows = []
    for st, ws, we in zip(steps["step"], steps["start_ns"], steps["end_ns"]):
        d_idx = np.flatnonzero(disp & (s >= ws) & (s < we))
        c_idx = np.flatnonzero(comb & (s >= ws) & (s < we))
        if d_idx.size == 0:
            continue
        # a layer's dispatch = the first dispatch after the previous combine (send/recv halves are one)
        c_end = e[c_idx]
        prev_c = np.searchsorted(c_end, s[d_idx], side="right") - 1
        first = np.concatenate([[True], prev_c[1:] != prev_c[:-1]])
        layer_of = np.cumsum(first) - 1
        n_layers = int(layer_of[-1]) + 1
        d_start = s[d_idx][first]
        before = np.where(prev_c[first] >= 0, c_end[np.clip(prev_c[first], 0, None)], ws)
        d_ns = np.bincount(layer_of, weights=(e - s)[d_idx], minlength=n_layers)
        # combines belong to the layer whose dispatch precedes them
        c_layer = np.searchsorted(d_start, s[c_idx], side="right") - 1
        ok = c_layer >= 0
        c_ns = np.bincount(c_layer[ok], weights=(e - s)[c_idx][ok], minlength=n_layers)
        rows.append(pd.DataFrame({"step": int(st), "layer": np.arange(n_layers), "attention_ns": d_start - before,
                                  "dispatch_ns": d_ns.astype(np.int64), "combine_ns": c_ns.astype(np.int64)}))
    if not rows:
        raise MissingDataError(f"{trace.path} has no MoE dispatch inside any step")
    return pd.concat(rows, ignore_index=True)


def _check_one_deployment(root, refs, traces) -> None:
    """The files must be different ranks of one run: one operating point, and distinct ranks (sglang's rank tags
    in the names, or distributedInfo's rank) of one world size; otherwise say what they are instead."""
    points = sorted({r.point for r in refs if r.bs is not None or r.context is not None})
    if len({(r.bs, r.context) for r in refs}) > 1 and len(points) > 1:
        raise MissingDataError(f"{root} holds the traces of {len(points)} operating points ({', '.join(points[:4])}"
                               f"{', …' if len(points) > 4 else ''}), not the ranks of one run; point imbalance at one"
                               " point's directory (tracekit analyze compares points)")
    tags = [tuple(sorted(r.ranks.items())) for r in refs]
    meta = [(t.meta.get("rank"), t.meta.get("world_size")) for t in traces]
    if all(tags) and len(set(tags)) == len(tags):
        return
    if all(m[0] is not None for m in meta) and len({m[0] for m in meta}) == len(meta) and len({m[1] for m in meta}) == 1:
        return
    raise MissingDataError(f"{root}: its {len(refs)} traces are not distinct ranks of one run (no sglang rank tags such"
                           " as TP-3 in the file names, and distributedInfo gives ranks"
                           f" {[m[0] for m in meta]} of world sizes {sorted({str(m[1]) for m in meta})});"
                           " rank imbalance needs one trace per rank of one deployment")


def check_one_deployment(root, refs, traces) -> None:
    """Refuse files that are not the ranks of one run (see :func:`_check_one_deployment`)."""
    if len(refs) < 2:
        raise MissingDataError(f"{root} holds {len(refs)} trace; rank imbalance needs the traces of several ranks"
                               " of one run")
    _check_one_deployment(root, refs, traces)


def imbalance_of(refs, traces, *, step_name: str | None = None, min_step_ns: int | None = None) -> Result:
    """Per layer the slowest attention rank and max ÷ mean across the ranks' traces (already loaded)."""
    per_rank = []
    for ref, trace in zip(refs, traces):
        t = rank_layers(trace, step_name=step_name, min_step_ns=min_step_ns)
        per_rank.append(t.assign(rank=ref.rank_label if ref.ranks else ref.path.name))
    df = pd.concat(per_rank, ignore_index=True)
    common = df.groupby(["step", "layer"])["rank"].transform("nunique") == len(refs)
    warnings = []
    if not common.all():
        warnings.append(f"{int((~common).sum())} (rank, step, layer) rows have no counterpart on every rank and are"
                        " left out of the comparison (ranks ran different numbers of steps or layers)")
    d = df[common]
    g = d.groupby(["step", "layer"])
    idx = g["attention_ns"].idxmax()
    per_layer = pd.DataFrame({
        "max_attention_ns": g["attention_ns"].max(), "mean_attention_ns": g["attention_ns"].mean(),
        "slowest_rank": d.loc[idx.to_numpy(), "rank"].to_numpy(),
        "max_wait_ns": g.apply(lambda x: int((x["dispatch_ns"] + x["combine_ns"]).max()), include_groups=False),
    }).reset_index()
    per_layer["imbalance"] = per_layer["max_attention_ns"] / per_layer["mean_attention_ns"]
    per_rank_tbl = (d.groupby("rank").agg(layers=("layer", "size"), mean_attention_ns=("attention_ns", "mean"),
                                          mean_dispatch_ns=("dispatch_ns", "mean"),
                                          mean_combine_ns=("combine_ns", "mean")).reset_index())
    slow = per_layer["slowest_rank"].value_counts()
    per_rank_tbl["slowest_layers"] = per_rank_tbl["rank"].map(slow).fillna(0).astype(int)
    summary = {"ranks": len(refs), "steps": int(d["step"].nunique()), "layers_per_step": int(d["layer"].max() + 1),
               "median_imbalance": float(per_layer["imbalance"].median()),
               "max_imbalance": float(per_layer["imbalance"].max()),
               "most_often_slowest": str(slow.index[0]) if len(slow) else None}
    return Result(command="imbalance", inputs=[{"path": str(r.path), "rank": r.rank_label} for r in refs],
                  params={"step_name": step_name, "min_step_ns": min_step_ns}, summary=summary,
                  tables={"per_layer": per_layer, "per_rank": per_rank_tbl, "layers": df}, warnings=warnings)
