"""Annotation: model knowledge (annotation files) turned into step, block, type and tag columns."""

from .blocks import AnnotatedEvents, annotate
from .spec import Annotation, as_annotation, load_annotation, required_annotation, shipped

__all__ = [
    "AnnotatedEvents",
    "Annotation",
    "annotate",
    "as_annotation",
    "load_annotation",
    "required_annotation",
    "shipped",
]
