"""The what-if rules and settings (tracekit/analyses/memory/whatif_rules.py): ``--set`` and ``--dim`` parsed into
typed, range-checked values under their canonical names, each refusal one sentence, and a rule's formula evaluated."""

from __future__ import annotations

import pytest

from tracekit.analyses.memory.ledger_engine import OptionError
from tracekit.analyses.memory.whatif_rules import eval_rule, load_rules, parse_dims, parse_settings


def test_a_setting_is_found_by_any_spelling_and_keeps_how_it_was_given():
    new, given = parse_settings(["--mem-fraction-static=0.85", "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=120"])
    assert new == {"mem_fraction_static": 0.85, "deepep_max_dispatch_tokens": 120}
    assert given == {
        "mem_fraction_static": "--mem-fraction-static",
        "deepep_max_dispatch_tokens": "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK",
    }
    assert type(new["deepep_max_dispatch_tokens"]) is int


@pytest.mark.parametrize("value", ["[8, 4, 4, 16]", "8,4 16", [16, 4, 8]])
def test_a_list_of_batch_sizes_is_sorted_and_each_size_kept_once(value):
    new, _ = parse_settings({"cuda_graph_bs": value})
    assert new == {"cuda_graph_bs": [4, 8, 16]}


@pytest.mark.parametrize(
    "settings, words",
    [
        (["tp_size=8"], "cannot model this parameter; it can model max_running_requests"),
        (["max_running_requests"], "--set takes NAME=VALUE"),
        ([], "give at least one --set NAME=VALUE"),
        (["max_running_requests=8", "--max-running-requests=9"], "is given twice"),
        (["max_running_requests=8.5"], "the value must be an integer"),
        (["max_running_requests=0"], "must be at least 1"),
        (["deepep_max_dispatch_tokens=2048"], "must be at most 1024"),
        (["mem_fraction_static=1"], "must lie strictly between 0 and 1"),
        (["mem_fraction_static=nan"], "the value must be a number"),
        (["cuda_graph_bs=[]"], "a list of batch sizes"),
    ],
)
def test_a_setting_the_replay_cannot_take_is_one_sentence(settings, words):
    with pytest.raises(OptionError, match=words.replace("[", r"\[")):
        parse_settings(settings)


def test_model_dimensions_are_positive_integers_under_their_names():
    assert parse_dims(["hidden_size=7168", "--num-experts=448"]) == {"hidden_size": 7168, "num_experts": 448}
    assert parse_dims(None) == {}
    with pytest.raises(OptionError, match="unknown model dimension"):
        parse_dims(["layers=3"])
    with pytest.raises(OptionError, match="must be a positive integer"):
        parse_dims({"hidden_size": "0"})
    with pytest.raises(OptionError, match="must be a positive integer"):
        parse_dims({"hidden_size": "7k"})


def test_a_rule_formula_is_evaluated_over_its_values():
    assert (
        eval_rule(
            {"formula": "gib / slots_before * slots_after"},
            "formula",
            {"gib": 3, "slots_before": 4, "slots_after": 8},
            "$.pools[0]",
        )
        == 6.0
    )
    # every rule the replay reads carries the fields it is evaluated by
    rules = load_rules()
    assert {"pools", "deepep", "cuda_graph", "mem_fraction_static", "req_to_token", "draft_tokens"} <= set(rules)
