"""PyTorch's ``emit_nvtx`` op ranges → ops and their recorded input sizes (docs/events-schema.md, "Nsight Systems
SQLite", "NVTX op ranges").

Under ``torch.autograd.profiler.emit_nvtx()`` every op pushes an NVTX range whose text PyTorch writes in
``getNvtxStr`` (torch/csrc/profiler/util.cpp): the op's name, then ``, seq = N`` (its autograd sequence number, where
it has one), ``, op_id = N`` (its RecordFunction handle), and with ``record_shapes=True`` ``, sizes = [[4, 5], [5,
6]]`` (one list per input; ``[]`` for an input that is not a tensor, tensor lists flattened) and ``, input_op_ids =
[(32,0), (33,0)]``. The pattern is data (``tracekit/data/nsys.json``, ``emit_nvtx_op``). A range is an op range when
its text has a ``seq`` part, or an ``op_id`` part and a name in an operator namespace (``emit_nvtx_op_names``:
``aten::``, ``c10d::``, …). A ``record_function`` scope gets an ``op_id`` too and no ``seq`` (``FSDP::pre_forward,
op_id = 7``, ``ProfilerStep#3, op_id = 9``, sglang's step markers): the text cannot say more, so a range with an
``op_id`` whose name is in no operator namespace is a user range (a *scope*), named without its ``op_id`` part, as
Kineto's ``user_annotation``. Its dtypes are not in the text: they stay unknown (``null``), never
guessed.

:func:`parse_op_texts` parses a list of distinct texts in one Arrow regex pass (with the pattern the reader gives) (each text once, however many ranges
carry it); :func:`shapes_key` makes a text's sizes the ``shapes`` key the Kineto reader makes of a cpu_op's ``Input
Dims`` / ``Input type`` / ``Concrete Inputs`` (NUL-joined JSON texts; here dims only).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NUL = b"\0"


@dataclass
class OpTexts:
    """Per text given to :func:`parse_op_texts` (same order): whether it is an op range, whether it is a
    record_function scope (an ``op_id`` but no operator name), ``seq`` and ``op_id`` (-1: absent), and as Arrow string
    arrays (no Python string per text) the op's or scope's name (the text itself where it is neither) and the
    ``sizes`` part as written (null: absent)."""

    is_op: np.ndarray
    is_scope: np.ndarray
    seq: np.ndarray
    op_id: np.ndarray
    op: pa.Array
    sizes: pa.Array


def parse_op_texts(texts: list[str] | pa.Array, pattern: str, op_names: str) -> OpTexts:
    """The emit_nvtx parts of each of ``texts`` (distinct texts, parsed once each, in one vectorised regex pass) by
    ``pattern`` (nsys.json's ``emit_nvtx_op``: the groups op, seq, op_id, sizes); ``op_names`` (``emit_nvtx_op_names``)
    the operator namespaces that make a range with an ``op_id`` and no ``seq`` an op."""
    arr = texts if isinstance(texts, pa.Array) else pa.array(texts, type=pa.string())
    got = pc.extract_regex(arr, pattern)
    seq = _ints(got.field("seq"))
    op_id = _ints(got.field("op_id"))
    matched = got.is_valid().to_numpy(zero_copy_only=False)
    named_op = pc.fill_null(pc.match_substring_regex(got.field("op"), op_names), False).to_numpy(zero_copy_only=False)
    is_op = matched & ((seq >= 0) | ((op_id >= 0) & named_op))
    is_scope = matched & (op_id >= 0) & ~is_op
    mask = pa.array(is_op)
    sizes = got.field("sizes")
    sizes = pc.if_else(pc.and_(mask, pc.not_equal(sizes, "")), sizes, pa.nulls(len(arr), pa.string()))
    return OpTexts(is_op, is_scope, seq, op_id, pc.if_else(pa.array(is_op | is_scope), got.field("op"), arr), sizes)


def _ints(col: pa.Array) -> np.ndarray:
    """A regex group of digits (null where absent or the text did not match) as int64, -1 where null."""
    col = pc.if_else(pc.equal(col, ""), pa.nulls(len(col), pa.string()), col)
    return pc.cast(col, pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def shapes_key(sizes: str | None) -> bytes | None:
    """An op range's ``sizes`` part as the events table's ``shapes`` key: its dims as JSON, the input types and
    concrete inputs absent (``[[[4,5],[5,6]],null,null]`` once made text); None unless it is a list of int lists."""
    if not sizes:
        return None
    try:
        dims = msgspec.json.decode(sizes)
    except msgspec.DecodeError:
        return None
    ok = isinstance(dims, list) and all(
        isinstance(d, list) and all(type(x) is int for x in d) for d in dims
    )  # a flattened tensor list is several entries, so never a list deeper than two
    return msgspec.json.encode(dims) + NUL + NUL if ok else None


__all__ = ["OpTexts", "parse_op_texts", "shapes_key"]
