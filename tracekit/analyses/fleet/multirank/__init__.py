"""Every rank of a run (issue 28): which files are which rank (:mod:`.discover`), each rank reduced to small
tables in a worker (:mod:`.mapper`), global steps and clock offsets (:mod:`.align`), who waits for whom
(:mod:`.attribute`), and the analysis of the reduced tables (:mod:`.api`; ``tracekit.fan_out.imbalance`` maps the files); a run found once, :mod:`.run` (``tracekit.load_run``). docs/multirank.md says how."""

from __future__ import annotations

from .api import RunPlan, imbalance_of_run, plan_run, reduce_point, reference_files
from .run import Run, load_run

__all__ = ["Run", "RunPlan", "imbalance_of_run", "load_run", "plan_run", "reduce_point", "reference_files"]
