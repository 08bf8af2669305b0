"""Event selectors: a small, documented language for picking rows of the events table.

    SEL   := TERM (';' TERM)*          terms are ANDed
    TERM  := ['!'] KEY ':' VALUE       '!' negates the term
    KEY   := kind | copy | comm | name | stream | device | cat | collective | category | family
    VALUE := alternatives joined by '|' (for name: one regular expression, matched with re.search)

Examples: ``kind:kernel``, ``copy:PtoP``, ``comm:any`` (any communication kernel), ``comm:nccl|deepep``,
``name:gemm|attn``, ``kind:kernel;!comm:any;stream:7``, ``gpu`` (shorthand for kernel|memcpy|memset).
With an annotation, ``block:TYPE``, ``tag:OP_TAG``, ``step:0`` and ``layer:3`` select by the
annotation's columns.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from ..errors import UsageError
from ..regexes import bounded

KEYS = {
    "kind": "kind",
    "copy": "copy_kind",
    "comm": "comm_class",
    "name": "name",
    "stream": "stream",
    "device": "device",
    "cat": "cat",
    "collective": "collective",
    # kernel categories and families (tracekit/data/categories.json)
    "category": "category",
    "family": "family",
    # with an annotation (tracekit.annotation.annotate): block type, op tag, step and layer
    "block": "block_type",
    "tag": "op_tag",
    "step": "step",
    "layer": "layer",
}
SHORTHANDS = {"gpu": "kind:kernel|memcpy|memset", "all": ""}


class SelectorError(UsageError):
    """A selector that does not parse (exit 2)."""


def select(events: pd.DataFrame, selector: str) -> np.ndarray:
    """Boolean mask of the rows that ``selector`` picks."""
    selector = SHORTHANDS.get(selector.strip(), selector)
    mask = np.ones(len(events), dtype=bool)
    for raw in (t.strip() for t in selector.split(";")):
        if not raw:
            continue
        neg = raw.startswith("!")
        term = SHORTHANDS.get(raw.lstrip("!"), raw.lstrip("!"))
        key, sep, value = term.partition(":")
        if not sep or key.strip() not in KEYS:
            raise SelectorError(f"selector term {raw!r} is not KEY:VALUE with KEY one of {', '.join(KEYS)}")
        if KEYS[key.strip()] not in events.columns:
            raise SelectorError(f"selector term {raw!r} needs an annotation (-a ANNOTATION) to know blocks and tags")
        m = _term(events, key.strip(), value.strip(), raw)
        mask &= ~m if neg else m
    return mask


def _term(events: pd.DataFrame, key: str, value: str, raw: str) -> np.ndarray:
    col = events[KEYS[key]]
    if key == "name":
        pat = bounded(value, f"selector term {raw!r}", SelectorError)
        cats = col.cat.categories
        hit = np.fromiter((bool(pat.search(str(c))) for c in cats), dtype=bool, count=len(cats))
        codes = col.cat.codes.to_numpy()
        return np.where(codes >= 0, hit[np.clip(codes, 0, None)] if len(cats) else False, False)
    alts = [v.strip() for v in value.split("|") if v.strip()]
    if key in ("stream", "device", "step", "layer"):
        try:
            nums = [int(v) for v in alts]
        except ValueError as exc:
            raise SelectorError(f"selector term {raw!r}: {key} takes integers") from exc
        return col.isin(nums).to_numpy()
    if key == "comm" and "any" in alts:
        return col.notna().to_numpy()
    if key == "comm" and "none" in alts:
        return (col.isna() | col.isin(alts)).to_numpy()
    return col.astype(object).isin(alts).to_numpy()
