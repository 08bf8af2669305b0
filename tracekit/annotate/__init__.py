"""Annotation: model knowledge (annotation files) turned into step, block, type and tag columns."""
from .blocks import Annotated, annotate
from .spec import Annotation, load_annotation, shipped

__all__ = ["Annotated", "Annotation", "annotate", "load_annotation", "shipped"]
