"""Many traces: a sweep's tables, two deployments compared (A13), rank maps (A14), the ranks of one run and the per-batch-size plot data.

Modules: sweep_tables (one deployment's sweep), deployment_compare (two deployments' sweeps side by side),
rank_map (`tracekit ranks`), plot_data, multirank (the ranks of one run)."""
