"""Findings: what to change, ranked by what it gains per step, of one trace, two deployments, a launch log and the ranks of a run.

Modules: trace_findings (one trace: the sources of step_sources, kernel_sources and memory over one context),
op_compare (the same op in two traces), imbalance_findings (a run's ranks), rules (words, thresholds, ranking)."""
