"""What findings are made of, shared by `tracekit findings` of one trace, of two deployments and of a launch log:
the rules file (``tracekit/data/findings.json``), a finding's words filled in, one row, and the ranking."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any

import pandas as pd

from ...errors import DataFileError, MissingDataError
from ...names import short_name
from ...result import shown_text
from ..hardware.roofline import launch_floor_ns  # noqa: F401 - re-exported: the floor of every target time
from ..memory.ledger_engine import global_record

FINDING_COLUMNS = [
    "rank",
    "kind",
    "title",
    "gain_ms_per_step",
    "gain_pct",
    "gain_gib",
    "gain_tokens",
    "basis",
    "evidence",
    "command",
    "suggestion",
    "how",
    "minor",
    "source",
]
SOURCE_COLUMNS = ["source", "ran", "findings", "reason"]


@lru_cache(maxsize=1)
def finding_rules() -> dict[str, Any]:
    """``tracekit/data/findings.json``, checked for the keys the sources read."""
    src = "tracekit/data/findings.json"
    try:
        doc = json.loads(resources.files("tracekit.data").joinpath("findings.json").read_text(encoding="utf-8"))
        for k in (
            "min_ms",
            "min_pct",
            "min_gib",
            "max_per_source",
            "idle",
            "waves",
            "roofline",
            "dominance",
            "library_kernels",
            "launch_floor_us",
            "fused_kernels",
            "kinds",
        ):
            doc[k]  # noqa: B018 - presence check
        for name, kind in doc["kinds"].items():
            for key in ("title", "basis", "how", "command", "suggestion"):
                kind[key]  # noqa: B018
        doc["_library"] = re.compile("|".join(f"(?:{p})" for p in doc["library_kernels"]["patterns"]))
        doc["launch_floor_us"]["default"]  # noqa: B018
        doc["_fused"] = re.compile("|".join(f"(?:{p})" for p in doc["fused_kernels"]["patterns"]))
        doc["_kernel_suggestions"] = [
            (re.compile(s["pattern"]), tuple(s["kinds"]), s["suggestion"]) for s in doc.get("kernel_suggestions", [])
        ]
    except (KeyError, TypeError, ValueError, re.error) as exc:
        raise DataFileError(f"{src} is invalid ({exc}); see docs/findings.md") from exc
    return doc


class _Fmt(dict):
    """str.format_map that leaves an unknown {placeholder} as it is (never a KeyError in a message)."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def ms_text(ns: float | None) -> str:
    """A duration for a finding's words, in the unit that reads best: 13.7 ms, 471 µs, 80 ns."""
    if ns is None:
        return "–"
    a = abs(ns)
    return f"{_sig3(ns / 1e6)} ms" if a >= 1e6 else f"{_sig3(ns / 1e3)} µs" if a >= 1e3 else f"{_sig3(ns)} ns"


def _sig3(v: float) -> str:
    """Three significant digits for a person, never e-notation: 13.7, 471, 10,889 (whole numbers from 1,000 on,
    with thousands separators)."""
    return f"{v:,.0f}" if abs(v) >= 999.5 else f"{v:.3g}"


def words(kind: str, **values) -> dict[str, str]:
    """Title, how, command and suggestion of a finding of ``kind`` (tracekit/data/findings.json), filled in. A
    ``variant`` value picks the kind's ``<key>_<variant>`` words where it has them (``suggestion_fused``: kernels a
    compiler or library already fused; ``suggestion_graph``: kernels replayed from a CUDA graph), else ``<key>``."""
    spec = finding_rules()["kinds"][kind]
    variant = values.pop("variant", None) or ""
    fmt = _Fmt(**values)
    return {
        k: str(spec.get(f"{k}_{variant}", spec[k]) if variant else spec[k]).format_map(fmt)
        for k in ("title", "how", "command", "suggestion")
    } | {"basis": spec["basis"]}


def is_fused(name: str, owner: str | None) -> bool:
    """Whether kernel ``name`` is already the product of a compiler or a fusion (``fused_kernels`` in
    tracekit/data/findings.json: Inductor's ``triton_poi_fused_*``, a library's fused add + norm …): "fuse them"
    is no advice for it."""
    fk = finding_rules()["fused_kernels"]
    return (owner or "") in fk["owners"] or bool(finding_rules()["_fused"].search(name))


def distinct_labels(names: list[str], width: int = 60) -> list[str]:
    """:func:`kernel_label` of each name, with its template arguments where two names of the list would read the
    same (``bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>`` and ``…<…, 32, …>``)."""
    labels = [kernel_label(n, width) for n in names]
    seen: dict[str, int] = {}
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
    out = []
    for n, lab in zip(names, labels):
        m = _TEMPLATE.search(n) if seen[lab] > 1 else None
        out.append(clip_text(m.group(1) + m.group(2), width) if m else lab)
    return out


_TEMPLATE = re.compile(r"(\w+)(<[^()]*>)")


def finding(
    ctx,
    kind: str,
    source: str,
    *,
    gain_ns: float | None = None,
    gain_gib: float | None = None,
    gain_tokens: int | None = None,
    whole_gib: float | None = None,
    evidence: str = "",
    step_ns: float | None = None,
    words: dict[str, str] | None = None,
    **values,
) -> dict[str, Any]:
    """One row of the findings table (rank and minor are set when the list is ranked). ``whole_gib``: the GPU's
    memory a memory finding's GiB is a share of (its severity, :func:`is_major`; not a column)."""
    step = step_ns if step_ns is not None else (ctx.step_ns if ctx is not None else None)
    gain_ms = None if gain_ns is None else gain_ns / 1e6
    gain_txt = (
        ("" if gain_ns is None else f"{ms_text(gain_ns)} per step") if gain_gib is None else f"{gain_gib:.2f} GiB"
    )
    if words is None:
        words = ctx.words(kind, gain=gain_txt, gain_gib=f"{gain_gib:.2f} GiB" if gain_gib is not None else "", **values)
    return {
        "kind": kind,
        **words,
        "gain_ms_per_step": gain_ms,
        "gain_pct": None if gain_ms is None or not step else 100.0 * gain_ns / step,
        "gain_gib": gain_gib,
        "gain_tokens": gain_tokens,
        "gib_pct": None if gain_gib is None or not whole_gib else 100.0 * gain_gib / whole_gib,
        "evidence": evidence,
        "source": source,
    }


def kernel_label(name: str, width: int = 60) -> str:
    """A kernel name a person recognises — the one shortening the terminal tables use too
    (:func:`tracekit.names.short_name`: ``elementwise_kernel<MulFunctor>``, an attention kernel with its head
    dimension, a CUTLASS tile; the rules are data in tracekit/data/kernel_names.json) — cut to ``width`` if still longer."""
    return clip_text(short_name(name), width)


def clip_text(text: str, width: int = 60) -> str:
    """``text`` as it is, or its first ``width`` − 1 characters and "…" where it is longer: any text of a finding's
    words (an op, a kernel label, a name). Not a kernel name's short form (:func:`kernel_label` is), nor the layer
    types' identifier stem (``structure.layers.type_names``), which drops a name's namespaces and templates."""
    return text if len(text) <= width else text[: width - 1] + "…"


def is_major(
    value: float, share_pct: float | None, *, floor: float, min_pct: float | None, floor_without_share: float = 0.0
) -> bool:
    """The severity rule of every findings source (trace, memory, ranks; docs/findings.md "Severity"): a finding is
    major when its gain is at least ``min_pct`` % of the whole it is part of — a time finding's of the median step
    wall, a memory finding's of the GPU's memory — and, as a second condition only, at least the absolute ``floor``
    (``min_ms`` ms per step, ``min_gib`` GiB). Where the share is unknown (no step, no GPU memory, or ``min_pct``
    None) the absolute floor alone decides, raised to ``floor_without_share`` (time: the rules file's
    ``min_ms_without_step``): a gain of unknown share must be large on its own to lead."""
    if value < floor:
        return False
    if share_pct is None or min_pct is None:
        return value >= max(floor, floor_without_share)
    return share_pct >= min_pct


def rank_findings(
    rows: list[dict], *, min_ms: float, min_gib: float, min_pct: float | None = None, min_gain_ms: float | None = None
) -> pd.DataFrame:
    """Time findings by gain, then memory findings by GiB, then those without a number; minor ones last.

    Severity is :func:`is_major`, the one rule of every source: a time finding against the step (``gain_pct``), a
    memory finding against the GPU's memory (``gib_pct``, where the source knows it). A time finding whose gain is below ``min_gain_ms``
    (default: the rules file's ``min_gain_ms``; rounds to nothing) is not a finding and is left out."""
    floor = float(finding_rules().get("min_gain_ms", 0.0)) if min_gain_ms is None else float(min_gain_ms)
    no_step = float(finding_rules().get("min_ms_without_step", 0.0))
    rows = [
        r
        for r in rows
        if r["gain_gib"] is not None
        or r["gain_ms_per_step"] is None
        or r["gain_ms_per_step"] >= floor
        and r["gain_ms_per_step"] > 0
    ]

    def minor(r):
        if r.get("force_minor") is not None:
            return r["force_minor"]
        if r["gain_gib"] is not None:
            return not is_major(r["gain_gib"], r.get("gib_pct"), floor=min_gib, min_pct=min_pct)
        if r["gain_ms_per_step"] is None:
            return False
        return not is_major(
            r["gain_ms_per_step"], r.get("gain_pct"), floor=min_ms, min_pct=min_pct, floor_without_share=no_step
        )

    def key(r):
        group = (
            0 if r["gain_ms_per_step"] is not None and r["gain_gib"] is None else 1 if r["gain_gib"] is not None else 2
        )
        value = r["gain_ms_per_step"] if group == 0 else r["gain_gib"] if group == 1 else 0.0
        return (minor(r), group, -value, r["kind"], r["title"])

    ordered = sorted(rows, key=key)
    for i, r in enumerate(ordered, 1):
        r["rank"], r["minor"] = i, bool(minor(r))
        for c in ("title", "how", "command", "suggestion", "evidence"):  # a file name that is not UTF-8, say
            if isinstance(r.get(c), str):
                r[c] = shown_text(r[c])
    df = pd.DataFrame(ordered, columns=FINDING_COLUMNS)
    for c in ("gain_ms_per_step", "gain_pct", "gain_gib"):
        df[c] = pd.array(df[c].tolist(), dtype="Float64")
    df["gain_tokens"] = pd.array(df["gain_tokens"].tolist(), dtype="Int64")
    df["rank"] = df["rank"].astype("int64")
    return df


def log_server_args(log) -> dict[str, Any]:
    """A launch log's server arguments (the ledger's ``global_record``); a MissingDataError when it has none."""
    rec = global_record(log, "server_args", {})
    if rec is None:
        raise MissingDataError(f"{log.path} has no server_args line, so its launch parameters are unknown")
    return dict(rec.fields.get("args") or {})
