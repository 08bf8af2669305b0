"""Every rank of a run (issue 28): which files are which rank (:mod:`.discover`), each rank reduced to small
tables in a worker (:mod:`.mapper`), global steps and clock offsets (:mod:`.align`), who waits for whom
(:mod:`.attribute`), and the public function (:mod:`.api`). docs/multirank.md says how."""
from __future__ import annotations

from .api import multirank_imbalance

__all__ = ["multirank_imbalance"]
