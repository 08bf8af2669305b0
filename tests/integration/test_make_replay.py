"""The replay benchmark's writer (benchmarks/make_replay.py, issue 38): one tile is the graph generator's own
replay event for event, and the tiled trace is attributed in full from the captures written beside it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def make_replay_mod():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import make_replay

        yield make_replay
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.slow
def test_one_tile_is_the_generators_replay_and_tiles_attribute_in_full(tmp_path, make_replay_mod):
    from fixtures.synthlib.graph_replay import build_case
    from fixtures.synthlib.kineto import trace_text

    import tracekit

    kw = dict(mode="PIECEWISE", layers=3, bs=16, captures=(8, 16), block_steps=2)
    info = make_replay_mod.make_replay(tmp_path / "one", mb=0.0001, gz_level=0, **kw)
    assert info["steps"] == 2
    got = json.loads((tmp_path / "one" / "replay.trace.json").read_text())
    replay, _, _, _ = build_case(mode="PIECEWISE", layers=3, bs=16, steps=2, captures=(8, 16))
    assert got["traceEvents"] == json.loads(trace_text(replay))["traceEvents"]

    info = make_replay_mod.make_replay(tmp_path / "many", mb=0.5, gz_level=1, **kw)
    assert info["bytes"] >= 500_000 and info["steps"] > 2
    s = tracekit.replay(tracekit.load(tmp_path / "many" / "replay.trace.json.gz", cache=False)).summary
    assert s["replayed_kernels"] == info["replayed_kernels"]
    assert s["attributed_kernels"] == s["replayed_kernels"] and s["replays"] == info["graph_launches"]
