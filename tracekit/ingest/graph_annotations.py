"""PyTorch's CUDA graph kernel annotations: the side file keyed by graph node id, found beside a trace or given by
path, and read (docs/replay.md).

``torch.cuda.graph(g, enable_annotations=True)`` with ``torch.cuda.graph_annotations.mark_kernels(…)`` scopes (or
Inductor's ``triton.cudagraph_kernel_annotations``, or ``register_fqn_annotation_hooks(model)``) tags each kernel,
memcpy and memset node of a captured graph with an annotation dict; ``get_kernel_annotations()`` maps each node's
``toolsId`` — the ``graph node id`` CUPTI (and Kineto) write on the replayed kernel — to a one-element list of it.
The training loops that record it save it beside the profiler's traces as ``kernel_annotations_rank<R>_<tag>.json``
(``{"<graph node id>": [{"name": "L.model.layers.3.self_attn", …}]}``; PyTorch's own post-processor,
``python -m torch.cuda._annotate_cuda_graph_trace``, finds it one folder above ``<R>.*.pt.trace.json.gz``);
earlier releases pickled the same mapping (``….pkl``). An annotation's ``name`` (a legacy ``str`` key, or a bare
string) names the region: for the FQN annotations the module's fully qualified name, rooted at ``L``.
"""

from __future__ import annotations

import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError

SIDE_GLOB = "kernel_annotations_rank*_*"
SUFFIXES = (".json", ".pkl")
ROOT_PREFIX = "L."  # the root module's name in PyTorch's FQN annotations (Inductor's and the hooks' convention)
_RANK = re.compile(r"^kernel_annotations_rank(\d+)_")
ANNOTATIONS_KEY = "replay_graph_annotations"  # in trace.derived: the side file given (absent: found beside the trace)
REPLAY_DERIVED = ("replay_attribution", "kernel_shapes", "kernel_ops")  # what trace.derived holds that the replay
# sources (captures, eager trace, graph annotations) decide: dropped when they change


@dataclass(frozen=True)
class GraphAnnotations:
    """The annotations of one or more side files: per annotated graph node (``node``, sorted, int64) its region
    name (``name``; the module FQN for FQN annotations, ``L.`` dropped; None where the annotation names none) and
    the annotation's other keys (``extra``, JSON text or None)."""

    paths: tuple[Path, ...]
    node: np.ndarray
    name: np.ndarray
    extra: np.ndarray

    def lookup(self, node_ids: np.ndarray) -> np.ndarray:
        """Per graph node id its index into the annotations (-1: not annotated), vectorised."""
        out = np.full(node_ids.size, -1, dtype=np.int64)
        if not self.node.size or not node_ids.size:
            return out
        k = np.clip(np.searchsorted(self.node, node_ids), 0, self.node.size - 1)
        hit = (self.node[k] == node_ids) & (node_ids >= 0)
        out[hit] = k[hit]
        return out


class _NoGlobals(pickle.Unpickler):
    """A pickle of plain data only (dicts, lists, strings, numbers): a pickle that names any class or function is
    refused, never run."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}, and only plain data is read")


def _raw(path: Path) -> dict:
    try:
        if path.suffix == ".pkl":
            with path.open("rb") as f:
                doc = _NoGlobals(f).load()
        else:
            doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, pickle.UnpicklingError, EOFError) as exc:
        raise InputError(
            f"{path} is not a readable graph kernel annotations file ({exc}); pass the JSON that"
            " torch.cuda.graph_annotations.get_kernel_annotations() was saved to"
        ) from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path} is not a mapping of graph node id to annotations; pass the saved annotations")
    return doc


def _merged(value: Any) -> dict:
    """One node's annotation list merged as PyTorch's post-processor merges it: later entries win, ``str`` is
    ``name``, a bare string is a ``name``."""
    out: dict = {}
    for ann in value if isinstance(value, list) else [value]:
        if isinstance(ann, dict):
            for k, v in ann.items():
                out["name" if k == "str" else str(k)] = v
        elif ann is not None:
            out["name"] = str(ann)
    return out


def region_name(name: Any) -> str | None:
    """An annotation's ``name`` as tracekit shows it: the FQN without its root ``L.`` (None: no name)."""
    if name is None:
        return None
    s = str(name).strip()
    if s.startswith(ROOT_PREFIX):
        s = s[len(ROOT_PREFIX) :]
    return s or None


def read_annotations(paths) -> GraphAnnotations:
    """Read side files (JSON, or a plain-data pickle); the first file wins a node id that two files hold."""
    seen: dict[int, dict] = {}
    ps = tuple(Path(p) for p in paths)
    for p in ps:
        for k, v in _raw(p).items():  # once per annotated graph node of the side file, not per kernel
            try:
                node = int(k)
            except (TypeError, ValueError):
                raise InputError(f"{p}: key {k!r} is not a graph node id; pass the saved annotations") from None
            seen.setdefault(node, _merged(v))
    nodes = np.array(sorted(seen), dtype=np.int64)
    names = np.array([region_name(seen[n].get("name")) for n in nodes.tolist()] + [None], dtype=object)[:-1]
    extra = np.array(
        [
            json.dumps({k: v for k, v in seen[n].items() if k != "name"}, default=str, sort_keys=True)
            if len(seen[n]) > ("name" in seen[n])
            else None
            for n in nodes.tolist()
        ]
        + [None],
        dtype=object,
    )[:-1]
    return GraphAnnotations(ps, nodes, names, extra)


def use_graph_annotations(trace, path=None) -> None:
    """The side file of PyTorch's graph kernel annotations for ``trace`` (the API's ``graph_annotations=``, the
    CLI's ``--graph-annotations``; None: ``kernel_annotations_rank<R>_*.json`` found beside the trace); a missing
    file is refused (exit 3), and what was derived with another is dropped."""
    src = None if path is None else str(path)
    if src is not None:
        find_annotations(None, src)
    if trace.derived.get(ANNOTATIONS_KEY) != src:
        for k in REPLAY_DERIVED:
            trace.derived.pop(k, None)
        if src is None:
            trace.derived.pop(ANNOTATIONS_KEY, None)
        else:
            trace.derived[ANNOTATIONS_KEY] = src


def find_annotations(trace_path, given=None) -> list[Path]:
    """The side files of a trace: ``given`` (a file; ``--graph-annotations``), else ``kernel_annotations_rank<R>_*``
    (``.json``, else ``.pkl``) in the trace's folder or the one above it, ``R`` the rank the trace's file name
    starts with (``000000.<id>.pt.trace.json.gz``); a name without a rank takes the files of the one rank there."""
    if given is not None:
        p = Path(given)
        if not p.is_file():
            raise InputError(f"--graph-annotations {p}: no such file; pass the saved graph kernel annotations JSON")
        return [p]
    if trace_path is None:
        return []
    base = Path(trace_path)
    if base.is_dir():
        folders = (base,)
        lead = None
    else:
        folders = (base.parent, base.parent.parent)
        m = re.match(r"^(\d+)", base.name)
        lead = int(m.group(1)) if m else None
    for folder in folders:
        if not folder.is_dir():
            continue
        by_rank: dict[int, list[Path]] = {}
        for q in sorted(folder.glob(SIDE_GLOB)):
            r = _RANK.match(q.name)
            if r and q.suffix in SUFFIXES and q.is_file():
                by_rank.setdefault(int(r.group(1)), []).append(q)
        if lead is not None:
            got = by_rank.get(lead, [])
        else:
            got = next(iter(by_rank.values())) if len(by_rank) == 1 else []
        json_first = [q for q in got if q.suffix == ".json"] or got
        if json_first:
            return json_first
    return []


__all__ = [
    "ANNOTATIONS_KEY",
    "GraphAnnotations",
    "REPLAY_DERIVED",
    "ROOT_PREFIX",
    "find_annotations",
    "read_annotations",
    "region_name",
    "use_graph_annotations",
]
