"""Every regex a user hands tracekit runs time-bounded: `kernels --match`, a `--categories` file's rules and a
`--patterns` file for launch logs were compiled with `re` and would run for ever on a pattern like `(a+)+$`.
tracekit's own patterns stay on `re` (they are tested linear in tests/reliability/test_analysis_preconditions.py)."""

from __future__ import annotations

import json
import time

from tests.conftest import gpu_ann, kernel, write_trace

EVIL = "(a+)+$"
NAME = "a" * 5000 + "!"  # `re` backtracks for ever on this; the regex package gives up after its budget


def _trace(tmp_path):
    evs = [gpu_ann("scheduler.run_batch", 0.0, 20_000.0), kernel(NAME, 10.0, 5.0), kernel("gemm_k", 20.0, 5.0)]
    return write_trace(tmp_path / "t.json", evs)


def _bounded(cli, args, want):
    t0 = time.perf_counter()
    code, out, err = cli(*args)
    assert code == want and out == "" and "backtracks" in err, (args, code, err)
    assert time.perf_counter() - t0 < 10
    assert err.count("\n") == 1 and "Traceback" not in err  # one sentence
    return err


def test_kernels_match_is_bounded(tmp_path, cli):
    err = _bounded(cli, ("kernels", _trace(tmp_path), "--match", EVIL), 2)
    assert "--match" in err


def test_kernels_match_still_selects_and_refuses_bad_syntax(tmp_path, cli):
    path = _trace(tmp_path)
    code, out, _ = cli("kernels", path, "--match", "gemm", "-f", "json")
    assert code == 0
    names = [r["name"] for r in json.loads(out)["tables"]["kernels"]]
    assert names == ["gemm_k"]
    code, out, err = cli("kernels", path, "--match", "(")
    assert code == 2 and out == "" and "not a valid regular expression" in err


def test_a_users_category_rule_is_bounded(tmp_path, cli):
    cats = tmp_path / "cats.json"
    cats.write_text(json.dumps({"rules": [{"category": "gemm", "pattern": EVIL}]}))
    err = _bounded(cli, ("kernels", _trace(tmp_path), "--categories", cats), 3)
    assert str(cats) in err and "$.rules[0].pattern" in err


def test_a_users_category_rule_still_categorises(tmp_path, cli):
    """The bounded path gives the categories the `re` path gave (IGNORECASE and ASCII kept)."""
    from tracekit.analyses.categories import load_categories

    cats = tmp_path / "cats.json"
    cats.write_text(
        json.dumps(
            {"categories": {"mine": {"family": "compute"}}, "rules": [{"category": "mine", "pattern": "(?i)GEMM_K$"}]}
        )
    )
    rules = load_categories(cats)
    assert type(rules.rules[0].pattern).__name__ == "BoundedPattern"
    code, out, _ = cli("kernels", _trace(tmp_path), "--categories", cats, "-f", "json", "--no-cache")
    assert code == 0
    rows = {r["name"]: r["category"] for r in json.loads(out)["tables"]["kernels"]}
    assert rows["gemm_k"] == "mine" and rows[NAME] != "mine"


def _pattern_set(regex: str, example: str) -> dict:
    return {
        "name": "mine",
        "description": "a user's set",
        "priority": 5,
        "patterns": [{"id": "x", "kind": "custom_line", "contains": "zz", "regex": regex, "example": example}],
    }


def test_a_users_log_pattern_is_bounded(tmp_path, cli):
    pats = tmp_path / "mine.json"
    pats.write_text(json.dumps(_pattern_set(EVIL, "zzaaa")))
    log = tmp_path / "server.log"
    log.write_text("[2026-01-01 00:00:00] Init torch distributed begin.\n[2026-01-01 00:00:01] zz" + NAME + "\n")
    err = _bounded(cli, ("log", log, "--patterns", pats), 3)
    assert str(pats) in err


def test_a_users_log_pattern_still_reads_its_lines(tmp_path):
    from tracekit.ingest.sglang_log import read_log

    pats = tmp_path / "mine.json"
    pats.write_text(json.dumps(_pattern_set(r"zz (?P<n>\d+) widgets", "zz 12 widgets")))
    log = tmp_path / "server.log"
    log.write_text("[2026-01-01 00:00:00] zz 7 widgets\n")
    recs = [r for r in read_log(log, patterns=[pats]).records if r.kind == "custom_line"]
    assert [r.fields["n"] for r in recs] == [7]
