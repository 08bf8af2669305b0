"""The cache trusts nothing it should not (issue 20): a same-size, same-mtime replacement misses; a file that
changed while it was read is not cached."""
from __future__ import annotations

import os

import tracekit
from tracekit.ingest import cache as _cache
from tests.conftest import kernel, write_trace


def _trace(tmp_path, name, dur):
    evs = [{"ph": "X", "cat": "gpu_user_annotation", "name": "scheduler.run_batch", "pid": 0, "tid": 7, "ts": 0.0,
            "dur": 20_000.0}, kernel("k", 10.0, dur)]
    return write_trace(tmp_path / name, evs)


def test_a_replacement_of_the_same_size_and_mtime_misses(tmp_path):
    """`wall` said 10 ms busy when the file held 15 ms (the file was replaced with cp -p)."""
    p = _trace(tmp_path, "t.json", 10_000.0)
    first = tracekit.load(p)
    assert tracekit.decompose(first).tables["per_step"]["busy_ns"].tolist() == [10_000_000]
    st = os.stat(p)
    other = _trace(tmp_path, "u.json", 15_000.0)
    assert other.stat().st_size == st.st_size  # same length: only the content differs
    os.replace(other, p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = tracekit.load(p)
    assert again.report.from_cache is False
    assert tracekit.decompose(again).tables["per_step"]["busy_ns"].tolist() == [15_000_000]
    assert tracekit.load(p).report.from_cache is True


def test_a_file_that_changed_while_it_was_read_is_not_cached(tmp_path):
    p = _trace(tmp_path, "t.json", 10_000.0)
    before = _cache.key(p)
    trace = tracekit.load(p, cache=False)
    with open(p, "a") as fh:
        fh.write("\n")  # the writer was still appending
    assert _cache.write(p, trace, before=before) is None
    assert _cache.read(p) is None
    assert _cache.write(p, trace, before=_cache.key(p)) is not None
