"""Shapes from the trace: each GPU kernel's launching op, its recorded ``Input Dims`` / ``Input type``, and the FLOPs
and compulsory HBM bytes the op's model (``tracekit/data/op_models.json``) gives (docs/roofline.md, "Shapes from the
trace").

Link: kernel --correlation--> runtime launch --> the innermost ``cpu_op`` on the launch's thread whose interval
holds the launch's start (:func:`.linking.launching_ops`).

The ops' recorded inputs come from the events table alone: ingest keeps each cpu_op's ``Input Dims``, ``Input type``
and ``Concrete Inputs`` as one categorical column, ``shapes`` (their JSON text, one category per distinct signature;
docs/events-schema.md), so a trace read from the cache has its shapes too and nothing here reads the file.

The models are evaluated once per distinct (op name, ``shapes``) pair of categorical codes, not per kernel. An op that
launches several kernels gives its work to the longest of them (the others count as launched by a shaped op but carry
no numbers): a GEMM's split-K reduction or a bias add does not get the GEMM's FLOPs a second time.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ...errors import DataFileError
from ...data import record_hint
from ...trace import Trace
from .linking import _innermost, launching_ops  # noqa: F401 - launching_ops is this module's too

_DEC = msgspec.json.Decoder()

KERNEL_COLUMNS = [
    "row",
    "op_row",
    "op",
    "model",
    "family",
    "flops",
    "bytes",
    "dtype",
    "carries",
    "m",
    "n",
    "k",
    "graph",
    "attributed_by",
    "module",
]


@lru_cache(maxsize=1)
def op_models() -> dict[str, Any]:
    """``tracekit/data/op_models.json``, checked; patterns compiled."""
    src = "tracekit/data/op_models.json"
    try:
        doc = json.loads(resources.files("tracekit.data").joinpath("op_models.json").read_text(encoding="utf-8"))
        dtypes = {k: (str(v[0]), float(v[1])) for k, v in doc["dtypes"].items() if not k.startswith("_")}
        ops = {k: dict(v) for k, v in doc["ops"].items() if "::" in k}  # "_doc" is a comment; "_C::…" an op
        pats = [(re.compile(p["pattern"]), dict(p)) for p in doc["patterns"] if "pattern" in p]
        for spec in list(ops.values()) + [p for _, p in pats]:
            if spec["model"] not in MODELS:
                raise ValueError(f"unknown model {spec['model']!r}")
    except (KeyError, TypeError, ValueError, IndexError, re.error) as exc:
        raise DataFileError(f"{src} is invalid ({exc}); see docs/roofline.md") from exc
    return {"dtypes": dtypes, "ops": ops, "patterns": pats}


def model_of(op: str) -> dict[str, Any] | None:
    m = op_models()
    spec = m["ops"].get(op)
    if spec is not None:
        return spec
    for rx, p in m["patterns"]:
        if rx.fullmatch(op):
            return p
    return None


# ------------------------------------------------------------------------------------------------ reading the args


def _codes(ev: pd.DataFrame, col: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes at ``rows``, -1 where missing; the categories as an object array) of a categorical column."""
    c = ev[col]
    if not isinstance(c.dtype, pd.CategoricalDtype):  # a hand-built table: make it categorical once
        c = c.astype("category")
    return c.cat.codes.to_numpy()[rows], c.cat.categories.to_numpy(dtype=object)


def names_at(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The names of some event rows as an object array of str (None where the name is missing), gathered through
    the categorical codes: no string is converted or copied per row."""
    codes, cats = _codes(ev, "name", np.asarray(rows, dtype=np.int64))
    table = np.empty(cats.size + 1, dtype=object)
    table[:-1] = cats
    table[-1] = None  # code -1
    return table[codes]


def str_values(codes: np.ndarray, cats: np.ndarray) -> Any:
    """``pd.Series(cats at codes, None at -1)``'s values, through Arrow (pandas 3 converts object arrays per string)."""
    codes, dtype = np.asarray(codes, dtype=np.int64), _STR
    if dtype is None or not (codes >= 0).any() or not all(type(c) is str for c in cats.tolist()):
        return np.append(cats.astype(object), None)[codes]
    import pyarrow as pa

    d = pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int32), mask=codes < 0), pa.array(cats.tolist(), type=pa.large_string())
    )
    return pd.array(d.cast(pa.large_string()), dtype=dtype)


_STR = pd.Series(np.array(["x"], dtype=object)).dtype  # what pandas infers for str: Arrow-backed (pandas 3), or not
_STR = _STR if isinstance(_STR, pd.StringDtype) and _STR.storage == "pyarrow" else None


def _op_inputs(text: str) -> tuple | None:
    """(Input Dims, Input type, Concrete Inputs) from the ``shapes`` column's JSON text; None unless dims and types
    are lists."""
    try:
        got = _DEC.decode(text)
    except msgspec.DecodeError:
        return None
    if not isinstance(got, list) or len(got) != 3:
        return None
    dims, types, concrete = got
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    return dims, types, concrete if isinstance(concrete, list) else []


# ------------------------------------------------------------------------------------------------ models


def _numel(d) -> float | None:
    if not isinstance(d, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in d):
        return None
    return float(math.prod(d)) if d else 1.0


def _tensor(dims: list, types: list, i: int | None):
    """(shape, dtype name, bytes per element) of arg ``i`` when it is a tensor of a known dtype, else None."""
    if i is None or i >= len(dims) or i >= len(types):
        return None
    d, t = dims[i], types[i]
    dt = op_models()["dtypes"].get(t) if isinstance(t, str) else None
    if dt is None or _numel(d) is None:
        return None
    return list(d), dt[0], dt[1]


def _broadcast(shapes: list[list]) -> list:
    n = max((len(s) for s in shapes), default=0)
    out = []
    for j in range(n):
        vals = [s[len(s) - n + j] for s in shapes if len(s) - n + j >= 0]
        out.append(max(vals) if vals else 1)
    return out


def _is_true(concrete: list, i: int | None, *, nonzero: bool = False) -> bool:
    if i is None or i >= len(concrete):
        return False
    v = str(concrete[i]).strip()
    if nonzero:
        try:
            return float(v) != 0
        except ValueError:
            return False
    return v == "True"


def evaluate(op: str, dims: list, types: list, concrete: list) -> dict[str, Any] | None:
    """FLOPs, bytes, dtype, model and family of one op call from its recorded inputs; None when the op has no model
    or its inputs do not fit it."""
    spec = model_of(op)
    return None if spec is None else _evaluate_spec(spec, dims, types, concrete)


def _evaluate_spec(spec: dict, dims: list, types: list, concrete: list) -> dict[str, Any] | None:
    """:func:`evaluate` with the op's model found: the answer depends on the model and the inputs alone."""
    fn = MODELS[spec["model"]]
    try:
        got = fn(spec, dims, types, concrete)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if got is None:
        return None
    got["model"] = spec["model"]
    got["family"] = got.get("family") or spec.get("family") or FAMILY[spec["model"]]
    return got


def _out_dtype(spec, a):
    t = spec.get("out_dtype")
    dt = op_models()["dtypes"].get(t) if t else None
    return dt[1] if dt else a[2]


def _gemm(spec, dims, types, concrete):
    a, b = _tensor(dims, types, spec["a"]), _tensor(dims, types, spec["b"])
    if a is None or b is None or not a[0] or not b[0]:
        return None
    sa, sb = a[0], b[0]
    m, k = (1, sa[0]) if len(sa) == 1 else (sa[-2], sa[-1])
    kb, n = (sb[0], 1) if len(sb) == 1 else (sb[-2], sb[-1])
    if kb != k:
        return None
    batch = float(math.prod(_broadcast([sa[:-2], sb[:-2]]))) if (len(sa) > 2 or len(sb) > 2) else 1.0
    flops = 2.0 * batch * m * n * k
    nbytes = _numel(sa) * a[2] + _numel(sb) * b[2] + batch * m * n * _out_dtype(spec, a)
    bias = _tensor(dims, types, spec.get("bias"))
    if bias is not None:
        nbytes += _numel(bias[0]) * bias[2]
    return {"flops": flops, "bytes": nbytes, "dtype": a[1], "m": batch * m, "n": n, "k": k}


def _linear(spec, dims, types, concrete):
    a, w = _tensor(dims, types, spec["a"]), _tensor(dims, types, spec["w"])
    if a is None or w is None or not a[0] or len(w[0]) != 2 or a[0][-1] != w[0][1]:
        return None
    k, n = w[0][1], w[0][0]
    m = _numel(a[0][:-1])
    flops = 2.0 * m * n * k
    nbytes = m * k * a[2] + n * k * w[2] + m * n * a[2]
    bias = _tensor(dims, types, spec.get("bias"))
    if bias is not None:
        nbytes += _numel(bias[0]) * bias[2]
    return {"flops": flops, "bytes": nbytes, "dtype": a[1], "m": m, "n": n, "k": k}


def _grouped(spec, dims, types, concrete):
    a, b = _tensor(dims, types, spec["a"]), _tensor(dims, types, spec["b"])
    if a is None or b is None or len(a[0]) != 2 or len(b[0]) != 3:
        return None
    rows, k = a[0]
    g, kb, n = b[0]
    if kb != k:
        return None
    flops = 2.0 * rows * n * k
    nbytes = rows * k * a[2] + g * k * n * b[2] + rows * n * _out_dtype(spec, a)
    return {"flops": flops, "bytes": nbytes, "dtype": a[1], "m": rows, "n": n, "k": k}


def _attention(spec, dims, types, concrete):
    q, k, v = (_tensor(dims, types, spec[x]) for x in ("q", "k", "v"))
    if q is None or k is None or v is None or not (len(q[0]) == len(k[0]) == len(v[0]) == 4):
        return None
    if spec.get("layout") == "bshd":
        b, sq, hq, d = q[0]
        _, sk, _, _ = k[0]
        dv = v[0][3]
    else:
        b, hq, sq, d = q[0]
        sk = k[0][2]
        dv = v[0][3]
    causal = _is_true(concrete, spec.get("causal_arg")) or _is_true(concrete, spec.get("mask_arg"), nonzero=True)
    # causal, aligned bottom-right: query i sees sk - sq + i + 1 keys
    pairs = float(sq) * sk if not causal else float(sq) * max(sk - sq, 0) + sq * (sq + 1) / 2.0
    flops = 2.0 * b * hq * pairs * (d + dv)
    nbytes = _numel(q[0]) * q[2] + _numel(k[0]) * k[2] + _numel(v[0]) * v[2] + float(b) * hq * sq * dv * q[2]
    return {"flops": flops, "bytes": nbytes, "dtype": q[1], "m": None, "n": None, "k": None}


def _tensors(dims, types):
    return [t for t in (_tensor(dims, types, i) for i in range(min(len(dims), len(types)))) if t is not None]


def _elementwise(spec, dims, types, concrete):
    ts = _tensors(dims, types)
    if not ts:
        return None
    shape = _broadcast([t[0] for t in ts])
    nbytes = sum(_numel(t[0]) * t[2] for t in ts) + _numel(shape) * ts[0][2]
    return {"flops": None, "bytes": nbytes, "dtype": ts[0][1], "m": None, "n": None, "k": None}


def _copy(spec, dims, types, concrete):
    dst, src = _tensor(dims, types, 0), _tensor(dims, types, 1)
    if dst is None or src is None:
        return None
    return {
        "flops": None,
        "bytes": _numel(dst[0]) * dst[2] + _numel(src[0]) * src[2],
        "dtype": dst[1],
        "m": None,
        "n": None,
        "k": None,
    }


def _fill(spec, dims, types, concrete):
    dst = _tensor(dims, types, 0)
    return (
        None
        if dst is None
        else {"flops": None, "bytes": _numel(dst[0]) * dst[2], "dtype": dst[1], "m": None, "n": None, "k": None}
    )


def _reduce(spec, dims, types, concrete):
    ts = _tensors(dims, types)
    if not ts:
        return None
    nbytes = sum(_numel(t[0]) * t[2] for t in ts)
    if spec.get("out") == "same":
        nbytes += _numel(ts[0][0]) * ts[0][2]
    return {"flops": None, "bytes": nbytes, "dtype": ts[0][1], "m": None, "n": None, "k": None}


def _gather(spec, dims, types, concrete):
    """Rows gathered from a table: the rows read once and written once, plus the indices."""
    src, idx = _tensor(dims, types, spec["src"]), _tensor(dims, types, spec["index"])
    if src is None or idx is None or not src[0]:
        return None
    if "dim_arg" in spec:  # index_select(self, dim, index): self with dim replaced by len(index)
        d = int(str(concrete[spec["dim_arg"]]).strip()) % len(src[0])
        rows_out = _numel(src[0]) / src[0][d] * _numel(idx[0]) if src[0][d] else 0.0
    else:  # embedding(weight [V, D], indices [...]): indices.shape + weight.shape[1:]
        rows_out = _numel(idx[0]) * _numel(src[0][1:])
    nbytes = 2.0 * rows_out * src[2] + _numel(idx[0]) * idx[2]
    return {"flops": None, "bytes": nbytes, "dtype": src[1], "m": None, "n": None, "k": None}


def _io(spec, dims, types, concrete):
    """A custom op with declared traffic: the ``read`` args read once, each ``writes`` pair [dtype arg, shape arg]
    written once (the cache of reshape_and_cache is written at the key's rows, not in full)."""
    nbytes, first = 0.0, None
    for i in spec.get("read", []):
        t = _tensor(dims, types, i)
        if t is None:
            return None
        first = first or t
        nbytes += _numel(t[0]) * t[2]
    for dt_arg, shape_arg in spec.get("writes", []):
        d, sh = _tensor(dims, types, dt_arg), _tensor(dims, types, shape_arg)
        if d is None or sh is None:
            return None
        nbytes += _numel(sh[0]) * d[2]
    if first is None:
        return None
    return {
        "flops": None,
        "bytes": nbytes,
        "dtype": first[1],
        "m": None,
        "n": None,
        "k": None,
        "family": spec.get("family", "elementwise"),
    }


def _pointwise_kernel(spec, dims, types, concrete):
    """An Inductor pointwise Triton kernel recorded as an op (``triton_poi_fused_…``): its args are its buffers (inputs
    and outputs alike) and its last scalar is ``xnumel``, the elements it computes. Each buffer is touched at no more
    than ``xnumel`` elements, once: bytes = Σ min(numel, xnumel) · element size — exact for a cast, copy or pad, at
    most for a gather. Without ``xnumel`` the bytes are unknown (None)."""
    xnumel = None
    for i in range(min(len(types), len(concrete)) - 1, -1, -1):
        if types[i] == "Scalar":
            try:
                xnumel = float(int(str(concrete[i]).strip()))
            except ValueError:
                return None
            break
    ts = _tensors(dims, types)
    if xnumel is None or xnumel <= 0 or not ts:
        return None
    nbytes = sum(min(_numel(t[0]), xnumel) * t[2] for t in ts)
    return {"flops": None, "bytes": nbytes, "dtype": ts[0][1], "m": None, "n": None, "k": None}


def _opaque(spec, dims, types, concrete):
    """A custom op whose recorded inputs do not determine its work (``why`` in op_models.json says what is missing:
    the expert weights of a MoE layer, the context lengths and KV cache of paged attention): its shape is kept (the
    rows of arg ``a``, its dtype), its FLOPs and bytes are unknown (None), never 0."""
    a = _tensor(dims, types, spec.get("a", 0))
    if a is None or not a[0]:
        return None
    return {"flops": None, "bytes": None, "dtype": a[1], "m": float(a[0][0]), "n": None, "k": float(a[0][-1])}


MODELS = {
    "gemm": _gemm,
    "linear": _linear,
    "grouped_gemm": _grouped,
    "attention": _attention,
    "elementwise": _elementwise,
    "copy": _copy,
    "fill": _fill,
    "reduce": _reduce,
    "gather": _gather,
    "io": _io,
    "pointwise_kernel": _pointwise_kernel,
    "opaque": _opaque,
}
FAMILY = {
    "gemm": "gemm",
    "linear": "gemm",
    "grouped_gemm": "gemm",
    "attention": "attention",
    "elementwise": "elementwise",
    "copy": "copy",
    "fill": "copy",
    "reduce": "reduction",
    "gather": "copy",
    "io": "elementwise",
    "pointwise_kernel": "elementwise",
    "opaque": "other",
}


# ------------------------------------------------------------------------------------------------ per kernel


@dataclass
class KernelShapes:
    """Per kernel of the trace (``table``, one row per kernel event, ``row`` its events row): the launching op and,
    where it has a model, FLOPs and bytes. ``carries`` is true for the kernel that carries its op call's work."""

    table: pd.DataFrame
    kernels: int
    kernel_ns: int
    shaped: int
    shaped_ns: int
    with_op: int
    graph_kernels: int
    graph_ns: int
    why: str | None = None
    warnings: list[str] = field(default_factory=list)
    replay_hint: str | None = None  # why replayed kernels have no op: one sentence (None: all attributed, or none)

    @property
    def shaped_pct(self) -> float:
        return 100.0 * self.shaped_ns / self.kernel_ns if self.kernel_ns else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "kernels": self.kernels,
            "shaped_kernels": self.shaped,
            "shaped_pct": self.shaped_pct,
            "kernels_with_op": self.with_op,
            "graph_kernels": self.graph_kernels,
            "graph_pct": 100.0 * self.graph_ns / self.kernel_ns if self.kernel_ns else 0.0,
            "shapes_why": self.why,
        }


def unknown_work(trace: Trace) -> pd.DataFrame:
    """The ops whose model says their FLOPs and bytes cannot be known from their recorded inputs (model ``opaque``:
    vLLM's fused MoE, paged attention): one row per op, ``op, kernels, total_ns, share_pct`` (of the GPU kernel
    time), ``why`` (op_models.json's words), largest first. Empty where there are none."""
    ks = kernel_shapes(trace)
    t = ks.table
    sel = (t["model"] == "opaque").to_numpy(dtype=bool)
    cols = ["op", "kernels", "total_ns", "share_pct", "why"]
    if not sel.any():
        return pd.DataFrame(columns=cols)
    dur = trace.events["dur_ns"].to_numpy()[t["row"].to_numpy()[sel]]
    d = pd.DataFrame({"op": t["op"].to_numpy(dtype=object)[sel], "dur": dur})
    g = d.groupby("op", sort=False)["dur"].agg(["size", "sum"]).reset_index()
    g.columns = ["op", "kernels", "total_ns"]
    g["share_pct"] = 100.0 * g["total_ns"] / ks.kernel_ns if ks.kernel_ns else 0.0
    g["why"] = [str((model_of(o) or {}).get("why", "")) or None for o in g["op"]]
    return g.sort_values(["total_ns", "op"], ascending=[False, True], kind="stable").reset_index(drop=True)[cols]


def unknown_work_sentence(trace: Trace, top: int = 2) -> str | None:
    """One sentence naming the largest ops whose FLOPs and bytes are unknown, and why (None: there are none)."""
    u = unknown_work(trace)
    if u.empty:
        return None
    parts = [f"{r.op} ({r.share_pct:.1f} % of kernel time: {r.why})" for r in u.head(top).itertuples()]
    more = f" and {len(u) - top} more op(s)" if len(u) > top else ""
    return "FLOPs and bytes are unknown for " + "; ".join(parts) + more


def kernel_shapes(trace: Trace) -> KernelShapes:
    """:class:`KernelShapes` of ``trace``, computed once (kept in ``trace.derived``)."""
    got = trace.derived.get("kernel_shapes")
    if got is None or len(got.table) != int((trace.events["kind"] == "kernel").sum()):
        got = trace.derived["kernel_shapes"] = _kernel_shapes(trace)
    return got


def _evaluate_pairs(upair: np.ndarray, name_cats: np.ndarray, shape_cats: np.ndarray) -> list[dict | None]:
    """:func:`evaluate` of each distinct (op name code, shapes code) pair: each name's model looked up once, each
    signature decoded once, and one evaluation per (model, signature) — ops that share a model share its answer
    (the answer is the model's and the inputs', not the name's; the dicts are shared, never changed)."""
    k = shape_cats.size + 1
    specs: dict[int, Any] = {}
    inputs: dict[int, Any] = {}
    done: dict[tuple[int, int], dict | None] = {}
    out: list[dict | None] = []
    for p in upair.tolist():
        nc, sc = p // k, p % k
        spec = specs.get(nc, specs)
        if spec is specs:
            spec = specs[nc] = model_of(str(name_cats[nc]))
        if spec is None:
            out.append(None)
            continue
        got = inputs.get(sc, inputs)
        if got is inputs:
            got = inputs[sc] = _op_inputs(shape_cats[sc])
        key = (id(spec), sc)
        if key not in done:
            done[key] = _evaluate_spec(spec, *got) if got is not None else None
        out.append(done[key])
    return out


def _carriers(oprow: np.ndarray, dur: np.ndarray, has: np.ndarray | None = None) -> np.ndarray:
    """Per kernel, whether it carries its op call's work (``oprow``: a key per op call where ``has``): the longest
    kernel of the call, the first on ties (a maximum and a minimum per call, by ``ufunc.at`` over the calls' codes:
    no sort of the kernels)."""
    i = np.flatnonzero(oprow >= 0 if has is None else has)
    d = dur[i]
    call, calls = pd.factorize(oprow[i])
    longest = np.empty(calls.size, dtype=d.dtype)
    longest[call] = d  # some kernel's duration per call, then the largest
    np.maximum.at(longest, call, d)
    top = np.flatnonzero(d == longest[call])
    first = np.full(calls.size, oprow.size, dtype=np.int64)
    np.minimum.at(first, call[top], i[top])
    out = np.zeros(oprow.size, dtype=bool)
    out[first] = True
    return out


def _modules(ko, n: int) -> np.ndarray:
    """Per kernel the nn.Module path of its attributed op (None elsewhere; the trace's own ops: not looked up)."""
    from .replay_attribution import replayed_modules

    out = np.full(n, None, dtype=object)
    out[ko.replay.pos] = replayed_modules(ko.replay)
    return out


def _why_not(r) -> str:
    """The most common reason the replayed kernels of ``r`` were not attributed, as a clause."""
    why = pd.Series(r.why[~r.attributed]).dropna()
    return (str(why.mode().iloc[0]) if len(why) else "unknown") + " (tracekit replay TRACE says more)"


def _attributed_codes(ev, oprow, ko) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per kernel its op's (name code, shapes code) over categories that join the trace's with each capture's, and
    a call key per op call (the trace's op row; for an attributed kernel, its graph launch and the capture's op)."""
    has = oprow >= 0
    name_code, name_cats = _codes(ev, "name", np.clip(oprow, 0, None))
    name_code = np.where(has, name_code, -1).astype(np.int64)
    shape_code = np.full(oprow.size, -1, dtype=np.int64)
    shape_cats = np.empty(0, dtype=object)
    if "shapes" in ev.columns and has.any():
        sc, shape_cats = _codes(ev, "shapes", oprow[has])
        shape_code[has] = sc
    call = oprow.astype(np.int64).copy()
    r = ko.replay
    ok = r.capture >= 0
    if not ok.any():
        return name_code, name_cats, shape_code, shape_cats, call
    names, shapes = [name_cats], [shape_cats]
    n_off, s_off = name_cats.size, shape_cats.size
    for ci, cap in enumerate(r.captures):
        m = ok & (r.capture == ci) & (r.op_row >= 0)
        if not m.any():
            continue
        cev = cap.trace.events
        at = r.pos[m]
        nc, ncats = _codes(cev, "name", r.op_row[m])
        name_code[at] = np.where(nc >= 0, nc + n_off, -1)
        names.append(ncats)
        n_off += ncats.size
        if "shapes" in cev.columns:
            sc, scats = _codes(cev, "shapes", r.op_row[m])
            shape_code[at] = np.where(sc >= 0, sc + s_off, -1)
            shapes.append(scats)
            s_off += scats.size
        # one call per (graph launch, captured op): a negative key, apart from the trace's own rows
        call[at] = -2 - (ko.launch[at].astype(np.int64) * (len(cev) + 1) + r.op_row[m]) * len(r.captures) - ci
    return name_code, np.concatenate(names), shape_code, np.concatenate(shapes), call


def _kernel_shapes(trace: Trace) -> KernelShapes:
    from .kernel_ops import kernel_ops

    ev = trace.events
    ko = kernel_ops(trace)
    krow = ko.krow
    dur = ev["dur_ns"].to_numpy()[krow]
    n = krow.size
    graph = np.zeros(n, dtype=bool)
    graph[ko.replay.pos] = True
    name_code, name_cats, shape_code, shape_cats, call = _attributed_codes(ev, ko.oprow, ko)
    has = name_code >= 0
    oprow = ko.oprow
    op = str_values(name_code, name_cats)
    by = np.full(n, None, dtype=object)
    by[oprow >= 0] = "launch"
    by[ko.replay.pos] = ko.replay.by
    module = _modules(ko, n)
    num = {c: np.full(n, np.nan) for c in ("flops", "bytes", "m", "n", "k")}  # filled in place, one table at the end
    obj = {c: np.full(n, None, dtype=object) for c in ("model", "family", "dtype")}
    carries = np.zeros(n, dtype=bool)
    warnings: list[str] = []
    why = None
    if not has.any():
        why = (
            "no kernel has a launching CPU op (the trace records no CPU ops, or no runtime launches)"
            if not graph.any()
            else None
        )
    elif "shapes" not in ev.columns:
        why = "the events table has no 'shapes' column (the ops' Input Dims); load the trace with tracekit.load"
    elif not (shape_code >= 0).any():
        why = f"the trace records no input shapes of its ops (profile with {record_hint(trace.meta, 'shapes')})"
    elif all(_op_inputs(str(t)) is None for t in shape_cats):  # an NVTX op range records sizes, never dtypes
        why = (
            "the ops' recorded inputs have no dtypes (NVTX op ranges record sizes only): their FLOPs and bytes"
            " are unknown"
        )
    else:
        carrier = _carriers(call, dur, has)
        # one model evaluation per distinct (op name, recorded inputs): categorical codes, no string per kernel
        with_shape = np.flatnonzero(has & (shape_code >= 0))
        pair = name_code[with_shape].astype(np.int64) * (shape_cats.size + 1) + shape_code[with_shape]
        inv, upair = pd.factorize(pair)  # hashed, not sorted: which pair is which is all that is used
        results = _evaluate_pairs(upair, name_cats, shape_cats)
        ok_pair = np.array([r is not None for r in results], dtype=bool)
        sig = np.full(n, -1, dtype=np.int64)
        sig[with_shape] = np.where(ok_pair[inv], inv, -1)
        got = sig >= 0
        if got.any():
            res = pd.DataFrame(
                [r if r is not None else {} for r in results],
                columns=["flops", "bytes", "dtype", "model", "family", "m", "n", "k"],
            )
            idx = sig[got]
            for c in ("m", "n", "k"):
                num[c][got] = pd.to_numeric(res[c], errors="coerce").to_numpy(dtype=float)[idx]
            for c in ("model", "family", "dtype"):
                obj[c][got] = res[c].to_numpy()[idx]
            # an op call carries numbers where its model gives its bytes (an opaque op's are unknown: not shaped)
            known = ~np.isnan(pd.to_numeric(res["bytes"], errors="coerce").to_numpy(dtype=float))[idx]
            car = carries[got] = carrier[got] & known
            for c in ("flops", "bytes"):
                num[c][got] = np.where(car, res[c].to_numpy(dtype=float, na_value=np.nan)[idx], np.nan)
    cols = {
        "row": krow,
        "op_row": oprow,
        "op": op,
        **num,
        "carries": carries,
        "graph": graph,
        **{c: pd.Series(v, dtype=object, copy=False) for c, v in obj.items()},
        "attributed_by": pd.Series(by, dtype=object, copy=False),
        "module": pd.Series(module, dtype=object, copy=False),
    }
    # built in its columns' order from the arrays made here (no copy, no reorder: a column selection took a copy)
    tbl = pd.DataFrame({c: cols[c] for c in KERNEL_COLUMNS}, copy=False)
    shaped = carries
    lost = graph.copy()
    lost[ko.replay.pos] = ~ko.replay.attributed
    hint = None
    if lost.any():
        hint = ko.replay.hint or _why_not(ko.replay)
        warnings.append(
            f"{int(lost.sum()):,} kernel(s) ({100.0 * dur[lost].sum() / max(1, dur.sum()):.1f} % of GPU"
            " kernel time) are replayed from CUDA graphs with no op attributed, so they have no shapes: " + hint
        )
    return KernelShapes(
        table=tbl,
        kernels=int(n),
        kernel_ns=int(dur.sum()),
        shaped=int(shaped.sum()),
        shaped_ns=int(dur[shaped].sum()),
        with_op=int(has.sum()),
        graph_kernels=int(graph.sum()),
        graph_ns=int(dur[graph].sum()),
        why=why,
        warnings=warnings,
        replay_hint=hint,
    )
