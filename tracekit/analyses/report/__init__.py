"""The report: one trace's step end to end in one result, with the ranks of a run when given.

Modules: of_trace, ranks."""
