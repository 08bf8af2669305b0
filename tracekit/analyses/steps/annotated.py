"""The steps of a trace with an annotation's block columns: the one way every room runs the block engine
(:func:`tracekit.annotation.annotate`) over the steps it resolved."""
from __future__ import annotations

from ...annotation import Annotation, annotate, required_annotation
from ...trace import Trace
from .resolve import Steps, get_steps


def annotated_steps(trace: Trace, ann: Annotation | str, *, steps=None, step_name: str | None = None,
                    min_step_ns: int | None = None, phase: str | None = None, step_source: str | None = None,
                    steps_file=None, what: str = "blocks", keep: bool = True) -> tuple[Steps, Annotated]:
    """The steps (given, or from the annotation's step options and the overrides), then the block columns.
    ``ann``: an Annotation, or a name or path (:func:`tracekit.annotation.as_annotation`). ``keep``: keep the block
    columns on the trace for the next caller (:func:`tracekit.annotation.annotate`)."""
    ann = required_annotation(ann, what)
    st = get_steps(trace, steps, ann=ann, step_name=step_name, min_step_ns=min_step_ns, phase=phase,
                   source=step_source, steps_file=steps_file)
    a = annotate(trace, ann, st.table, keep=keep)
    a.warnings[:0] = [w for w in st.warnings if w not in a.warnings]
    return st, a


def annotated(trace: Trace, ann: Annotation | str, *, steps=None, step_name: str | None = None,
              min_step_ns: int | None = None, phase: str | None = None, step_source: str | None = None,
              steps_file=None):
    """The events with the block columns (see :func:`annotated_steps`)."""
    return annotated_steps(trace, ann, steps=steps, step_name=step_name, min_step_ns=min_step_ns, phase=phase,
                           step_source=step_source, steps_file=steps_file, what="annotated")[1]
