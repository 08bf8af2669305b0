"""A Perfetto protobuf trace (rocprofv3 --output-format pftrace) is refused with its own sentence, by name or by
content, and a JSON file that merely starts with a newline is not taken for one."""

import os

import pytest

from tracekit.errors import InputError
from tracekit.ingest import load

# a Trace message: packet (field 1, length-delimited) holding a TracePacket with a timestamp (field 8, varint)
PACKET = bytes([0x0A, 0x03, 0x40, 0x96, 0x01])


@pytest.mark.parametrize("name", ["run.pftrace", "results.perfetto-trace", "no_suffix"])
def test_perfetto_is_named_and_refused(tmp_path, name):
    p = tmp_path / name
    p.write_bytes(PACKET * 20)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(InputError) as exc:
        load(p, cache=False)
    msg = str(exc.value)
    assert "Perfetto protobuf trace" in msg and "--output-format json" in msg and str(p) in msg and "\n" not in msg
    assert sorted(os.listdir(tmp_path)) == before and p.read_bytes() == PACKET * 20


def test_json_starting_with_a_newline_is_still_json(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(
        '\n{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}]}'
    )
    assert len(load(p, cache=False).events) == 1
