"""alignment.edit_floor with a budget (issue 30) answers ``> budget + 1e-6`` as without one, and stays a lower
bound of the floor it shortcuts (the callers in assembly ask only that question)."""

from __future__ import annotations

import random

from tracekit.analyses.structure.layers.alignment import edit_budget, edit_floor


def test_edit_floor_with_a_budget_decides_alike():
    rng = random.Random(30)
    seen_short = 0
    for _ in range(3000):
        a = tuple(rng.randrange(6) for _ in range(rng.randrange(0, 40)))
        b = tuple(rng.randrange(6) for _ in range(rng.randrange(0, 40)))
        for budget in (edit_budget(len(a)), edit_budget(len(b)), 0.5, 3.0, 100.0):
            full, quick = edit_floor(a, b), edit_floor(a, b, budget)
            assert quick <= full
            assert (quick > budget + 1e-6) == (full > budget + 1e-6), (a, b, budget)
            seen_short += quick < full
    assert seen_short  # the shortcut was taken
