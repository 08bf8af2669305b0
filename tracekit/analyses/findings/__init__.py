"""Findings: what to change, ranked by what it gains per step, of one trace, two deployments, a launch log and the ranks of a run.

Modules: compare, memory, of_trace, ranks, rules."""
