"""Shipped annotation files (installed as the package ``tracekit.annotations``); see docs/annotations.md."""
