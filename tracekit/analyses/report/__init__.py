"""The report: one trace's step end to end in one result, with the ranks of a run when given.

Modules: trace_report (one trace end to end), ranks_part (the ranks part of `report RUN_DIR`)."""
