"""Annotation: model knowledge (annotation files) turned into step, block, type and tag columns."""

from .blocks import Annotated, annotate
from .spec import Annotation, as_annotation, load_annotation, required_annotation, shipped

__all__ = ["Annotated", "Annotation", "annotate", "as_annotation", "load_annotation", "required_annotation", "shipped"]
