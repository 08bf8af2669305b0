"""`tracekit info`: devices are counted (gpus_used) apart from their ids (devices_used), and unnamed devices are
null with a warning rather than blank (issue 25)."""

from __future__ import annotations

import tracekit
from tracekit.analyses import trace_info
from tests.conftest import kernel, write_trace


def test_unnamed_devices_and_a_high_device_index(tmp_path):
    path = write_trace(
        tmp_path / "t.json",
        [kernel("k", 1.0, 2.0, device=9)],
        deviceProperties=[{"id": i, "name": ""} for i in range(4)],
    )
    res = trace_info(tracekit.load(path, cache=False))
    s = res.summary
    assert s["devices"] == [None] * 4 and s["device_names_missing"] == 4
    assert s["gpus_used"] == 1 and s["devices_used"] == [9]
    assert any("4 of the 4 devices in deviceProperties have no name" in w for w in res.warnings)


def test_named_devices_give_no_warning(tmp_path):
    path = write_trace(
        tmp_path / "t.json", [kernel("k", 1.0, 2.0)], deviceProperties=[{"id": 0, "name": "NVIDIA H100"}]
    )
    res = trace_info(tracekit.load(path, cache=False))
    assert res.summary["devices"] == ["NVIDIA H100"] and res.summary["device_names_missing"] == 0
    assert not any("have no name" in w for w in res.warnings)
