"""Kernel categories as data: every GPU activity gets a category (gemm, attention_mla, norm, comm_nccl, …) and a
family (gemm, attention, norm, comm, …).

The rules live in ``tracekit/data/categories.json`` (docs/layers.md); a user file given with ``--categories FILE``
has the same shape and its rules are tried first. A rule matches on the kernel name (a regex), the activity kind,
the copy kind, the communication class, and whether the activity's stream carries copies of some kind; the first
matching rule wins and an activity no rule matches is ``other``.

:func:`categorize` is vectorised: each rule's regex runs once per distinct name (the name column's categories),
and the rules are then applied to the distinct (name, kind, copy kind, comm class, stream flag) combinations,
never per event.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import schema
from ..errors import DataFileError, InputError
from ..regexes import bounded
from ..errors import check_argument

OTHER = "other"
SHIPPED = "tracekit/data/categories.json"
ROLES = ("mixer", "ffn")
_RULE_KEYS = {"category", "pattern", "kind", "copy_kind", "comm_class", "stream_has_copy_kind", "fallback"}
_CATEGORY_KEYS = {"family", "layer_role", "layer_label"}
_KINDS = schema.GPU_ACTIVITY_KINDS


@dataclass(frozen=True)
class CategoryInfo:
    """One category: its family, and what it tells the automatic layer finder (a mixer or an FFN part)."""

    name: str
    family: str
    layer_role: str | None = None  # "mixer" (attention, linear attention, state space) or "ffn"
    layer_label: str | None = None  # the word in layer type names (attn, mla, kda, moe, mlp, …)
    doc: str = ""


def _lowered(pattern: str) -> re.Pattern | None:
    """For a pattern that starts with ``(?i)`` and has no other inline flag: the same pattern lower-cased (escapes
    kept) to run case-sensitively on lower-cased ASCII names, about five times faster than IGNORECASE."""
    if not pattern.startswith("(?i)") or "(?" in pattern[4:].replace("(?:", "").replace("(?!", "").replace(
        "(?=", ""
    ).replace("(?<", ""):
        return None
    out, esc = [], False
    for ch in pattern[4:]:
        out.append(ch if esc else ch.lower())
        esc = (ch == "\\") and not esc
    try:
        return re.compile("".join(out), re.ASCII)
    except re.error:
        return None


class _Deferred:
    """A shipped rule's own pattern, compiled on first use: its lower-cased twin (``CategoryRule.lowered``) answers
    every ASCII name, so most processes never need it (each compile is ~0.1 ms, and every process, a worker of
    ``imbalance`` too, loads the ~40 shipped rules). Otherwise a compiled pattern: ``search``, ``pattern``, …"""

    __slots__ = ("pattern", "_flags", "_rx")

    def __init__(self, pattern: str, flags: int):
        self.pattern, self._flags, self._rx = pattern, flags, None

    def compiled(self) -> re.Pattern:
        if self._rx is None:
            self._rx = re.compile(self.pattern, self._flags)
        return self._rx

    def search(self, *args):
        return self.compiled().search(*args)

    def __getattr__(self, name: str):  # only for what the class lacks (a pattern's match, flags, groups, …)
        if name.startswith("__") or name in self.__slots__:  # copy and pickle probing a fresh instance
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __reduce__(self):
        return (_Deferred, (self.pattern, self._flags))

    def __eq__(self, other) -> bool:
        return self.compiled() == (other.compiled() if isinstance(other, _Deferred) else other)

    def __hash__(self) -> int:
        return hash(self.compiled())


@dataclass(frozen=True)
class CategoryRule:
    category: str
    pattern: re.Pattern | None = None
    kinds: tuple[str, ...] | None = None
    copy_kinds: tuple[str, ...] | None = None
    comm_classes: tuple[str, ...] | None = None  # ("any",) = any communication class
    stream_has_copy_kind: str | None = None
    where: str = ""  # file and JSON path, for messages
    lowered: re.Pattern | None = None  # the same pattern for lower-cased ASCII names (see _lowered)
    fallback: bool = False  # a catch-all of a generic family: it may match names that an earlier rule claims

    def search(self, name: str, low: str | None) -> bool:
        if self.lowered is not None and low is not None:
            return self.lowered.search(low) is not None
        return self.pattern.search(name) is not None  # type: ignore[union-attr]


@dataclass(frozen=True)
class CategoryRules:
    """Compiled category rules (user rules first) and the declared categories."""

    rules: tuple[CategoryRule, ...]
    categories: dict[str, CategoryInfo]
    sources: tuple[str, ...] = ()
    order: tuple[str, ...] = field(default=())  # category names in declaration order, "other" last

    def family(self, category: str) -> str:
        info = self.categories.get(category)
        return info.family if info else OTHER

    def info(self, category: str) -> CategoryInfo:
        return self.categories.get(category) or CategoryInfo(category, OTHER)


# --------------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------------


def _strings(value: Any, where: str, src: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise DataFileError(f"{src}: {where} must be a string or a non-empty list of strings")


def _entry(spec, where: str, src: str, required: str, keys: set[str]) -> str:
    """An entry of a categories file checked: an object, no key but ``keys`` (and ``_``-comments), and its
    ``required`` key a non-empty string, which it returns; else one sentence naming the file and the place."""
    if not isinstance(spec, dict):
        raise DataFileError(f"{src}: {where} must be an object with a '{required}'")
    unknown = sorted(k for k in spec if k not in keys and not k.startswith("_"))
    if unknown:
        raise DataFileError(
            f"{src}: {where} has unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(keys))}, _doc)"
        )
    value = spec.get(required)
    if not isinstance(value, str) or not value:
        raise DataFileError(f"{src}: {where}.{required} must be a non-empty string")
    return value


def _parse_categories(doc: dict, src: str) -> dict[str, CategoryInfo]:
    cats = doc.get("categories", {})
    if not isinstance(cats, dict):
        raise DataFileError(f"{src}: $.categories must be an object mapping category names to {{family, ...}}")
    out: dict[str, CategoryInfo] = {}
    for name, spec in cats.items():
        where = f"$.categories.{name}"
        family = _entry(spec, where, src, "family", _CATEGORY_KEYS)
        role = spec.get("layer_role")
        if role is not None and role not in ROLES:
            raise DataFileError(f"{src}: {where}.layer_role must be one of {', '.join(ROLES)} or absent, not {role!r}")
        label = spec.get("layer_label")
        if label is not None and not isinstance(label, str):
            raise DataFileError(f"{src}: {where}.layer_label must be a string")
        out[str(name)] = CategoryInfo(str(name), family, role, label, str(spec.get("_doc", "")))
    return out


def _parse_rules(doc: dict, src: str, known: dict[str, CategoryInfo], user: bool = False) -> list[CategoryRule]:
    """``user``: a user's file, whose patterns run time-bounded (tracekit's own are linear, tested, and use ``re``)."""
    rules = doc.get("rules", [])
    if not isinstance(rules, list):
        raise DataFileError(f"{src}: $.rules must be a list of rules")
    out = []
    for i, r in enumerate(rules):
        where = f"$.rules[{i}]"
        cat = _entry(r, where, src, "category", _RULE_KEYS)
        if cat not in known and cat != OTHER:
            raise DataFileError(f"{src}: {where}.category {cat!r} is not declared in $.categories (nor in {SHIPPED})")
        pattern = lowered = None
        if "pattern" in r:
            if not isinstance(r["pattern"], str):
                raise DataFileError(f"{src}: {where}.pattern must be a regular expression string")
            lowered = None if user else _lowered(r["pattern"])
            try:  # a shipped pattern with a lower-cased twin (valid, so is it: tests compile every one) is deferred
                pattern = _Deferred(r["pattern"], re.ASCII) if lowered else re.compile(r["pattern"], re.ASCII)
            except re.error as exc:
                raise DataFileError(f"{src}: {where}.pattern is not a valid regular expression ({exc})") from exc
            if user:  # a user's pattern runs time-bounded
                pattern = bounded(r["pattern"], f"{src}: {where}.pattern", DataFileError, re.ASCII)
        kinds = _strings(r["kind"], f"{where}.kind", src) if "kind" in r else None
        if kinds and any(k not in _KINDS for k in kinds):
            raise DataFileError(f"{src}: {where}.kind must be among {', '.join(_KINDS)}")
        copy_kinds = _strings(r["copy_kind"], f"{where}.copy_kind", src) if "copy_kind" in r else None
        if copy_kinds and any(k not in schema.COPY_KINDS for k in copy_kinds):
            raise DataFileError(f"{src}: {where}.copy_kind must be among {', '.join(schema.COPY_KINDS)}")
        comm = _strings(r["comm_class"], f"{where}.comm_class", src) if "comm_class" in r else None
        if comm and any(c not in schema.COMM_CLASSES and c != "any" for c in comm):
            raise DataFileError(f"{src}: {where}.comm_class must be among {', '.join(schema.COMM_CLASSES)} or 'any'")
        has = r.get("stream_has_copy_kind")
        if has is not None and has not in schema.COPY_KINDS:
            raise DataFileError(f"{src}: {where}.stream_has_copy_kind must be one of {', '.join(schema.COPY_KINDS)}")
        if pattern is None and kinds is None and copy_kinds is None and comm is None and has is None:
            raise DataFileError(
                f"{src}: {where} states no condition (pattern, kind, copy_kind, comm_class or"
                " stream_has_copy_kind), so it would match everything"
            )
        fallback = r.get("fallback", False)
        if not isinstance(fallback, bool):
            raise DataFileError(f"{src}: {where}.fallback must be true or false")
        out.append(
            CategoryRule(
                cat,
                pattern,
                kinds,
                copy_kinds,
                comm,
                has,
                f"{src} {where}",
                lowered if pattern is not None else None,
                fallback,
            )
        )
    return out


def _read(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the categories file ({exc.strerror or exc})") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise DataFileError(
            f'{path}: not JSON ({exc}); a categories file is {{"categories": {{...}}, "rules": [...]}}}}'
        ) from exc
    if not isinstance(doc, dict):
        raise DataFileError(f'{path}: $ must be a JSON object {{"categories": {{...}}, "rules": [...]}}')
    return doc


@lru_cache(maxsize=1)
def _shipped() -> CategoryRules:
    doc = json.loads(resources.files("tracekit.data").joinpath("categories.json").read_text(encoding="utf-8"))
    cats = _parse_categories(doc, SHIPPED)
    if OTHER not in cats:
        cats[OTHER] = CategoryInfo(OTHER, OTHER)
    rules = _parse_rules(doc, SHIPPED, cats)
    return CategoryRules(tuple(rules), cats, (SHIPPED,), tuple(cats))


def load_categories(path: str | Path | None = None) -> CategoryRules:
    """The shipped rules, or a user file's rules (tried first) followed by the shipped ones.

    A user file may declare new categories (``categories``) and use the shipped ones; a malformed file raises
    :class:`~tracekit.errors.DataFileError` naming the file and the JSON path of the bad field.
    """
    check_argument(path, "path", "a path (str or Path) of a categories file or None", paths=True, none=True)
    base = _shipped()
    if path is None:
        return base
    p = Path(path)
    doc = _read(p)
    user_cats = _parse_categories(doc, str(p))
    cats = {**base.categories, **user_cats}
    rules = _parse_rules(doc, str(p), cats, user=True)
    order = tuple(c for c in base.order if c != OTHER) + tuple(c for c in user_cats if c not in base.categories)
    return CategoryRules(tuple(rules) + base.rules, cats, (str(p),) + base.sources, order + (OTHER,))


def resolve_categories(categories=None) -> CategoryRules:
    """``categories`` as given (CategoryRules), a path to a user file, or None for the shipped rules."""
    if isinstance(categories, CategoryRules):
        return categories
    return load_categories(categories)


# --------------------------------------------------------------------------------------------------
# categorizing
# --------------------------------------------------------------------------------------------------


def _codes(col: pd.Series) -> tuple[np.ndarray, list]:
    """Integer codes (-1 = missing) and the category values of a column, categorical or not."""
    c = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
    return c.cat.codes.to_numpy(), [str(x) for x in c.cat.categories]  # the codes' own (narrow) type: no copy


def _value_mask(values: list[str], allowed: tuple[str, ...] | None, any_ok: bool = False) -> np.ndarray:
    """Over the column's categories (and a last slot for missing): which satisfy the condition."""
    out = np.zeros(len(values) + 1, dtype=bool)
    if allowed is None:
        out[:] = True
        return out
    if any_ok and "any" in allowed:
        out[:-1] = True
        return out
    for i, v in enumerate(values):
        out[i] = v in allowed
    return out


def categorize(events: pd.DataFrame, rules=None) -> pd.Categorical:
    """The category of every row: GPU activity (kernel, memcpy, memset) gets a category, other rows <NA>.

    ``rules``: CategoryRules, a path to a user file, or None (shipped). The result is aligned with the rows of
    ``events`` and its categories are every declared category (declaration order, ``other`` last).
    """
    check_argument(events, "events", "a DataFrame of events (trace.events)", pd.DataFrame)
    cr = resolve_categories(rules)
    schema.require_columns(events, ["name", "kind"], "categorize")
    n = len(events)
    names_c, names = _codes(events["name"])
    kind_c, kinds = _codes(events["kind"])
    # GPU rows by a lookup of the kind codes (its last slot: a missing kind); every whole-table array below is
    # one allocation at most, since on a big trace fresh memory costs more than the arithmetic
    sel = np.flatnonzero(np.append(np.isin(np.asarray(kinds, dtype=object), _KINDS), False)[kind_c])
    optional = {}
    for col in ("copy_kind", "comm_class"):
        optional[col] = _codes(events[col]) if col in events.columns else (None, [])
    copy_c, copies = optional["copy_kind"]
    comm_c, comms = optional["comm_class"]
    wanted = sorted({r.stream_has_copy_kind for r in cr.rules if r.stream_has_copy_kind})
    lane_flags = _lane_flags(events, sel, copy_c, copies, wanted)
    # the distinct combinations, then the rules over them (vectorised over combinations)
    radix = [len(names) + 1, len(kinds) + 1, len(copies) + 1, len(comms) + 1, 1 << max(len(wanted), 0)]
    parts = [
        names_c[sel],
        kind_c[sel],
        copy_c[sel] if copy_c is not None else None,
        comm_c[sel] if comm_c is not None else None,
        lane_flags,
    ]
    key = np.zeros(sel.size, dtype=np.int64)
    for i, (r, p) in enumerate(zip(radix, parts)):
        key *= r
        if p is not None:
            key += p.astype(np.int64) + (1 if i < 4 else 0)  # codes from 0 (missing: -1 → 0)
    uniq, inverse = _sorted_factorize(key)
    comb = []
    rest = uniq.copy()
    for r in reversed(radix):
        comb.append(rest % r)
        rest = rest // r
    u_flags, u_comm, u_copy, u_kind, u_name = comb  # reversed order of `parts`
    u_name, u_kind, u_copy, u_comm = u_name - 1, u_kind - 1, u_copy - 1, u_comm - 1
    assigned = np.full(uniq.size, -1, dtype=np.int64)
    order = list(cr.order)
    cat_index = {c: i for i, c in enumerate(order)}
    # regexes run once per distinct name that GPU activity uses (not per event, not on CPU-op names)
    used, u_slot = np.unique(u_name, return_inverse=True)
    used_names = [names[i] if i >= 0 else "" for i in used.tolist()]
    lowered = [n.lower() if n.isascii() else None for n in used_names]
    for rule in cr.rules:
        open_ = assigned < 0
        if not open_.any():
            break
        m = open_.copy()
        if rule.pattern is not None:  # only on the names of combinations still without a category
            need = np.unique(u_slot[open_ & (u_name >= 0)])
            hit = np.zeros(len(used_names), dtype=bool)
            hit[need] = np.fromiter(
                (rule.search(used_names[i], lowered[i]) for i in need.tolist()), dtype=bool, count=need.size
            )
            m &= hit[u_slot]
        if rule.kinds is not None:
            m &= _value_mask(kinds, rule.kinds)[u_kind]
        if rule.copy_kinds is not None:
            m &= _value_mask(copies, rule.copy_kinds)[u_copy] & (u_copy >= 0)
        if rule.comm_classes is not None:
            m &= _value_mask(comms, rule.comm_classes, any_ok=True)[u_comm] & (u_comm >= 0)
        if rule.stream_has_copy_kind is not None:
            bit = wanted.index(rule.stream_has_copy_kind)
            m &= ((u_flags >> bit) & 1).astype(bool)
        assigned[m] = cat_index[rule.category]
    assigned[assigned < 0] = cat_index[OTHER]
    codes = np.full(n, -1, dtype=np.int8 if len(order) < 127 else np.int32)
    codes[sel] = assigned[inverse]
    return pd.Categorical.from_codes(codes, categories=order)


def _lane_flags(events: pd.DataFrame, sel: np.ndarray, copy_c, copies: list, wanted: list) -> np.ndarray | None:
    """Per GPU row (``sel``): bit i set when its (device, stream) lane carries a copy of kind ``wanted[i]`` (for
    ``stream_has_copy_kind``); None when no rule asks. Lanes are keyed for the rows that need one only."""
    if not wanted or copy_c is None or not {"device", "stream"} <= set(events.columns):
        return None
    dev, stream = events["device"].to_numpy(), events["stream"].to_numpy()
    lane = dev[sel].astype(np.int64) * (1 << 32) + stream[sel].astype(np.int64)
    flags = np.zeros(sel.size, dtype=np.int64)
    for bit, ck in enumerate(wanted):
        has = np.flatnonzero(copy_c == (copies.index(ck) if ck in copies else -2))
        carriers = np.unique(dev[has].astype(np.int64) * (1 << 32) + stream[has].astype(np.int64))
        flags |= np.isin(lane, carriers).astype(np.int64) << bit
    return flags


def _sorted_factorize(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` by a hash table (pd.factorize) and a sort of the few distinct keys,
    not of every row."""
    codes, uniques = pd.factorize(key, sort=False)
    order = np.argsort(uniques, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return uniques[order], rank[codes]


def families(categories, rules=None) -> pd.Categorical:
    """The family of each category value (a Categorical or Series of categories; <NA> stays <NA>)."""
    cr = resolve_categories(rules)
    cat = pd.Categorical(categories)
    fam = [cr.family(str(c)) for c in cat.categories]
    uniq = list(dict.fromkeys(fam))
    lookup = np.array([uniq.index(f) for f in fam] + [-1], dtype=np.int64)
    codes = np.asarray(cat.codes, dtype=np.int64)
    return pd.Categorical.from_codes(lookup[codes], categories=uniq)


def with_categories(events: pd.DataFrame, rules=None) -> pd.DataFrame:
    """``events`` with ``category`` and ``family`` columns, as a new table (the input is not changed; its columns are
    shared, copy-on-write, not copied)."""
    out = events.copy(deep=False)
    out["category"] = categorize(events, rules)
    out["family"] = families(out["category"], rules)
    return out


def coverage(events: pd.DataFrame, rules=None, *, top: int = 10) -> dict:
    """How much kernel time the rules categorise: ``kernel_ns``, ``categorized_ns`` (not ``other``), ``pct`` and
    the largest uncategorised kernel names (``other_names``: name → ns)."""
    cols = [c for c in ("name", "kind", "copy_kind", "comm_class", "device", "stream", "dur_ns") if c in events]
    k = events.loc[(events["kind"] == "kernel").to_numpy(), cols]  # what categorize reads, not every column
    cats = categorize(k, rules)
    dur = k["dur_ns"].to_numpy(np.int64)
    other = np.asarray(cats == OTHER)
    total = int(dur.sum())
    left = k.loc[other, ["name", "dur_ns"]]
    worst = left.groupby(left["name"].astype(str))["dur_ns"].sum().sort_values(ascending=False).head(top)
    return {
        "kernel_ns": total,
        "categorized_ns": int(total - dur[other].sum()),
        "pct": 100.0 * (total - int(dur[other].sum())) / total if total else 100.0,
        "other_names": {str(n): int(v) for n, v in worst.items()},
    }


def trace_categories(trace, rules=None) -> pd.Categorical:
    """:func:`categorize` over ``trace.events``, computed once per trace and rules (kept in ``trace.derived``, as
    the steps are): what every analysis that groups by category should call."""
    from ..trace import Trace

    check_argument(trace, "trace", "a loaded Trace (tracekit.load)", Trace)
    cr = resolve_categories(rules)
    key = ("categories", cr.sources)
    cached = trace.derived.get(key)
    if cached is None or len(cached) != len(trace.events):
        cached = trace.derived[key] = categorize(trace.events, cr)
    return cached


# --------------------------------------------------------------------------------------------------
# whose kernel a name shows
# --------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _owner_rules() -> tuple[tuple[str, re.Pattern], ...]:
    doc = json.loads(resources.files("tracekit.data").joinpath("categories.json").read_text(encoding="utf-8"))
    out = []
    for i, o in enumerate(doc.get("owners", [])):
        if not isinstance(o, dict) or not isinstance(o.get("owner"), str) or not isinstance(o.get("pattern"), str):
            raise DataFileError(f"{SHIPPED}: $.owners[{i}] needs an 'owner' and a 'pattern' (strings)")
        out.append((o["owner"], re.compile(o["pattern"])))
    return tuple(out)


@lru_cache(maxsize=1 << 16)
def kernel_owner(name: str) -> str | None:
    """Whose kernel ``name`` is (PyTorch, vLLM, SGLang, FlashInfer, cuBLAS, …) where its namespace or prefix shows
    it (``owners`` in tracekit/data/categories.json), else None: a kernel is never called PyTorch's by default.
    Cached per distinct name."""
    for owner, rx in _owner_rules():
        if rx.search(name):
            return owner
    return None
