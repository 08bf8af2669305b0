"""PyTorch's CUDA graph kernel annotations (``torch.cuda._annotate_cuda_graph_trace``'s side file) as a replay
source: read, found beside a trace, and joined to replayed kernels by graph node id (docs/replay.md)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from fixtures.synthlib.graph_replay import truth_rows
from tracekit.errors import InputError
from tracekit.ingest.graph_annotations import find_annotations, read_annotations

CASE = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic" / "graph" / "full_nodeid"


def _write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_the_saved_format_is_read_as_pytorchs_post_processor_merges_it(tmp_path):
    p = _write(
        tmp_path / "kernel_annotations_rank0_fwd.json",
        {
            "4294967297": [{"name": "L.model.layers.3.self_attn", "stream": 61}],
            "4294967298": [{"str": "L.model.layers.3.mlp"}],  # legacy key
            "4294967299": ["attention"],  # legacy bare string
            "4294967300": [{"collective": "all_reduce"}],  # no name: no module
        },
    )
    a = read_annotations([p])
    assert a.node.tolist() == [4294967297, 4294967298, 4294967299, 4294967300]
    assert a.name.tolist() == ["model.layers.3.self_attn", "model.layers.3.mlp", "attention", None]
    assert json.loads(a.extra[0]) == {"stream": 61} and a.extra[1] is None
    assert a.lookup(np.array([4294967298, 5, -1, 4294967300])).tolist() == [1, -1, -1, 3]


def test_an_older_releases_pickle_is_read_as_plain_data_only(tmp_path):
    ok = tmp_path / "kernel_annotations_rank0_a.pkl"
    ok.write_bytes(pickle.dumps({7: [{"name": "L.lm_head"}]}))
    assert read_annotations([ok]).name.tolist() == ["lm_head"]
    bad = tmp_path / "kernel_annotations_rank0_b.pkl"
    bad.write_bytes(pickle.dumps({7: [{"name": Path("x")}]}))  # names a class: never run
    with pytest.raises(InputError, match="only plain data"):
        read_annotations([bad])
    with pytest.raises(InputError, match="not a graph node id"):
        read_annotations([_write(tmp_path / "k.json", {"abc": ["x"]})])


def test_the_side_file_is_found_where_pytorch_looks_for_it(tmp_path):
    trace = tmp_path / "traces" / "step_14" / "000001.123.pt.trace.json.gz"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(b"")
    _write(tmp_path / "traces" / "kernel_annotations_rank0_fwd.json", {})
    mine = _write(tmp_path / "traces" / "kernel_annotations_rank1_fwd.json", {})
    assert find_annotations(trace) == [mine]  # the trace's rank, one folder up
    flat = tmp_path / "flat" / "replay.trace.json.gz"
    flat.parent.mkdir()
    flat.write_bytes(b"")
    assert find_annotations(flat) == []
    only = _write(flat.parent / "kernel_annotations_rank0_x.json", {})
    assert find_annotations(flat) == [only]  # no rank in the name: the one rank beside it
    with pytest.raises(InputError, match="no such file"):
        find_annotations(flat, tmp_path / "missing.json")


def _case(tmp_path: Path, captures: bool) -> tuple[Path, list[dict]]:
    """The generator's node-id case, its side file written from the truth (the model's module FQNs), not the trace."""
    shutil.copy(CASE / "replay.trace.json.gz", tmp_path / "replay.trace.json.gz")
    if captures:
        shutil.copytree(CASE / "capture_traces", tmp_path / "capture_traces")
    rows = truth_rows(json.loads((CASE / "replay.replay_truth.json").read_text(encoding="utf-8")))
    ann = {str(r["graph_node_id"]): [{"name": f"L.{r['module']}" if r["module"] else "L"}] for r in rows}
    _write(tmp_path / "kernel_annotations_rank0_decode.json", ann)
    return tmp_path / "replay.trace.json.gz", [r for r in rows if r["kind"] == "kernel"]


def _by_start(result) -> dict[int, dict]:
    return {r["start_ns"]: r for r in result.to_dict()["tables"]["kernels"]}


@pytest.mark.parametrize("captures", [False, True])
def test_every_replayed_kernel_gets_its_module_by_graph_node_id(tmp_path, captures):
    import tracekit

    path, kernels = _case(tmp_path, captures)
    res = tracekit.replay_summary(path, no_cache=True)
    got = _by_start(res)
    assert len(got) == len(kernels) > 0
    for r in kernels:
        k = got[r["start_ns"]]
        assert k["module"] == (r["module"] or "L")
        assert k["attributed_by"] == ("node_id" if captures else "annotation")
        assert (k["op"] == r["op"]) if captures else k["op"] is None
    s = res.summary
    assert s["annotated_kernels"] == len(kernels) and s["annotations_file"] == "kernel_annotations_rank0_decode.json"
    assert s["by_source"]["annotation"] == (0 if captures else len(kernels))


def test_the_module_reaches_kernels_by_module(tmp_path):
    import tracekit

    path, kernels = _case(tmp_path, captures=False)
    res = tracekit.kernel_stats(path, by="module", no_cache=True).to_dict()
    rows = next(iter(res["tables"].values()))
    assert {r["module"] for r in kernels} - {""} <= {r.get("module") for r in rows}
