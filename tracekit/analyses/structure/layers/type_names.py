"""Automatic layers: name the layer types (step 5 of docs/layers.md).

A type is its main-stream kernel names without communication kernels (``type_key``); its name comes from the
categories' mixer and FFN labels, ``draft:`` for a draft model's types (``_draft_types``), the most expensive
distinctive kernel where two types would share a name, and ``/fast`` / ``/slow`` where one mixer kernel's durations
form two clear clusters (``duration_split``). Where the kernels' module paths are known (``Context.modules``: the
``nn.Module`` scopes of their ops, e.g. from a graph's capture) and every layer of a type lies in one instance of
one module class, each instance another (``…/Qwen3DecoderLayer_3/…``), the type is named by that class
(``module_type_names``). ``type_table`` lists the types."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict

import numpy as np
import pandas as pd

from .assembly import Assembly, Layer
from .sequences import Context, Seq

SPLIT_MIN_RATIO = 1.3  # duration clusters: the slow one at least this much slower ...
SPLIT_SEPARATION = 3.0  # ... with a gap this many times the larger cluster's spread (in log time)
SPLIT_MIN_SHARE = 0.15  # ... and each cluster at least this share of the type's layers (and 2)
MODULE_SHARE = 0.8  # a layer lies in the deepest module instance that holds over this share of its kernels of known
# module: most of them, so that a layer is named for what holds it whole (LlamaDecoderLayer), not for its largest part
# (LlamaAttention holds about half), while a kernel or two a boundary shifted into the next layer do not matter
_INSTANCE = re.compile(r"^(?P<cls>[A-Za-z_][A-Za-z0-9_]*?)_(?P<i>\d+)$")  # Kineto's nn.Module scope label Class_i


def type_key(ctx: Context, asm: Assembly, sig: tuple) -> tuple:
    """What makes a layer type: the layer's main-stream kernel names (its segment labels in order), communication
    kernels left out — a layer that ends with a collective (the last layer before the logits AllGather, a TP
    all-reduce one layer has and another not) keeps the type of the layers it otherwise equals."""
    return tuple(c for lid in sig for c in asm.label_seq[lid] if not ctx.comm_code[c])


def _identifier(name: str) -> str:
    """The function's last identifier in a kernel name (demangled when it is an Itanium-mangled name), without
    template arguments or parameters."""
    s = name.strip()
    if s.startswith("_Z"):
        parts, i = [], 3 if s.startswith("_ZN") else 2
        while i < len(s) and s[i].isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            n = int(s[i:j])
            parts.append(s[j : j + n])
            i = j + n
        if parts and parts[-1]:
            return parts[-1]
    s = re.sub(r"^(void|static|__global__)\s+", "", s)
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):
        if ch == "<":
            if depth == 0:
                cut = min(cut, i)
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0:
            cut = min(cut, i)
            break
    return s[:cut].split("::")[-1] or name


def _identifier_prefix(name: str, width: int = 32) -> str:
    """A kernel name's last identifier (:func:`_identifier`: no namespaces, template arguments or parameters), its
    first ``width`` characters: a layer type's label, cut without a mark (not the findings' ``clip_text``, which
    keeps the whole text and marks a cut with "…")."""
    return _identifier(name)[:width]


def _tokens(ident: str) -> list[str]:
    return [t for t in re.findall(r"[A-Z]+[a-z0-9]*|[a-z0-9]+", ident) if t]


def _distinct_labels(kernels: list[str], width: int = 32) -> list[str]:
    """Labels that tell kernels apart: their short names, or, where those collide or are cut, the tokens of each
    identifier that the others lack ('' when it has none)."""
    shorts = [_identifier_prefix(k, width) for k in kernels]
    if len(set(shorts)) == len(shorts) and all(len(_identifier(k)) <= width for k in kernels):
        return shorts
    toks = [_tokens(_identifier(k)) for k in kernels]
    out = []
    for i, t in enumerate(toks):
        others = set().union(*(set(x) for j, x in enumerate(toks) if j != i))
        out.append("".join(x for x in t if x not in others)[:width])
    return out


def name_types(ctx: Context, sigs: dict, inst: dict, asm: Assembly | None, cr) -> dict[int, str]:
    if not sigs:
        return {}
    rank = {c: i for i, c in enumerate(cr.order)}
    parts_of: dict[int, list[str]] = {}
    means: dict[int, dict[str, float]] = {}

    def kernels_of(tid: int) -> dict[str, float]:
        if tid not in means:
            means[tid] = _kernel_means(ctx, inst[tid])
        return means[tid]

    for tid in sigs.values():
        seq, lay = inst[tid][0]
        cats = [ctx.cat_names[c] for c in ctx.cat_of_code[seq.codes[lay.lo : lay.hi]]]
        mixers = sorted(
            {c for c in cats if cr.info(c).layer_role == "mixer" and cr.info(c).layer_label},
            key=lambda c: rank.get(c, 1 << 30),
        )
        mix_labels = list(dict.fromkeys(cr.info(c).layer_label for c in mixers))
        ffn = sorted(
            {c for c in cats if cr.info(c).layer_role == "ffn" and cr.info(c).layer_label},
            key=lambda c: rank.get(c, 1 << 30),
        )
        parts_of[tid] = ["&".join(mix_labels) if mix_labels else "", cr.info(ffn[0]).layer_label if ffn else ""]

    def join(parts: list[str]) -> str:
        return "+".join(p for p in parts if p) or "layer"

    draft = _draft_types(inst)
    prefix = {tid: ("draft:" if tid in draft else "") for tid in inst}
    base = {tid: prefix[tid] + join(parts_of[tid]) for tid in sigs.values()}
    names = dict(base)
    by_name: dict[str, list[int]] = defaultdict(list)
    for tid, n in base.items():
        by_name[n].append(tid)
    for tids in by_name.values():
        if len(tids) < 2:
            continue
        tops = []
        for tid in tids:  # the most expensive kernel this type has and another type of the same name lacks
            others = set().union(*(set(kernels_of(o)) for o in tids if o != tid))
            own = {k: v for k, v in kernels_of(tid).items() if k not in others}
            tops.append(max(own, key=own.get) if own else "")
        labels = _distinct_labels([t for t in tops if t])
        it = iter(labels)
        for tid, top in zip(tids, tops):
            label = next(it) if top else ""
            if not label:
                continue
            role = cr.info(ctx.cat_names[ctx.cat_of_code[ctx.names.index(top)]]).layer_role
            parts = list(parts_of[tid])
            slot = 0 if role == "mixer" or not parts[1] else 1 if role == "ffn" else None
            if slot is None:
                names[tid] = f"{base[tid]}:{label}"
            else:
                parts[slot] = f"{parts[slot] or 'layer'}:{label}"
                names[tid] = prefix[tid] + join(parts)
        seen: Counter = Counter()
        for tid in sorted(tids):
            seen[names[tid]] += 1
            if seen[names[tid]] > 1:
                names[tid] = f"{names[tid]}#{seen[names[tid]]}"
    return module_type_names(ctx, inst, names)


def layer_module(paths) -> tuple[str, int] | None:
    """The module instance a layer lies in, from its kernels' module paths ("/"-joined ``Class_i`` scopes, None:
    unknown): the deepest ``Class_i`` prefix that holds over :data:`MODULE_SHARE` of the kernels of known module,
    as (class, instance); None where none does."""
    known = [p.split("/") for p in paths if isinstance(p, str) and p]
    if not known:
        return None
    count: Counter = Counter()
    for parts in known:  # per kernel of one layer (tens), once per type's layers
        for d in range(len(parts)):
            if _INSTANCE.match(parts[d]):
                count[tuple(parts[: d + 1])] += 1
    held = [k for k, n in count.items() if n > MODULE_SHARE * len(known)]
    if not held:
        return None
    m = _INSTANCE.match(max(held, key=len)[-1])
    return m.group("cls"), int(m.group("i"))


def module_type_names(ctx: Context, inst: dict, names: dict[int, str]) -> dict[int, str]:
    """``names`` with each type renamed to the module class its layers are instances of, where ``ctx.modules`` is
    known, every layer of the type agrees on the class, its layers are different instances of it (not one container
    all lie in) and no other type takes the same class; a draft type keeps ``draft:``. The others keep their name."""
    mods = getattr(ctx, "modules", None)
    if mods is None:
        return names
    cls_of: dict[int, str] = {}
    for tid, lst in inst.items():
        got = [layer_module(mods[seq.rows[lay.lo : lay.hi]].tolist()) for seq, lay in lst]
        classes = {g[0] for g in got if g is not None}
        if None in got or len(classes) != 1 or len({g[1] for g in got}) < min(2, len(got)):
            continue
        cls_of[tid] = classes.pop()
    taken = Counter(cls_of.values())
    out = dict(names)
    for tid, cls in cls_of.items():
        if taken[cls] == 1 and tid in names:
            out[tid] = ("draft:" if names[tid].startswith("draft:") else "") + cls
    return out


def _kernel_means(ctx: Context, layers: list) -> dict[str, float]:
    """The mean duration of each kernel name over a type's layers (``layers``: (sequence, layer) pairs), names in
    order of first appearance: sums of whole ns, exact, so the floats are np.mean's of each name's durations."""
    codes = np.concatenate([s.codes[lay.lo : lay.hi] for s, lay in layers])
    durs = np.concatenate([s.durs[lay.lo : lay.hi] for s, lay in layers])
    uniq, first, inv, counts = np.unique(codes, return_index=True, return_inverse=True, return_counts=True)
    sums = np.bincount(inv.reshape(-1), weights=durs.astype(np.float64), minlength=uniq.size)
    order = np.argsort(first, kind="stable")
    return {ctx.names[c]: float(m) for c, m in zip(uniq[order].tolist(), (sums[order] / counts[order]).tolist())}


def _draft_types(inst: dict) -> set[int]:
    """Types of a draft model's layers, decided over the whole trace: the target model's types are those of the
    longest run of layers of any step; a draft type never shares a run with one of them and follows a run of them in
    some step. A step whose target layers went unrecorded (only the draft run left) types its draft layers as the
    other steps do."""
    run_types: dict[tuple, set] = defaultdict(set)
    run_size: Counter = Counter()
    for tid, lst in inst.items():
        for seq, lay in lst:
            run_types[(seq.step, lay.run)].add(tid)
            run_size[(seq.step, lay.run)] += 1
    if not run_size:
        return set()
    target = run_types[max(run_size, key=lambda r: (run_size[r], -r[0], -r[1]))]
    with_target = set().union(*(t for t in run_types.values() if t & target))
    target_runs = [r for r, t in run_types.items() if t & target]
    later = set().union(
        *(t for (step, run), t in run_types.items() if any(s == step and r < run for s, r in target_runs))
    )
    return {tid for tid in inst if tid not in with_target and tid in later}


def duration_split(ctx: Context, inst: dict, names: dict[int, str]) -> dict[int, str]:
    """Layer object id -> split type name, for types whose layers form two clear duration clusters."""
    out: dict[int, str] = {}
    for tid, lst in inst.items():
        exact = [(s, l) for s, l in lst if l.exact]
        n = len(exact)
        if n < 4:
            continue
        lens = Counter(l.hi - l.lo for _, l in exact)
        width = lens.most_common(1)[0][0]
        rows = [(s, l) for s, l in exact if l.hi - l.lo == width]
        if len(rows) < 4:
            continue
        mat = np.log(np.maximum(np.array([s.durs[l.lo : l.hi] for s, l in rows], dtype=np.float64), 1.0))
        best = None
        ref_seq, ref_lay = rows[0]
        mixer_pos = ctx.mixer_cat[ctx.cat_of_code[ref_seq.codes[ref_lay.lo : ref_lay.hi]]]
        for p in range(width):
            if not mixer_pos[p]:  # only attention-like kernels: a sliding window changes their time, while
                continue  # expert GEMMs vary with routing and are no type of their own
            x = np.sort(mat[:, p])
            gaps = np.diff(x)
            i = int(np.argmax(gaps))
            lo, hi = x[: i + 1], x[i + 1 :]
            need = max(2, int(math.ceil(SPLIT_MIN_SHARE * len(x))))
            if lo.size < need or hi.size < need or gaps[i] < math.log(SPLIT_MIN_RATIO):
                continue
            spread = max(float(np.ptp(lo)), float(np.ptp(hi)), 0.01)
            score = gaps[i] / spread
            if score >= SPLIT_SEPARATION and (best is None or score > best[0]):
                best = (score, p, float((x[i] + x[i + 1]) / 2))
        if best is None:
            continue
        _, p, thr = best
        code = rows[0][0].codes[rows[0][1].lo + p]
        for s, l in lst:
            d = _duration_at(s, l, code, p, rows[0])
            if d is None:
                continue
            out[id(l)] = f"{names[tid]}/{'fast' if math.log(max(d, 1)) <= thr else 'slow'}"
    return out


def _duration_at(seq: Seq, lay: Layer, code: int, pos: int, ref) -> int | None:
    """The duration of the kernel at the split position in a layer (by position, else the same name's
    occurrence with the same ordinal)."""
    if lay.hi - lay.lo == ref[1].hi - ref[1].lo and seq.codes[lay.lo + pos] == code:
        return int(seq.durs[lay.lo + pos])
    rseq, rlay = ref
    ordinal = int((rseq.codes[rlay.lo : rlay.lo + pos] == code).sum())
    hits = np.flatnonzero(seq.codes[lay.lo : lay.hi] == code)
    return int(seq.durs[lay.lo + hits[ordinal]]) if ordinal < hits.size else None


def type_table(ctx: Context, sigs: dict, inst: dict, names: dict[int, str], split: dict[int, str]) -> pd.DataFrame:
    """One row per layer type: its name, its main-stream kernel names (of its first layer), runs and layer count."""
    rows = []
    for tid in sigs.values():
        lst = inst[tid]
        split_names = sorted({split.get(id(l), names[tid]) for _, l in lst})
        seq, lay = lst[0]
        for t in split_names:
            mine = [l for _, l in lst if split.get(id(l), names[tid]) == t]
            rows.append(
                {
                    "layer_type": t,
                    "base_type": names[tid],
                    "layers": len(mine),
                    "runs": sorted({l.run for l in mine}),
                    "signature": [ctx.names[c] for c in seq.codes[lay.lo : lay.hi].tolist()],
                }
            )
    return pd.DataFrame(rows, columns=["layer_type", "base_type", "layers", "runs", "signature"])
