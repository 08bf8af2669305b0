"""Op tags from many rules (issue 41): an annotation of 100,000 op-tag rules took 104 s, one regex pass over the
names and one pass over the events per rule. Rules are now matched once per distinct name (literals and anchored
literals through one trie walk; a regex only on the names holding its literal) and applied per (name, block type);
the tags must be what the rule-by-rule engine gave — kept here as the oracle — with the first rule that tags a
kernel winning, block types and ordinals included."""

from __future__ import annotations

import random
import time
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.analyses.steps.resolve import find_steps
from tracekit.annotation import annotate, load_annotation
from tracekit.annotation.rulematch import literal_of, matching_rules
from tracekit.annotation.spec import TagRule, parse_annotation
from tracekit.events import name_mask

REPO = Path(__file__).resolve().parents[3]
TRACE = REPO / "fixtures" / "synthetic" / "dp16_bs4.trace.json.gz"


def oracle_tags(out: pd.DataFrame, rules: list[TagRule]) -> list:
    """The engine before issue 41, rule by rule over every event (row_block: the block of each row, -1 none)."""
    row_block = np.where(out["block"].to_numpy() >= 0, out["step"].to_numpy() * 100_000 + out["block"].to_numpy(), -1)
    tag_names = list(dict.fromkeys(r.tag for r in rules))
    tags = np.full(len(out), -1, dtype=np.int64)
    is_kernel = (out["kind"] == "kernel").to_numpy()
    bt = out["block_type"]
    bt_codes = bt.cat.codes.to_numpy()
    bt_index = {str(c): i for i, c in enumerate(bt.cat.categories)}
    for r in rules:
        m = name_mask(out, r.pattern) & is_kernel & (row_block >= 0)
        if r.block_type is not None:
            m &= bt_codes == bt_index.get(r.block_type, -2)
        if r.ordinal is not None:
            idx = np.flatnonzero(m)
            rank = pd.Series(row_block[idx]).groupby(row_block[idx]).cumcount().to_numpy()
            m = np.zeros(len(out), dtype=bool)
            m[idx[rank == r.ordinal - 1]] = True
        tags = np.where(m & (tags < 0), tag_names.index(r.tag), tags)
    return [tag_names[t] if t >= 0 else None for t in tags.tolist()]


@pytest.fixture(scope="module")
def dp16():
    trace = tracekit.load(TRACE, cache=False)
    ann = load_annotation("k3_dp16")
    return trace, ann, find_steps(trace, ann=ann).table


def _tags(trace, ann, steps) -> list:
    return [None if pd.isna(t) else t for t in annotate(trace, ann, steps, keep=False).events["op_tag"].tolist()]


def random_rules(names: list[str], block_types: list[str], n: int, rnd: random.Random) -> list[TagRule]:
    """A mix as annotations write them: pieces of real names as literals (some anchored, some escaped), regexes over
    them (alternations, classes, repeats, (?i)), block types (some absent from the trace) and ordinals."""
    rules = []
    for _ in range(n):
        name = rnd.choice(names)
        i = rnd.randrange(len(name))
        piece = name[i : i + rnd.randint(1, 12)]
        kind = rnd.random()
        if kind < 0.45:
            pattern = piece.replace(".", "\\.").replace("(", "\\(") if not set(piece) & set("*+?{}[]|)^$\\") else "gemm"
        elif kind < 0.55:
            pattern = "^" + "".join(c for c in name[: rnd.randint(1, 10)] if c.isalnum() or c == "_")
        elif kind < 0.65:
            pattern = "".join(c for c in piece if c.isalnum()) + rnd.choice(["\\d+", "\\w*_", ".*?kernel", "s?", "$"])
        elif kind < 0.75:
            pattern = f"(?i){rnd.choice(['GEMM', 'Nccl', 'FLASH', 'fused'])}|{rnd.choice(['norm', 'rope', 'copy'])}"
        elif kind < 0.85:
            pattern = rnd.choice(["[a-z]+_kernel", "^void ", "<\\d+>", "a.b", "(attn|moe)_", ".", "", "zzz|^$"])
        else:
            pattern = "".join(c for c in piece if c.isalnum() or c == "_") or "x"
        rules.append(
            TagRule(
                tag=rnd.choice(["gemm", "attn", "norm", "moe", "comm", "t" + str(rnd.randrange(50))]),
                pattern=pattern,
                block_type=rnd.choice([None, None, None, *block_types, "nosuchtype"]),
                ordinal=rnd.choice([None, None, None, None, 1, 2, 3, 7]),
            )
        )
    return rules


def test_literal_rules_are_read_as_the_regex_would():
    assert literal_of("at::native::fill") == ("at::native::fill", False)
    assert literal_of("^nccl") == ("nccl", True)
    assert literal_of("cuda\\.graph\\(") == ("cuda.graph(", False)
    assert literal_of("gemm$") is None and literal_of("a\\d") is None and literal_of("(?i)x") is None
    assert literal_of("a^b") is None  # an anchor inside is not a literal
    names = ["nccl_kernel", "void at::native::fill<4>", "cuda.graph(x)", "xnccl", ""]
    pats = ["nccl", "^nccl", "cuda\\.graph\\(", "fill<\\d>", "(?i)NCCL", "", "^$", "^", "k.rnel"]
    assert matching_rules(pats, names, [f"p{i}" for i in range(len(pats))]) == [
        [0, 1, 4, 5, 7, 8],
        [3, 5, 7],
        [2, 5, 7],
        [0, 4, 5, 7],
        [5, 6, 7],
    ]


def test_the_shipped_annotation_tags_as_before(dp16):
    trace, ann, steps = dp16
    out = annotate(trace, ann, steps, keep=False).events
    assert _tags(trace, ann, steps) == oracle_tags(out, ann.op_tags)
    assert out["op_tag"].notna().sum() > 100


@pytest.mark.slow
def test_random_rule_sets_tag_as_the_rule_by_rule_engine(dp16):
    trace, ann, steps = dp16
    out = annotate(trace, ann, steps, keep=False).events
    kernels = sorted(set(out.loc[out["kind"] == "kernel", "name"].astype(str)))
    types = sorted(set(out["block_type"].dropna().astype(str)))
    rnd = random.Random(41)
    tagged = 0
    for n in (1, 5, 40, 300):
        for _ in range(3):
            rules = random_rules(kernels, types, n, rnd)
            a = msgspec.structs.replace(ann, op_tags=rules)
            got = _tags(trace, a, steps)
            assert got == oracle_tags(out, rules), n
            tagged += sum(t is not None for t in got)
    assert tagged > 10_000


@pytest.mark.slow
def test_a_hundred_thousand_rules_load_and_apply_in_seconds(dp16, tmp_path):
    """10^5 rules (a realistic mix: literals, anchored literals, regexes with a literal, a few without) on the dp16
    fixture: loaded from JSON and applied within 10 s (104 s before), the same tags as the rule-by-rule engine on
    their first 2,000."""
    import json

    trace, ann, steps = dp16
    out = annotate(trace, ann, steps, keep=False).events
    kernels = sorted(set(out.loc[out["kind"] == "kernel", "name"].astype(str)))
    types = sorted(set(out["block_type"].dropna().astype(str)))
    rnd = random.Random(7)
    rules = random_rules(kernels, types, 100_000, rnd)
    doc = json.loads((REPO / "annotations" / "k3_dp16.json").read_text())
    doc["op_tags"] = [msgspec.to_builtins(r) for r in rules]
    path = tmp_path / "many.json"
    path.write_text(json.dumps(doc))
    t0 = time.perf_counter()
    big = parse_annotation(path.read_bytes(), str(path))
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = _tags(trace, big, steps)
    t_apply = time.perf_counter() - t0
    print(f"100,000 op-tag rules: load {t_load:.2f} s, apply {t_apply:.2f} s ({len(kernels)} kernel names)")
    assert t_load + t_apply < 10
    assert sum(t is not None for t in got) > 0.5 * int((out["block"] >= 0).sum() and (out["kind"] == "kernel").sum())
    few = msgspec.structs.replace(ann, op_tags=rules[:2000])
    assert _tags(trace, few, steps) == oracle_tags(out, rules[:2000])
