"""What `findings --compare` matches across vendors: the work a kernel did, not its name (docs/findings.md,
"Across vendors").

Two traces of one model on an NVIDIA and an AMD GPU share almost no kernel name (a cutlass GEMM against a Tensile
one), so matching by name compares a few PyTorch elementwise kernels and never a GEMM. Here each
kernel gets a key for what it computed:

* the op that launched it and that op's recorded input shapes (``aten::mm [128,896]×[896,4864]``), where the trace
  links the kernel to an op (:func:`..hardware.shapes.kernel_shapes`): an op call is one call however many kernels
  each vendor splits it into, and its time is the sum of its kernels;
* else its category and its position in the layer (``gemm · layer position 2``): the n-th kernel of that category
  in the step, modulo the category's kernels per layer, the layers counted as the attention kernels per step.

:func:`device_label` names a side by its GPU (``H100``, ``MI300X``) and :func:`vendor` says whose it is.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from ...gpu_specs import device_names
from ...trace import Trace
from ..categories import categorize
from ..hardware.shapes import kernel_shapes

LAUNCH = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_mem"]
_MODEL = re.compile(r"\b((?:MI|[ABHLV])\d{2,4}[A-Z]?|GB\d{3})\b")


def vendor(trace: Trace) -> str | None:
    """``amd`` or ``nvidia`` by the device's name (None when the trace names none)."""
    names = " ".join(device_names(trace.meta))
    if re.search(r"\bAMD\b|Instinct|Radeon|\bMI\d{3}", names):
        return "amd"
    if re.search(r"NVIDIA|GeForce|Tesla|\b[ABH]\d{2,3}\b", names):
        return "nvidia"
    return None


def device_label(trace: Trace) -> str | None:
    """The GPU model a trace ran on, short: ``H100`` of "NVIDIA H100 80GB HBM3", ``MI300X`` of "AMD Instinct MI300X
    VF"; None when the trace names no device."""
    for name in device_names(trace.meta):
        m = _MODEL.search(name)
        if m:
            return m.group(1)
        if name.strip():
            return name.strip()
    return None


def _dims_text(shapes: object) -> str | None:
    """``[128,896]×[896,4864]`` of an op's recorded ``Input Dims`` (the tensors only); None without any."""
    if not isinstance(shapes, str):
        return None
    try:  # the events table's ``shapes``: [Input Dims, Input type, Concrete Inputs] (docs/events-schema.md)
        doc = json.loads(shapes)
    except ValueError:
        return None
    dims = doc.get("Input Dims") if isinstance(doc, dict) else doc[0] if isinstance(doc, list) and doc else None
    if not isinstance(dims, list):
        return None
    tensors = ["[" + ",".join(str(x) for x in d) + "]" for d in dims if isinstance(d, list) and d]
    return "×".join(tensors) if tensors else None


def work_keys(trace: Trace, kernels: pd.DataFrame, step: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per kernel row of ``kernels`` (rows of ``trace.events``, all inside steps ``step``): (its key, its call id,
    whether it carries its call's launch configuration). Call id: the op call (its op row) where the op is known,
    else the kernel's own row, as a negative number."""
    ks = kernel_shapes(trace).table
    pos = pd.Series(np.arange(len(ks)), index=ks["row"].to_numpy())
    at = pos.reindex(kernels.index).to_numpy()
    known_row = ~np.isnan(at)
    at_i = np.where(known_row, np.nan_to_num(at, nan=0), 0).astype(np.int64)
    op = np.where(known_row, ks["op"].to_numpy(dtype=object)[at_i], None)
    op_row = np.where(known_row, ks["op_row"].to_numpy()[at_i], -1).astype(np.int64)
    carries = np.where(known_row, ks["carries"].to_numpy(dtype=bool)[at_i], False)
    has_op = pd.notna(op) & (op_row >= 0)
    shapes = trace.events["shapes"]
    dims = np.full(len(kernels), None, dtype=object)
    if has_op.any():
        codes = shapes.cat.codes.to_numpy()[op_row[has_op]]
        cats = shapes.cat.categories
        uniq, inv = np.unique(codes, return_inverse=True)
        texts = np.array([_dims_text(cats[c]) if c >= 0 else None for c in uniq], dtype=object)
        dims[has_op] = texts[inv]
    key = np.full(len(kernels), None, dtype=object)
    if has_op.any():  # one string per distinct (op, shapes), not per kernel
        pairs = pd.DataFrame({"op": op[has_op].astype(str), "dims": dims[has_op]})
        codes, uniq = pd.factorize(pd.MultiIndex.from_frame(pairs.fillna({"dims": ""})))
        names = np.array([f"{o} {d}" if d else o for o, d in uniq], dtype=object)
        key[has_op] = names[codes]
    call = np.where(has_op, op_row, -1 - kernels.index.to_numpy(dtype=np.int64))
    rest = ~has_op
    if rest.any():
        key[rest] = _positions(kernels[rest], step[rest])
        carries = carries | rest
    return key, call, carries


def _positions(k: pd.DataFrame, step: np.ndarray) -> np.ndarray:
    """``category · layer position i`` of kernels with no op: the i-th kernel of its category in its step, modulo
    the category's kernels per layer (layers: the attention kernels per step; the whole step when there are none)."""
    cat = np.asarray(categorize(k), dtype=object).astype(str)
    d = pd.DataFrame({"step": step, "cat": cat, "start": k["start_ns"].to_numpy()}).sort_values("start", kind="stable")
    d["nth"] = d.groupby(["step", "cat"]).cumcount()
    per_step = d.groupby(["step", "cat"]).size().groupby("cat").median()
    attention = per_step[[c for c in per_step.index if c.startswith("attention")]]
    layers = int(attention.max()) if len(attention) else 0  # no attention kernel (max NaN): the whole step
    per_layer = {
        c: (int(n) // layers if layers and int(n) % layers == 0 and n >= layers else 0) for c, n in per_step.items()
    }
    period = d["cat"].map(per_layer).to_numpy(dtype=np.int64)
    nth = d["nth"].to_numpy(dtype=np.int64)
    where = np.where(period > 0, nth % np.maximum(period, 1), nth)
    label = np.where(period > 0, " · layer position ", " · position ")
    pos = d["cat"].to_numpy(dtype=object) + label.astype(object) + where.astype(str).astype(object)
    return pd.Series(pos, index=d.index).reindex(range(len(k))).to_numpy(dtype=object)


def work_table(trace: Trace, steps) -> pd.DataFrame:
    """Per key of :func:`work_keys` (the index, ``op``): op calls and time per step, mean per call (the sum of its
    kernels), and the most common kernel, category and launch configuration of the kernels that carry its calls."""
    ev = trace.events
    k = ev[ev["kind"] == "kernel"]
    step = steps.step_of(k["start_ns"].to_numpy())
    k, step = k[step >= 0], step[step >= 0]
    n_steps = max(1, len(steps.table))
    key, call, carries = work_keys(trace, k, step)
    k = k.assign(
        op=key,
        call=call,
        carries=carries,
        kernel=k["name"].astype(str).to_numpy(),
        category=np.asarray(categorize(k), dtype=object),
    )
    g = k.groupby("op", sort=False)
    calls = g["call"].nunique()
    total = g["dur_ns"].sum()
    out = pd.DataFrame({"calls": calls / n_steps, "mean_ns": total / calls, "per_step_ns": total / n_steps})
    return out.join(most_common_kernel(k[k["carries"]]))


def most_common_kernel(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per op (the index: the ``op`` column of ``kernels``, which also have ``kernel``, ``category`` and the
    :data:`LAUNCH` columns), its most common kernel: name, category and launch configuration counted together, the
    first in table order on a tie. The kernel an op's row of `findings --compare` shows and whose launch
    configuration it compares, for ops matched by name (``op_compare.op_table``) and by work (:func:`work_table`)."""
    return (
        kernels.groupby(["op", "kernel", "category", *LAUNCH], sort=False, dropna=False)
        .size()
        .rename("n")
        .reset_index()
        .sort_values(["op", "n"], ascending=[True, False], kind="stable")
        .drop_duplicates("op")
        .set_index("op")
        .drop(columns="n")
    )


def category_table(ta: pd.DataFrame, tb: pd.DataFrame) -> pd.DataFrame:
    """Per category, the time per step of both sides (the ``per_step_ns`` of every op of that category, from
    :func:`work_table` or the name table), the difference a − b and the ratio a / b (None where b has none)."""
    cols = ["category", "ops_a", "ops_b", "per_step_ns_a", "per_step_ns_b", "diff_ns", "ratio"]
    if not len(ta) and not len(tb):
        return pd.DataFrame(columns=cols)
    sa = ta.groupby(ta["category"].astype(str))["per_step_ns"].agg(["sum", "size"])
    sb = tb.groupby(tb["category"].astype(str))["per_step_ns"].agg(["sum", "size"])
    both = sa.add_suffix("_a").join(sb.add_suffix("_b"), how="outer").fillna(0)
    out = pd.DataFrame(
        {
            "category": both.index.astype(str),
            "ops_a": both["size_a"].astype(int).to_numpy(),
            "ops_b": both["size_b"].astype(int).to_numpy(),
            "per_step_ns_a": both["sum_a"].to_numpy(dtype=float),
            "per_step_ns_b": both["sum_b"].to_numpy(dtype=float),
        }
    )
    out["diff_ns"] = out["per_step_ns_a"] - out["per_step_ns_b"]
    ratio = out["per_step_ns_a"] / out["per_step_ns_b"].where(out["per_step_ns_b"] > 0)
    out["ratio"] = ratio.astype(object).where(ratio.notna(), None)
    order = (out["per_step_ns_a"] + out["per_step_ns_b"]).sort_values(ascending=False, kind="stable").index
    return out.loc[order, cols].reset_index(drop=True)


__all__ = ["LAUNCH", "category_table", "device_label", "most_common_kernel", "vendor", "work_keys", "work_table"]
