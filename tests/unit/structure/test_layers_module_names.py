"""Layer types named by the module class their layers are instances of, where the kernels' module paths are known
(type_names.module_type_names; docs/layers.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import numpy as np

from tracekit.analyses.structure.layers.type_names import layer_module, module_type_names

TOP = "Qwen3ForCausalLM_0/Qwen3Model_0"


def test_a_layer_lies_in_the_deepest_instance_holding_most_of_its_kernels():
    attn, mlp = f"{TOP}/Qwen3DecoderLayer_3/Qwen3Attention_3", f"{TOP}/Qwen3DecoderLayer_3/Qwen3MLP_3"
    # a layer's kernels: attention holds about half, the MLP the rest: the layer is the decoder layer, not its attention
    assert layer_module([attn] * 6 + [mlp] * 5 + [None]) == ("Qwen3DecoderLayer", 3)
    # a kernel the boundary shifted from the next layer (1 of 6 known) does not change it
    assert layer_module([attn] * 3 + [mlp] * 2 + [None, f"{TOP}/Qwen3RMSNorm_7"]) == ("Qwen3DecoderLayer", 3)
    assert layer_module([None, ""]) is None
    assert layer_module(["a_0/b_1", "a_0/c_2"]) == ("a", 0)  # only the container holds a majority


def _ctx(paths_per_layer: list[list]):
    """A context whose one sequence holds the layers end to end (rows = positions), and the type -> layers map."""
    flat = [p for lay in paths_per_layer for p in lay]
    seq = SimpleNamespace(rows=np.arange(len(flat)))
    lays, lo = [], 0
    for lay in paths_per_layer:
        lays.append((seq, SimpleNamespace(lo=lo, hi=lo + len(lay))))
        lo += len(lay)
    return SimpleNamespace(modules=np.array(flat + [None], dtype=object)[:-1]), lays


def test_types_take_their_class_only_where_every_layer_agrees():
    layer = lambda i: [f"{TOP}/Qwen3DecoderLayer_{i}/Qwen3Attention_{i}", f"{TOP}/Qwen3DecoderLayer_{i}/Qwen3MLP_{i}"]
    ctx, lays = _ctx([layer(0), layer(1), layer(2)])
    assert module_type_names(ctx, {1: lays}, {1: "attn+mlp"}) == {1: "Qwen3DecoderLayer"}
    assert module_type_names(SimpleNamespace(modules=None), {1: lays}, {1: "attn+mlp"}) == {1: "attn+mlp"}
    # one layer without a module: today's name
    ctx2, lays2 = _ctx([layer(0), [None, None]])
    assert module_type_names(ctx2, {1: lays2}, {1: "attn+mlp"}) == {1: "attn+mlp"}
    # every layer in the same instance (a container, not a layer module): today's name
    ctx3, lays3 = _ctx([[f"{TOP}/X_0"], [f"{TOP}/X_0"]])
    assert module_type_names(ctx3, {1: lays3}, {1: "attn"}) == {1: "attn"}
    # two types of one class (dense and MoE layers of one class): both keep today's names
    ctx4, lays4 = _ctx([layer(0), layer(1), layer(2), layer(3)])
    got = module_type_names(ctx4, {1: lays4[:2], 2: lays4[2:]}, {1: "attn+mlp", 2: "attn+moe"})
    assert got == {1: "attn+mlp", 2: "attn+moe"}
    assert module_type_names(ctx, {1: lays}, {1: "draft:attn+mlp"}) == {1: "draft:Qwen3DecoderLayer"}


@pytest.mark.slow
def test_layers_of_a_replayed_decode_are_named_by_their_module_class(tmp_path):
    """The generator's graph-replayed decode (8 layers, its bs-16 capture beside it): the automatic layers' type takes
    the decoder layer's class from the module paths the capture attributes to the replayed kernels; without the
    capture, today's name."""
    import shutil
    import sys
    from pathlib import Path

    import tracekit

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from fixtures.synthlib.graph_replay import write_case

    paths, _ = write_case(tmp_path / "run", layers=8, steps=3, captures=(16,), bs=16)
    named = tracekit.layers(tracekit.load(paths[0], cache=False)).tables["layers"]["layer_type"]
    assert set(named) == {"LlamaDecoderLayer"} and len(named) == 24
    shutil.rmtree(tmp_path / "run" / "capture_traces")
    plain = tracekit.layers(tracekit.load(paths[0], cache=False)).tables["layers"]["layer_type"]
    assert "LlamaDecoderLayer" not in set(plain) and len(plain) == 24
