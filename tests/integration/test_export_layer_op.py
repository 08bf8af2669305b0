"""`export`: kernels carry `category`, `layer`, `op_tag` and `op` where known; an empty blocks.parquet says why in
its own metadata (issue 39)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tracekit
from tracekit.exporters.parquet import export_parquet

SYN = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic"
pytestmark = pytest.mark.slow  # an export of a synthetic deployment, twice


def test_kernels_layer_and_op_tag_with_an_annotation(tmp_path):
    t = tracekit.load(SYN / "dp16_bs4.trace.json.gz")
    export_parquet(t, "k3_dp16", tmp_path / "a")
    k = pq.read_table(tmp_path / "a" / "kernels.parquet").to_pandas()
    ev = pq.read_table(tmp_path / "a" / "events.parquet").to_pandas().set_index("event_id")
    assert {"category", "layer", "op_tag", "op"} <= set(k.columns)
    # a kernel's layer and op tag are its annotated event's, row for row
    same = ev.iloc[k["row"].to_numpy()]
    assert (k["layer"].fillna(-1).to_numpy() == same["layer"].fillna(-1).to_numpy()).all()
    assert k["layer"].notna().mean() > 0.9 and k["op_tag"].notna().any()
    assert b"tracekit.empty_because" not in (pq.read_schema(tmp_path / "a" / "blocks.parquet").metadata or {})


def test_blocks_without_an_annotation_say_why(tmp_path):
    t = tracekit.load(SYN / "dp16_bs4.trace.json.gz")
    export_parquet(t, None, tmp_path / "b")
    why = pq.read_schema(tmp_path / "b" / "blocks.parquet").metadata[b"tracekit.empty_because"].decode()
    assert why.startswith("no annotation: ")
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["empty_because"] == {"blocks": why}
    k = pq.read_table(tmp_path / "b" / "kernels.parquet").to_pandas()
    assert k["layer"].isna().all() and k["op_tag"].isna().all()  # unknown: null, never 0
    assert k["category"].notna().all()
