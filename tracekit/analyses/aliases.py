"""One option under two keywords: the CLI's name (what a notebook user types) and an older API name kept for callers.

Only where the two names mean the same thing in the same unit; ``min_step_ns`` (API, ns) against ``--min-step-ms``
(CLI, ms) is not an alias but a deliberate unit."""

from __future__ import annotations

from ..errors import UsageError


def one_of(value, alias, name: str, alias_name: str):
    """``value`` (the CLI's name) or ``alias`` (the older name); both given and different is a usage error."""
    if alias is None:
        return value
    if value is None or _same(value, alias):
        return alias
    raise UsageError(f"{name}= and {alias_name}= are the same option; pass one of them")


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False
