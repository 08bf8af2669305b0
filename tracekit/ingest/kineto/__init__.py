"""Kineto / Chrome-trace JSON → raw columns (:class:`~.columns.RawColumns`).

Two ways in, one way out, each job in its own module:

* ``stream.py`` — the streaming path (the fast one): blocks of decompressed text cut into pieces of whole
  events at the separator between top-level events; ``pieces.py`` decodes one piece in place,
  ``helper.py`` is the forked process that decodes pieces too (on two cores), and ``plain_file.py`` cuts
  an uncompressed file where it lies.
* ``document.py`` — the whole-document path (the fallback, and for salvage): the full text split into
  raw event slices, decoded in chunks.

Either way each chunk is decoded by msgspec into the fixed schema of ``schema.py`` (only the fields
tracekit uses) and turned into numpy columns by ``columns.py``, one C-level pass per field.
"""
