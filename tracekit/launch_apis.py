"""The host API calls that put work on a GPU: kernel launches (CUDA runtime and driver, HIP runtime and module API),
graph launches and copies, from ``tracekit/data/launch_apis.json`` — the one list that launch health
(:mod:`tracekit.analyses.steps`), kernel linking (:mod:`tracekit.analyses.hardware.linking`: only these records launch a kernel) and graph-replay
attribution (:mod:`tracekit.analyses.hardware.replay_attribution`) read.

A record's name matches an entry when it is the entry or the entry followed by one of the list's suffixes
(``cudaLaunchKernel_ptsz``); copies match by prefix. Matching is per distinct name (a categorical's categories), never
per event.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Iterable

from .errors import DataFileError

if TYPE_CHECKING:
    import numpy as np

SRC = "tracekit/data/launch_apis.json"


@lru_cache(maxsize=1)
def launch_apis() -> dict[str, Any]:
    """``tracekit/data/launch_apis.json``, checked for the lists the matchers read."""
    try:
        doc = json.loads(resources.files("tracekit.data").joinpath("launch_apis.json").read_text(encoding="utf-8"))
        for key in ("kernel", "graph", "copy_prefixes", "suffixes"):
            if not isinstance(doc[key], list) or not all(isinstance(x, str) and x for x in doc[key]):
                raise ValueError(f"$.{key} must be a list of names")
    except (KeyError, TypeError, ValueError) as exc:
        raise DataFileError(f"{SRC} is invalid ({exc}); see docs/steps.md") from exc
    return doc


def _names_pattern(names: Iterable[str], suffixes: Iterable[str]) -> str:
    alts = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    sfx = "|".join(re.escape(s) for s in suffixes)
    return f"(?:{alts})(?:{sfx})?$" if sfx else f"(?:{alts})$"


@lru_cache(maxsize=1)
def kernel_launch_pattern() -> re.Pattern:
    """Matches (``.match``) the name of a call that launches one kernel."""
    d = launch_apis()
    return re.compile(_names_pattern(d["kernel"], d["suffixes"]))


@lru_cache(maxsize=1)
def graph_launch_pattern() -> re.Pattern:
    """Matches (``.match`` or ``.search``: it is anchored) the name of a call that replays a captured graph."""
    d = launch_apis()
    return re.compile("^" + _names_pattern(d["graph"], d["suffixes"]))


@lru_cache(maxsize=1)
def gpu_work_pattern() -> re.Pattern:
    """Matches (``.match``) the name of a call that puts work on the GPU and leaves a GPU record when the trace is
    recorded whole: a kernel launch or a copy (graph launches are checked apart)."""
    d = launch_apis()
    copies = "|".join(re.escape(p) for p in d["copy_prefixes"])
    return re.compile(f"(?:{_names_pattern(d['kernel'], d['suffixes'])})|(?:{copies})")


def is_kernel_launch(name: str) -> bool:
    return bool(kernel_launch_pattern().match(str(name)))


def is_graph_launch(name: str) -> bool:
    return bool(graph_launch_pattern().match(str(name)))


def is_launch(name: str) -> bool:
    """A kernel or a graph launch: a call whose correlation id a kernel may carry."""
    return is_kernel_launch(name) or is_graph_launch(name)


def launch_mask(names) -> "np.ndarray":
    """Per row of a name column (a pandas Series, categorical or not): whether it names a call that puts work on the
    GPU (a kernel or graph launch, a copy: a copy may run as a kernel on ROCm); decided once per distinct name."""
    import numpy as np
    import pandas as pd

    col = names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype("category")
    work = gpu_work_pattern()
    hit = np.array([is_launch(c) or bool(work.match(str(c))) for c in col.cat.categories] + [False], dtype=bool)
    return hit[col.cat.codes.to_numpy()]  # code -1 (no name) reads the trailing False


def graph_launch_names() -> tuple[str, ...]:
    return tuple(launch_apis()["graph"])


__all__ = [
    "gpu_work_pattern",
    "graph_launch_names",
    "graph_launch_pattern",
    "is_graph_launch",
    "is_kernel_launch",
    "is_launch",
    "kernel_launch_pattern",
    "launch_apis",
    "launch_mask",
]
