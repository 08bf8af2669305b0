"""Options as objects: the AllGather options that several analyses share, in one frozen value.

A public analysis takes ``steps=`` (a ``StepOptions`` or the ``Steps`` themselves, analyses/steps/model.py),
``ag=`` (an :class:`AllGatherOptions`) and ``hw=`` (a hardware profile or its name). An ``AllGatherOptions`` holds
what the user asked for; the annotation's ``allgather`` section fills what it leaves unset
(:meth:`AllGatherOptions.with_annotation`, the one place they merge; ``allgather_options`` in analyses/comm is that
merge as keywords).

:func:`~tracekit.analyses.steps.keywords.options_as_objects` turns the CLI's spellings into these objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from ..annotation.spec import as_annotation
from ..errors import UsageError

__all__ = ["AllGatherOptions", "parse_sizes"]


def parse_sizes(items: Iterable[str] | Mapping[str, int] | None) -> dict[str, int]:
    """``["KDA=627048448", ...]`` (the CLI's ``--ag-size``) or a dict → {"KDA": 627048448}; a bad item is a usage
    error."""
    if isinstance(items, Mapping):
        items = [f"{k}={v}" for k, v in items.items()]
    elif isinstance(items, str):
        items = [items]
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, value = str(item).partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            out[name.strip()] = int(str(value).replace("_", ""))
        except ValueError:
            raise UsageError(f"--ag-size {item!r} is not TYPE=BYTES (e.g. KDA=627048448)") from None
        if out[name.strip()] <= 0:
            raise UsageError(f"--ag-size {item!r}: the full size of an AllGather is a positive number of bytes")
    return out


@dataclass(frozen=True)
class AllGatherOptions:
    """How the weight AllGathers are cut and typed (hashable, so that a segmentation is computed once per trace and
    options). Unset fields come from the annotation.

    ``group_size``: ranks in one AllGather (G); None: the annotation's, else inferred from the copies.
    ``sizes``: AllGather type → full bytes (a dict or ``TYPE=BYTES`` items), added to the annotation's; kept in the
    order given, which is part of the value: a size within the tolerance of two entries takes the first one's type
    (analyses/comm/segments.py), and the results' ``params.sizes`` list them in that order.
    ``local_copy``: the local-copy kernel pattern (a regular expression, run time-bounded); None: the annotation's,
    else the shipped one.
    """

    group_size: int | None = None
    sizes: tuple[tuple[str, int], ...] = ()
    local_copy: str | None = None

    def __post_init__(self):
        if self.group_size is not None:
            try:
                g = int(self.group_size)
            except (TypeError, ValueError):
                raise UsageError(f"group_size= must be a whole number of ranks, not {self.group_size!r}") from None
            if g != self.group_size or g < 2:
                raise UsageError(f"group_size= must be a whole number of ranks, 2 or more, not {self.group_size!r}")
            object.__setattr__(self, "group_size", g)
        sizes = self.sizes
        if isinstance(sizes, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in sizes):
            sizes = dict(sizes)
        object.__setattr__(self, "sizes", tuple(parse_sizes(sizes).items()))  # in the order given: it breaks ties
        if self.local_copy is not None and not isinstance(self.local_copy, str):
            raise UsageError(f"local_copy= is a regular expression (a string), not {type(self.local_copy).__name__}")

    @classmethod
    def of(cls, ag) -> "AllGatherOptions":
        """``ag=`` as an analysis takes it: None (the annotation's, else the defaults) or an AllGatherOptions; anything
        else is one sentence (``ag="ptop"`` is ``tracekit wall``'s and the exports' other ``ag=``)."""
        if ag is None:
            return cls()
        if isinstance(ag, cls):
            return ag
        raise UsageError(
            f"ag= takes an AllGatherOptions (group_size, sizes, local_copy) or None, not {ag!r}; "
            "ag='ptop' / 'ptop+local' (which copies count) belongs to wall and the exports"
        )

    @property
    def size_map(self) -> dict[str, int]:
        """``sizes`` as a dict."""
        return dict(self.sizes)

    def with_annotation(self, ann=None) -> "AllGatherOptions":
        """These options over the annotation's ``allgather`` section: the one place they merge. What is set here
        wins; ``sizes`` are added to the annotation's (the same type here replaces its size). ``ann``: an
        Annotation, a name or a path, or None."""
        spec = getattr(as_annotation(ann), "allgather", None)
        if spec is None:
            return self
        return AllGatherOptions(
            group_size=self.group_size if self.group_size is not None else spec.group_size,
            sizes={**spec.sizes, **self.size_map},
            local_copy=self.local_copy or spec.local_copy,
        )

    def as_keywords(self) -> dict:
        """The keywords the segmentation takes (and the result's parameters record)."""
        return {"group_size": self.group_size, "sizes": self.size_map, "local_copy_pattern": self.local_copy}
