"""The structure of a step: annotation blocks (A3, A4), automatic layers, annotation fit and suggest.

Modules: blocks, fit, layers (with layer_context, layer_align, layer_assembly, layer_table, layer_choice,
layer_names, layer_windows: the automatic layers by job), suggest."""
