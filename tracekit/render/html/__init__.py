"""A result as HTML: the self-contained page of ``-f html`` and the display of a notebook (``page``), each part of
them drawn by one module of this package (``page``'s docstring lists them)."""

from .page import notebook_html, sections, to_html

__all__ = ["notebook_html", "sections", "to_html"]
