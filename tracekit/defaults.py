"""Default values that an analysis and the command line's option help both need, importable without pandas or
numpy (``tracekit --help`` shows them; the analyses re-export them where they are used)."""

from __future__ import annotations

# waves calc: the split rules for a grid from --batch/--qlen, and the largest KV split considered
SPLIT_RULES = ("mla-simplified", "wave-aware")
MAX_SPLIT = 32
# bench/compare: the study's convention: 5 tokens verified per request per step, 3.5 accepted
DEFAULT_ACCEPT_LEN = 3.5
# analyze: how a sweep point's directory or file name gives its batch size and context length
DEFAULT_POINT_PATTERN = r"bs(?P<bs>\d+)(?:_(?P<ctx>\d+[kKmM]?))?"
