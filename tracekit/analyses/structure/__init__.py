"""The structure of a step: annotation blocks (A3, A4), automatic layers, annotation fit and suggest.

Modules: blocks, fit, suggest, and the package layers (the automatic layers: one public entry, its ``__init__``;
the algorithm's steps as its modules)."""
