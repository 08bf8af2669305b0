"""The cache: what tracekit keeps in ``$TRACEKIT_CACHE_DIR`` (default ``~/.cache/tracekit``) so that a second run
costs less than the first, and the one way tracekit writes a file whole.

* :mod:`.keys`: which entries are a source file's, and the key that says whether one is current;
* :mod:`.trace_entries`: a trace's normalised events table (Arrow IPC), read by every load of that file;
* :mod:`.result_entries`: a command's whole Result (``report``, ``findings``), reused for the same inputs;
* :mod:`.reuse_key`: that Result's key (the trace, options, annotation, files and tracekit's code);
* :mod:`.admin`: ``tracekit cache info|clear``;
* :mod:`.tempfiles`: a temporary file renamed into place, and the removal of those a killed writer left (the cache's
  entries and every output file use it).

The package imports only the core (``schema``, ``trace``, ``result``, ``errors``): ``ingest`` loads through it and
the CLI keys its Results with it, never the other way round.
"""
