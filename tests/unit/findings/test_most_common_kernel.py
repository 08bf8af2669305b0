"""`findings --compare`'s two op tables (ops by name, `op_compare.op_table`; ops by work, `work_match.work_table`) take
each op's kernel and launch configuration from one function, `work_match.most_common_kernel` (they once built the
same table twice)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analyses.findings import op_compare, work_match
from tracekit.analyses.findings.work_match import LAUNCH, most_common_kernel
from tracekit.analyses.steps.resolve import find_steps
from tests.conftest import gemm_trace


def _kernels(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["op", "kernel", "category", "grid_x"])
    for c in LAUNCH[1:]:
        df[c] = 1
    return df


def test_the_most_common_kernel_and_launch_of_each_op():
    k = _kernels(
        [
            ("mm", "gemm_a", "gemm", 128),
            ("mm", "gemm_b", "gemm", 64),
            ("mm", "gemm_b", "gemm", 64),
            ("add", "add_x", "elementwise", np.nan),  # an unknown launch is a configuration too, not dropped
            ("add", "add_y", "elementwise", 8),  # a tie: the first in table order
        ]
    )
    got = most_common_kernel(k)
    assert sorted(got.index) == ["add", "mm"]
    assert list(got.columns) == ["kernel", "category", *LAUNCH]
    assert got.loc["mm", "kernel"] == "gemm_b" and got.loc["mm", "grid_x"] == 64
    assert got.loc["add", "kernel"] == "add_x" and np.isnan(got.loc["add", "grid_x"])


@pytest.mark.slow
def test_both_op_tables_take_it(tmp_path, monkeypatch):
    trace = gemm_trace(tmp_path)
    steps = find_steps(trace)
    called = []

    def spy(kernels):
        called.append(len(kernels))
        return most_common_kernel(kernels)

    monkeypatch.setattr(op_compare, "most_common_kernel", spy)
    monkeypatch.setattr(work_match, "most_common_kernel", spy)
    by_name = op_compare.op_table(trace, None, steps, use_tags=False)
    by_work = work_match.work_table(trace, steps)
    assert len(called) == 2 and all(called)
    assert by_name.loc["gemm_kernel", "kernel"] == "gemm_kernel"
    assert "gemm_kernel" in set(by_work["kernel"])


@pytest.mark.slow
def test_work_keys_of_a_step_without_attention(tmp_path):
    """Kernels with no op in a step with no attention kernel are numbered across the whole step (the layer count
    was NaN there, and `findings --compare` across vendors stopped with a ValueError)."""
    trace = gemm_trace(tmp_path)
    keys = work_match.work_table(trace, find_steps(trace)).index.tolist()
    assert "other · position 0" in keys and "other · position 1" in keys
