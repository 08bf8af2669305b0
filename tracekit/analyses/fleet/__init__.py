"""Many traces: a sweep's tables, two deployments compared (A13), rank maps (A14), the ranks of one run and the per-batch-size plot data.

Modules: compare, plot_data, ranks, sweep, multirank."""
