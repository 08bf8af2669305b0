"""Kernel categories as data (tracekit/data/categories.json): rules, user files, errors, and the coverage target
(>= 95 % of kernel time in a category other than "other" on every corpus trace and synthetic fixture)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.analyses.categories import (
    OTHER,
    CategoryRule,
    CategoryRules,
    categorize,
    coverage,
    families,
    load_categories,
    with_categories,
)
from tracekit.errors import DataFileError, InputError

ROOT = Path(__file__).resolve().parents[3]
SYN = ROOT / "fixtures" / "synthetic"
CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_DIRS = (CORPUS / "hta" / "tests" / "data", CORPUS / "tracelens" / "tests" / "traces")
NO_CORPUS = (
    f"the ../shared corpus is not present ({CORPUS} holds no *.json.gz under hta/tests/data or"
    " tracelens/tests/traces); the coverage test over real traces needs the shared trace corpus"
)
TARGET_PCT = 95.0


def _events(rows: list[dict]) -> pd.DataFrame:
    base = {"kind": "kernel", "device": 0, "stream": 7, "copy_kind": None, "comm_class": None, "dur_ns": 10}
    df = pd.DataFrame([{**base, **r} for r in rows])
    for c in ("name", "kind", "copy_kind", "comm_class"):
        df[c] = df[c].astype("category")
    return df


def test_names_copies_and_comm_classes():
    ev = _events(
        [
            {"name": "void deep_gemm::sm100_fp8_gemm_1d1d_impl<(deep_gemm::GemmType)2, false>"},
            {"name": "void deep_gemm::sm100_fp8_gemm_1d1d_impl<(deep_gemm::GemmType)0, false>"},
            {"name": "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(float)"},
            {"name": "Memcpy PtoP (Device -> Device)", "kind": "memcpy", "copy_kind": "PtoP", "stream": 20},
            {"name": "memcpy128", "stream": 20},  # the local copy: on the stream that carries PtoP copies
            {"name": "memcpy128", "stream": 7},  # the same kernel on the main stream is an ordinary copy
            {"name": "Memcpy HtoD (Pinned -> Device)", "kind": "memcpy", "copy_kind": "HtoD"},
            {"name": "Memset (Device)", "kind": "memset", "copy_kind": "memset"},
            {"name": "ncclDevKernel_AllGather_RING_LL(x)", "comm_class": "nccl"},
            {"name": "void deep_ep::internode_ll::dispatch<true>(void*)", "comm_class": "deepep"},
            {"name": "kernel_cutlass_kda_decode_mtp_kernel"},
            {"name": "void tokenspeed_mla::sm100::mla_decode_fp8_kernel<128>(P)"},
            {"name": "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64"},
            {"name": "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256E"},
            {"name": "something nobody knows"},
            {"name": "scheduler.run_batch", "kind": "gpu_annotation"},
            {"name": "aten::mm", "kind": "cpu_op", "device": -1, "stream": -1},
        ]
    )
    got = list(categorize(ev))
    assert got[:15] == [
        "expert_gemm",
        "gemm",
        "norm",
        "weight_ag_copy",
        "weight_ag_local_copy",
        "copy_kernel",
        "copy_HtoD",
        "memset",
        "comm_nccl",
        "comm_deepep",
        "linear_attention_kda",
        "attention_mla",
        "gemm",
        "norm",
        OTHER,
    ]
    assert pd.isna(got[15]) and pd.isna(got[16])  # not GPU activity
    fam = list(families(categorize(ev)))
    assert fam[:4] == ["gemm", "gemm", "norm", "comm"] and pd.isna(fam[16])
    out = with_categories(ev)
    assert list(out["category"])[:3] == got[:3] and "category" not in ev.columns  # the input is not changed


def test_plain_object_columns_and_missing_optional_columns():
    ev = pd.DataFrame(
        {
            "name": ["void flashinfer::norm::RMSNormKernel<8u>(x)", "rotary_embedding_kernel"],
            "kind": ["kernel", "kernel"],
        }
    )
    assert list(categorize(ev)) == ["norm", "rope"]


class _Counting:
    """A pattern that counts how often it is searched."""

    def __init__(self, pattern: str):
        self.rx, self.calls = re.compile(pattern), 0
        self.pattern = pattern

    def search(self, s):
        self.calls += 1
        return self.rx.search(s)


def test_regexes_run_once_per_distinct_name_never_per_event():
    base = load_categories()
    counting = _Counting("gemm")
    rules = CategoryRules((CategoryRule("gemm", counting),) + base.rules, base.categories, base.sources, base.order)
    names = ["a_gemm_kernel", "norm_kernel", "other_kernel"] * 2000
    ev = _events([{"name": n} for n in names])
    cats = categorize(ev, rules)
    assert counting.calls == 3  # three distinct names, 6000 events
    assert (np.asarray(cats)[::3] == "gemm").all()


def test_user_file_rules_come_first_and_may_declare_categories(tmp_path):
    f = tmp_path / "mine.json"
    f.write_text(
        json.dumps(
            {
                "categories": {"my_attention": {"family": "attention", "layer_role": "mixer", "layer_label": "myattn"}},
                "rules": [
                    {"category": "my_attention", "pattern": "FusedAddRMSNorm", "_doc": "a joke, to prove the order"},
                    {"category": "gemm", "pattern": "^mystery$"},
                ],
            }
        )
    )
    rules = load_categories(f)
    ev = _events([{"name": "FusedAddRMSNormKernel"}, {"name": "mystery"}, {"name": "RMSNormKernel"}])
    assert list(categorize(ev, rules)) == ["my_attention", "gemm", "norm"]
    assert rules.family("my_attention") == "attention" and rules.info("my_attention").layer_label == "myattn"
    assert list(categorize(ev, f)) == ["my_attention", "gemm", "norm"]  # a path works too


@pytest.mark.parametrize(
    "doc, where",
    [
        ({"rules": [{"category": "gemm", "pattern": "("}]}, r"\$\.rules\[0\]\.pattern is not a valid regular"),
        ({"rules": [{"category": "gemm", "patern": "x"}]}, r"\$\.rules\[0\] has unknown key\(s\) patern"),
        ({"rules": [{"category": "nope", "pattern": "x"}]}, r"\$\.rules\[0\]\.category 'nope' is not declared"),
        ({"rules": [{"category": "gemm"}]}, r"\$\.rules\[0\] states no condition"),
        ({"rules": [{"category": "gemm", "kind": "cpu_op"}]}, r"\$\.rules\[0\]\.kind must be among"),
        ({"rules": [{"category": "gemm", "copy_kind": ["PtoP", "XtoY"]}]}, r"\$\.rules\[0\]\.copy_kind must be among"),
        ({"rules": [{"category": "gemm", "comm_class": 3}]}, r"\$\.rules\[0\]\.comm_class must be a string"),
        ({"categories": {"x": {"familly": "gemm"}}}, r"\$\.categories\.x has unknown key\(s\) familly"),
        ({"categories": {"x": {"family": "gemm", "layer_role": "boss"}}}, r"\$\.categories\.x\.layer_role must be"),
        ({"rules": {"category": "gemm"}}, r"\$\.rules must be a list"),
        ([1, 2], r"\$ must be a JSON object"),
    ],
)
def test_malformed_files_name_the_file_and_the_json_path(tmp_path, doc, where):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(DataFileError, match=str(f).replace("\\", "\\\\") + ": " + where):
        load_categories(f)


def test_unreadable_and_non_json_files(tmp_path):
    with pytest.raises(InputError, match="cannot read the categories file"):
        load_categories(tmp_path / "missing.json")
    f = tmp_path / "x.json"
    f.write_text("{not json")
    with pytest.raises(DataFileError, match="not JSON"):
        load_categories(f)


def test_every_shipped_rule_names_a_declared_category_and_every_family_is_named():
    rules = load_categories()
    assert OTHER in rules.categories and rules.order[-1] == OTHER
    for r in rules.rules:
        assert r.category in rules.categories, r.where
    assert all(info.family for info in rules.categories.values())


# --------------------------------------------------------------------------------------------------
# coverage on every real trace and every synthetic fixture
# --------------------------------------------------------------------------------------------------


def _corpus_files() -> list[Path]:
    out: list[Path] = []
    for d in CORPUS_DIRS:
        if d.is_dir():
            out += sorted(d.rglob("*.json.gz"))
    return out


def _coverage_params():
    params = [pytest.param(p, id=f"synthetic/{p.name}") for p in sorted(SYN.glob("*.trace.json.gz"))]
    corpus = _corpus_files()
    if not corpus:
        params.append(pytest.param(None, id="corpus", marks=pytest.mark.skip(reason=NO_CORPUS)))
    params += [pytest.param(p, id=p.relative_to(CORPUS).as_posix()) for p in corpus]
    return params


@pytest.mark.parametrize("path", _coverage_params())
def test_coverage_at_least_95_pct_of_kernel_time(path):
    ev = tracekit.load(path, cache=False).events
    c = coverage(ev)
    where = path.relative_to(CORPUS).as_posix() if CORPUS in path.parents else path.name
    print(f"category coverage {c['pct']:6.2f} % of {c['kernel_ns'] / 1e6:,.3f} ms kernel time: {where}")
    assert c["pct"] >= TARGET_PCT, f"{where}: {c['pct']:.2f} % categorised; largest 'other': {c['other_names']}"


@pytest.mark.slow
def test_fast_lowercase_matching_equals_ignorecase_matching():
    """The lower-cased fast path of every (?i) rule gives the same answer as the rule itself on every name."""
    names: set[str] = set()
    for p in sorted(SYN.glob("*.trace.json.gz"))[:2] + _corpus_files():
        ev = tracekit.load(p, cache=False).events
        names |= set(map(str, ev.loc[ev["kind"] == "kernel", "name"].unique()))
    names |= {"İstanbul_gemm", "ÄRMSNORM", "x\\Wy"}
    for r in load_categories().rules:
        if r.pattern is None or r.lowered is None:
            continue
        for n in names:
            assert r.search(n, n.lower() if n.isascii() else None) == bool(r.pattern.search(n)), (r.where, n)
