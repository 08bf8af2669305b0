"""Generic knowledge shipped with the package (kernel classes, later log patterns and hardware), and the default
values that an analysis and the command line's option help both need (importable without pandas or numpy:
``tracekit --help`` shows them; the analyses re-export them where they are used)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from ..errors import DataFileError


# waves calc: the split rules for a grid from --batch/--qlen, and the largest KV split considered
SPLIT_RULES = ("mla-simplified", "wave-aware")
MAX_SPLIT = 32
# bench/compare: the study's convention: 5 tokens verified per request per step, 3.5 accepted
DEFAULT_ACCEPT_LEN = 3.5
# analyze: how a sweep point's directory or file name gives its batch size and context length
DEFAULT_POINT_PATTERN = r"bs(?P<bs>\d+)(?:_(?P<ctx>\d+[kKmM]?))?"


@dataclass(frozen=True)
class Classes:
    """Compiled form of ``data/classes.json``."""

    kinds_by_cat: dict[str, str]
    copy_kinds: tuple[tuple[str, re.Pattern], ...]
    comm_classes: tuple[tuple[str, re.Pattern], ...]
    nccl_collective: re.Pattern
    nccl_algo: re.Pattern
    nccl_protocol: re.Pattern
    ag_local_copy: re.Pattern
    moe_phases: dict
    # per non-NCCL comm class: (collective name, pattern) tried in order, and the algorithm's pattern (group 1)
    comm_details: dict = field(default_factory=dict)

    def kind_for_cat(self, cat: str) -> str:
        return self.kinds_by_cat.get(cat, self.kinds_by_cat.get(cat.lower(), "other"))

    def copy_kind_for(self, name: str) -> str | None:
        for kind, pat in self.copy_kinds:
            if pat.search(name):
                return kind
        return None

    def comm_for(self, name: str) -> tuple[str | None, str | None, str | None, str | None]:
        """(comm_class, collective, algo, protocol) of a kernel name; Nones when not communication."""
        for cls, pat in self.comm_classes:
            if pat.search(name):
                if cls != "nccl":
                    named, algo_rx = self.comm_details.get(cls, ((), None))
                    coll = next((c for c, rx in named if rx.search(name)), None)
                    algo = algo_rx.search(name) if algo_rx is not None else None
                    return cls, coll, algo.group(1).lower().replace("_", "") if algo else None, None
                coll = self.nccl_collective.search(name)
                algo = self.nccl_algo.search(name)
                proto = self.nccl_protocol.search(name)
                return (
                    cls,
                    coll.group(1) if coll else None,
                    algo.group(1) if algo else None,
                    proto.group(1) if proto else None,
                )
        return None, None, None, None


def _compile(source: str, where: str, pattern: Any) -> re.Pattern:
    if not isinstance(pattern, str):
        raise DataFileError(f"{source}: {where} must be a regular expression string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise DataFileError(f"{source}: {where} is not a valid regular expression ({exc})") from exc


def parse_classes(doc: Any, source: str) -> Classes:
    """Validate and compile a classes document; errors name the file and the JSON path."""
    if not isinstance(doc, dict):
        raise DataFileError(f"{source}: the top level must be a JSON object")
    kinds = doc.get("kinds_by_cat")
    if not isinstance(kinds, dict) or not all(isinstance(v, str) for v in kinds.values()):
        raise DataFileError(f"{source}: $.kinds_by_cat must map category names to kind names")
    copies = tuple(
        (r.get("kind"), _compile(source, f"$.copy_kinds[{i}].pattern", r.get("pattern")))
        for i, r in enumerate(doc.get("copy_kinds", []))
    )
    comms = tuple(
        (r.get("class"), _compile(source, f"$.comm_classes[{i}].pattern", r.get("pattern")))
        for i, r in enumerate(doc.get("comm_classes", []))
    )
    details = {}
    for i, r in enumerate(doc.get("comm_classes", [])):
        where = f"$.comm_classes[{i}]"
        named = tuple(
            (str(c.get("collective")), _compile(source, f"{where}.collectives[{j}].pattern", c.get("pattern")))
            for j, c in enumerate(r.get("collectives", []))
        )
        algo = _compile(source, f"{where}.algo", r["algo"]) if "algo" in r else None
        if named or algo is not None:
            details[r.get("class")] = (named, algo)
    nccl = doc.get("nccl_name", {})
    return Classes(
        kinds_by_cat=dict(kinds),
        copy_kinds=copies,
        comm_classes=comms,
        nccl_collective=_compile(source, "$.nccl_name.collective", nccl.get("collective")),
        nccl_algo=_compile(source, "$.nccl_name.algo", nccl.get("algo")),
        nccl_protocol=_compile(source, "$.nccl_name.protocol", nccl.get("protocol")),
        ag_local_copy=_compile(source, "$.ag_local_copy.pattern", doc.get("ag_local_copy", {}).get("pattern")),
        moe_phases={
            k: _compile(source, f"$.moe_phases.{k}", doc.get("moe_phases", {}).get(k)).pattern
            for k in ("dispatch", "combine")
        },
        comm_details=details,
    )


@lru_cache(maxsize=1)
def load_classes() -> Classes:
    text = resources.files(__package__).joinpath("classes.json").read_text(encoding="utf-8")
    return parse_classes(json.loads(text), "tracekit/data/classes.json")


@lru_cache(maxsize=1)
def _record_hints() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("record_hints.json").read_text(encoding="utf-8"))


def record_hint(meta: dict[str, Any], need: str) -> str:
    """What records ``need`` (``ops``, ``shapes``, ``launches``, ``gpu``; ``devices``: where the file describes its
    GPUs) with the profiler that wrote a trace (its meta's ``profiler``; ``data/record_hints.json``), as a phrase:
    "record_shapes=True", "nsys profile --trace=cuda,nvtx with …", "rocprofv3 --hip-trace"."""
    p = meta.get("profiler")
    name = p.get("name") if isinstance(p, dict) else p
    hints = _record_hints()
    words = hints.get(name if isinstance(name, str) else "kineto")
    words = words if isinstance(words, dict) else hints["kineto"]
    return str(words.get(need, hints["kineto"][need]))


def inputs_read() -> str:
    """The inputs tracekit reads, as one phrase for the sentence that refuses a file of another kind
    (``data/record_hints.json`` ``inputs``)."""
    return str(_record_hints()["inputs"])
