"""The steps of a trace with an annotation's block columns: the one way every room runs the block engine
(:func:`tracekit.annotation.annotate`) over the steps it resolved."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...annotation import Annotation, annotate, required_annotation
from ...trace import Trace
from .keywords import options_as_objects
from .resolve import Steps, get_steps

if TYPE_CHECKING:
    from ...annotation.blocks import Annotated


@options_as_objects
def annotated_steps(
    trace: Trace, ann: Annotation | str, *, steps=None, what: str = "blocks", keep: bool = True
) -> tuple[Steps, Annotated]:
    """The steps (``steps``: StepOptions, Steps or a table; None: the annotation's step options), then the block
    columns.
    ``ann``: an Annotation, or a name or path (:func:`tracekit.annotation.as_annotation`). ``keep``: keep the block
    columns on the trace for the next caller (:func:`tracekit.annotation.annotate`)."""
    ann = required_annotation(ann, what)
    st = get_steps(trace, steps, ann=ann)
    a = annotate(trace, ann, st.table, keep=keep)
    a.warnings[:0] = [w for w in st.warnings if w not in a.warnings]
    return st, a


@options_as_objects
def annotated(trace: Trace, ann: Annotation | str, *, steps=None):
    """The events with the block columns (see :func:`annotated_steps`)."""
    return annotated_steps(trace, ann, steps=steps, what="annotated")[1]
