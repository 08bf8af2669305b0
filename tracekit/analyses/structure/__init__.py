"""The structure of a step: annotation blocks (A3, A4), automatic layers, annotation fit and suggest.

Modules: blocks, fit, layers, suggest."""
