"""Against the hardware: shapes from the trace, roofline (A9), HBM bytes and wave quantization (A10).

Modules: hbm, roofline, shapes, waves."""
