"""Where the time goes: what a trace holds, per-kernel statistics, the wall-clock decomposition (A2), the one-step table and the step timeline.

Modules: decompose, info, kernels, onestep, overlap, timeline."""
