"""Unknown is not zero (issue 39): every command's JSON, on the parity test's fixtures (one case per command) and on
the corpus's AMD traces, walked for a 0 that meant "unknown":

* a summary ``total_X`` of 0 whose table column ``X`` has no known value (a sum of nothing shown as 0 — findings'
  ``total_gain_gib`` without a log was);
* a table row with no model (its ``model``/``source``/``family``/``rule`` all null, or a row named "no model") whose
  figures (bytes, FLOPs, MBU, MFU, gains, time at peak) are 0 rather than null (hbm's ``0.000 GB`` was);
* an hbm row ``unknown`` in a step (its tags or AllGathers matched nothing) given as 0 bytes.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from test_parity import _cases, data  # noqa: F401  (data: the parity test's fixture traces, a pytest fixture)

import tracekit
from tests.conftest import CORPUS
from tracekit.registry import COMMANDS
from tracekit.result import to_json_obj

pytestmark = pytest.mark.slow  # every command on the fixtures: the slow tier

FIGURES = ("bytes", "flops", "mbu", "mfu", "gain_ms_per_step", "gain_gib", "time_at_peak_ns", "achieved_tbps")
MODEL_KEYS = ("model", "source", "family")


def _zero(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) and v == 0


def unknown_zeros(doc: dict) -> list[str]:
    """Where ``doc`` (a command's JSON) gives 0 for a figure it has no basis for."""
    bad = []
    tables = doc.get("tables") or {}
    summary = doc.get("summary") or {}
    for key, v in summary.items():
        if not (key.startswith("total_") and _zero(v)):
            continue
        col = key[len("total_") :]
        cols = [[r.get(c) for r in rows] for rows in tables.values() for c in (rows[0] if rows else {}) if c == col]
        if cols and all(x is None for vals in cols for x in vals):
            bad.append(f"summary.{key} is 0 but no row of tables.*.{col} is known")
    for name, rows in tables.items():
        for i, r in enumerate(rows):
            no_model = [k for k in MODEL_KEYS if k in r] and all(r[k] is None for k in MODEL_KEYS if k in r)
            no_model = no_model or "no model" in str(r.get("row", ""))
            if no_model:
                bad += [f"tables.{name}[{i}].{f} is 0 with no model" for f in FIGURES if _zero(r.get(f))]
    return bad


def test_walker_catches_the_old_zeros():
    assert unknown_zeros({"summary": {"total_gain_gib": 0.0}, "tables": {"findings": [{"gain_gib": None}]}})
    row = {"row": "ops with no model (3 kernels)", "bytes": 0, "time_at_peak_ns": 0}
    assert len(unknown_zeros({"summary": {}, "tables": {"per_row": [row]}})) == 2
    ok = {"summary": {"total_gain_gib": 0.0}, "tables": {"findings": [{"gain_gib": 0.0}]}}
    assert unknown_zeros(ok) == []  # a real 0 (a known gain of 0) stays


def test_every_command_on_the_fixtures(data):  # noqa: F811
    seen, bad = set(), []
    for command, _args, api in _cases(data):
        seen.add(command)
        bad += [f"{command}: {b}" for b in unknown_zeros(to_json_obj(api()))]
    assert not bad, "\n".join(bad)
    writers = {"export", "annotate", "cache info", "cache clear"} | {c for c in COMMANDS if c.startswith("plot ")}
    assert seen >= set(COMMANDS) - writers  # every command that prints figures walked (the rest write files)


TL = CORPUS / "tracelens" / "tests" / "traces"
AMD = [
    TL / "inference" / "sglang_decode" / "sglang_Qwen3-8B_decode.json.gz",
    TL / "inference" / "vllm_decode_full" / "graph_execution.json.gz",
    TL / "torch_compile_triton" / "trace.json.gz",
]


@pytest.mark.skipif(not all(p.exists() for p in AMD), reason="the TraceLens AMD traces are not in ../shared/corpus")
def test_amd_corpus_traces():
    bad = []
    for p in AMD:
        t = tracekit.load(p)
        for name, run in (
            ("findings", lambda: tracekit.findings(t)),
            ("roofline", lambda: tracekit.roofline(t)),
            ("hbm", lambda: tracekit.hbm(t)),
        ):
            try:
                doc = to_json_obj(run())
            except tracekit.TracekitError:
                continue  # the command refuses this trace (e.g. hbm without shapes): nothing printed as 0
            bad += [f"{p.name} {name}: {b}" for b in unknown_zeros(doc)]
    assert not bad, "\n".join(bad)
    f = to_json_obj(tracekit.findings(tracekit.load(AMD[0])))
    assert f["summary"]["total_gain_gib"] is None  # no log: no memory finding, so no GiB total (was 0.000 GiB)


def test_hbm_row_that_matches_nothing_is_null():
    from pathlib import Path

    syn = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic"
    # k3_dp16's rows on the DP2×DCP8 deployment: a row whose tags are absent there is unknown, not 0
    r = tracekit.hbm(
        tracekit.load(syn / "dp2dcp8_bs64.trace.json.gz"), "k3_dp16", "b200", bs=64, variables={"context": 100000}
    )
    per_step = r.tables["per_step"]
    assert not (pd.to_numeric(per_step["bytes"], errors="coerce") == 0).any()
    assert r.summary["rows_unknown"] == int(r.tables["per_row"]["bytes"].isna().sum())
