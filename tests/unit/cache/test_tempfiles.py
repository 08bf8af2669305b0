"""The one way tracekit writes a file whole (tracekit.cache.tempfiles): a temporary file renamed into place, removed
when the write fails; temporaries a killed writer left are recognised by name and first bytes, removed once stale."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tracekit.cache import tempfiles
from tracekit.cache.tempfiles import (
    OUTPUT_TMP_NAME,
    STALE_TMP_S,
    is_temporary_of,
    remove_stale_temporaries,
    replaced,
    temp_path,
    write_synced,
)

NAME = re.compile(r"^\.tmp-tracekit-\d+-[a-z0-9_]{8}\.x$")


def test_replaced_renames_the_written_file_over_the_target(tmp_path):
    target = tmp_path / "entry.x"
    target.write_bytes(b"old")
    with replaced(target, ".x") as tmp:
        assert NAME.match(Path(tmp).name) and Path(tmp).parent == tmp_path
        Path(tmp).write_bytes(b"new")
        assert target.read_bytes() == b"old"  # a reader sees the old file until the rename
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.x"]


def test_replaced_removes_the_temporary_file_when_the_write_fails(tmp_path):
    target = tmp_path / "entry.x"
    with pytest.raises(OSError):
        with replaced(target, ".x") as tmp:
            Path(tmp).write_bytes(b"half")
            raise OSError(28, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_a_writers_temporaries_are_recognised_by_name_and_first_bytes(tmp_path):
    ours, empty, foreign = tmp_path / ".tmp-tracekit-1-abcdefgh.x", tmp_path / ".tmp-tracekit-2-abcdefgh.x", None
    ours.write_bytes(b"MAGIC and more")
    empty.write_bytes(b"")
    foreign = tmp_path / ".tmp-tracekit-3-abcdefgh.x"
    foreign.write_bytes(b"someone else's")
    other_name = tmp_path / ".tmp-notes.txt"
    other_name.write_bytes(b"MAGIC")
    link = tmp_path / ".tmp-tracekit-4-abcdefgh.x"
    link.symlink_to(ours)
    seen = {p.name: is_temporary_of(p, os.lstat(p), NAME, (b"MAGIC",)) for p in tmp_path.iterdir()}
    assert seen == {ours.name: True, empty.name: True, foreign.name: False, other_name.name: False, link.name: False}
    os.utime(ours, (1, 1))  # stale: a writer killed long ago
    assert remove_stale_temporaries(tmp_path, lambda p, st: is_temporary_of(p, st, NAME, (b"MAGIC",))) == 1
    assert not ours.exists() and empty.exists()  # the fresh one may be a write in progress
    assert tempfiles.is_stale(os.lstat(foreign)) is False and STALE_TMP_S == 600


def test_output_temporaries_are_hidden_beside_their_target_and_named_for_it(tmp_path):
    target = tmp_path / "report.html"
    tmp = temp_path(target)
    m = OUTPUT_TMP_NAME.match(tmp.name)
    assert tmp.parent == tmp_path and m and m["name"] == "report.html" and int(m["pid"]) == os.getpid()
    write_synced(tmp, lambda fh: fh.write(b"<html>"))
    assert tmp.read_bytes() == b"<html>"
    with pytest.raises(FileExistsError):  # never an existing file
        write_synced(tmp, lambda fh: fh.write(b"again"))
