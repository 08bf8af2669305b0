"""Annotation files: the model- and deployment-specific knowledge, as data (docs/annotations.md).

An annotation is JSON, loaded into msgspec structs. A bad file fails with its path and the JSON path
of the bad field. Files are found by path, or by name (or alias) among the shipped annotations
(``annotations/`` in a checkout; ``tracekit/annotations`` once installed).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal, Optional, Union

import msgspec

from ..errors import DataFileError, InputError, MissingDataError, named_or_loaded
from ..errors import check_argument
from .rulematch import literal_of


class StepSpec(msgspec.Struct, forbid_unknown_fields=True):
    name: Optional[str] = None  # annotation name marking a step; None = the default markers
    min_ms: float = 0.0  # a filter: steps not longer than this are left out (empty markers go by content)


class TypeRule(msgspec.Struct, forbid_unknown_fields=True):
    """A block matches when it holds a kernel (of any stream) whose name matches ``contains`` and whose launch grid
    matches ``grid``, and the block's time in those kernels passes ``duration`` / ``min_us`` / ``max_us``;
    ``parity`` then keeps every other one of the step's blocks that match all that (docs/annotations.md)."""

    type: str
    contains: str  # regex: the block holds a kernel whose name matches
    grid: Optional[list[Optional[int]]] = None  # [x, y, z] of that kernel's launch grid; null = any
    # within each step, the matching blocks' time in those kernels splits into a short and a long cluster at the
    # largest gap, if that gap is clear: at least gap_ratio times the wider cluster's range (max - min)
    duration: Optional[Literal["short", "long"]] = None
    gap_ratio: float = 3.0
    min_us: Optional[float] = None  # the block's time in those kernels is at least this ...
    max_us: Optional[float] = None  # ... and at most this
    parity: Optional[Literal["even", "odd"]] = None  # 0-based index among the step's blocks matching the rest


class Position(msgspec.Struct, forbid_unknown_fields=True):
    first: Optional[str] = None  # type of a step's first block (e.g. head)
    last: Optional[str] = None  # type of a step's last block (e.g. tail)
    default: Optional[str] = None  # type of untyped blocks between them


class BoundaryRule(msgspec.Struct, forbid_unknown_fields=True):
    pattern: str
    # a match counts only when the main-stream kernel right before it in the step matches this (a tail's norm,
    # told from every layer's same norm by what precedes it)
    after: Optional[str] = None
    skip: int = 0  # ignore the first `skip` matches of each step (e.g. an embedding kernel also used in the head)
    first_of_run: bool = False  # only a match whose previous main-stream kernel does not match starts a block
    # no block starts here when a main-stream kernel matching this ran since this rule's previous match in
    # the step (a layer whose two halves both start with the same norm kernel, told apart by what ran) ...
    unless_after: Optional[str] = None
    # ... or when the running block was opened by a main-stream kernel matching this and the rule has not
    # matched since (an embedding that opens a layer whose norm comes right after)
    unless_block_starts_with: Optional[str] = None


class BlockSpec(msgspec.Struct, forbid_unknown_fields=True):
    # a main-stream kernel matching one of these starts a block (a regex, or a rule with conditions)
    boundary: list[Union[str, BoundaryRule]]
    types: list[TypeRule] = []
    position: Position = msgspec.field(default_factory=Position)
    expect: dict[str, int] = {}  # blocks per step by type


class TagRule(msgspec.Struct, forbid_unknown_fields=True):
    tag: str
    pattern: str
    block_type: Optional[str] = None
    ordinal: Optional[int] = None  # the n-th match (1-based) within the block; None = every match


class AllGatherSpec(msgspec.Struct, forbid_unknown_fields=True):
    local_copy: Optional[str] = None
    group_size: Optional[int] = None
    sizes: dict[str, int] = {}


class OpShape(msgspec.Struct, forbid_unknown_fields=True):
    m: Union[str, int]
    n: int
    k: int
    dtype: str = "fp8"
    out_dtype: str = "bf16"
    w_dtype: Optional[str] = None  # the weight's dtype when it differs from the activation's (e.g. fp4 weights)
    note: str = ""
    # a grouped (routed-expert) GEMM: m tokens, each routed to top_k of `experts` experts, of which this rank holds
    # `local_experts`; every expert that receives a row reads its whole weight (docs/roofline.md)
    experts: Union[str, int, None] = None
    local_experts: Union[str, int, None] = None
    top_k: Union[str, int, None] = None


class OpTraffic(msgspec.Struct, forbid_unknown_fields=True):
    """Bytes (and optionally FLOPs) of one kernel of an op tag, as formulas (docs/roofline.md): for state
    kernels, e.g. read + write of requests x heads x state bytes. Names: bs, q_len, the annotation's
    ``constants`` and ``--var`` values."""

    bytes: Union[str, int]
    flops: Union[str, int, None] = None
    dtype: str = "fp32"  # the math's dtype, for MFU
    note: str = ""


class HbmRow(msgspec.Struct, forbid_unknown_fields=True):
    """One row of the per-GPU per-step HBM table (`tracekit hbm`); exactly one of bytes, tags, allgather."""

    name: str
    bytes: Union[str, int, None] = None  # a formula, once per step
    tags: list[str] = []  # per step: each kernel of these tags counts its op bytes (op_shapes / op_traffic) ...
    mbu: Optional[float] = None  # ... or, given an MBU, its time x MBU x the HBM peak
    allgather: Optional[list[str]] = None  # per step: full bytes of the AllGathers of these types ([] = all)
    note: str = ""


class CtasPerSmRule(msgspec.Struct, forbid_unknown_fields=True):
    pattern: str  # regex on the kernel name
    ctas_per_sm: int  # CTAs of this kernel resident on one SM at once (default 1)


class CommRule(msgspec.Struct, forbid_unknown_fields=True, rename={"class_": "class"}):
    class_: str
    pattern: str


class Annotation(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    description: str = ""
    aliases: list[str] = []
    step: StepSpec = msgspec.field(default_factory=StepSpec)
    main_stream: Union[int, str] = "auto"
    blocks: Optional[BlockSpec] = None
    op_tags: list[TagRule] = []
    allgather: AllGatherSpec = msgspec.field(default_factory=AllGatherSpec)
    op_shapes: dict[str, OpShape] = {}
    comm_patterns: list[CommRule] = []
    constants: dict[str, float] = {}  # names usable in op_traffic / op_shapes / hbm formulas
    op_traffic: dict[str, OpTraffic] = {}
    hbm: list[HbmRow] = []
    ctas_per_sm: list[CtasPerSmRule] = []  # first match wins; kernels matching none run 1 CTA per SM
    source: str = ""  # where it was loaded from (set by the loader)

    @property
    def ref(self) -> str:
        """What ``-a`` takes to load this annotation again, for a result's parameters: a shipped one by its name,
        any other by the path it was loaded from (a user's edited copy is not the shipped one that shares its name);
        one built in memory by its name."""
        if not self.source:
            return self.name
        known = shipped().get(self.name)
        try:
            same = known is not None and known.resolve() == Path(self.source).resolve()
        except OSError:
            same = False
        return self.name if same else self.source


_DECODER = msgspec.json.Decoder(Annotation)


def _validate_regexes(ann: Annotation, src: str) -> None:
    checks: list[tuple[str, str]] = []
    if ann.blocks is not None:
        if not ann.blocks.boundary:
            raise DataFileError(f"{src}: $.blocks.boundary must list at least one regular expression")
        checks += [
            (
                f"$.blocks.boundary[{i}]" + ("" if isinstance(p, str) else ".pattern"),
                p if isinstance(p, str) else p.pattern,
            )
            for i, p in enumerate(ann.blocks.boundary)
        ]
        for i, p in enumerate(ann.blocks.boundary):
            if isinstance(p, str):
                continue
            checks += [
                (f"$.blocks.boundary[{i}].{k}", getattr(p, k))
                for k in ("after", "unless_after", "unless_block_starts_with")
                if getattr(p, k)
            ]
            if p.skip < 0:
                raise DataFileError(f"{src}: $.blocks.boundary[{i}].skip must be 0 or more")
        checks += [(f"$.blocks.types[{i}].contains", r.contains) for i, r in enumerate(ann.blocks.types)]
        for i, r in enumerate(ann.blocks.types):
            _validate_type_rule(r, f"{src}: $.blocks.types[{i}]")
    checks += [(f"$.op_tags[{i}].pattern", r.pattern) for i, r in enumerate(ann.op_tags)]
    checks += [(f"$.comm_patterns[{i}].pattern", r.pattern) for i, r in enumerate(ann.comm_patterns)]
    if ann.allgather.local_copy:
        checks.append(("$.allgather.local_copy", ann.allgather.local_copy))
    for where, pattern in checks:
        if literal_of(pattern) is not None:  # a literal is a valid pattern (op tags: maybe 100,000 of them)
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            raise DataFileError(f"{src}: {where} is not a valid regular expression ({exc})") from exc
    for i, r in enumerate(ann.op_tags):
        if r.ordinal is not None and r.ordinal < 1:
            raise DataFileError(f"{src}: $.op_tags[{i}].ordinal must be 1 or more (the n-th match in the block)")
    if isinstance(ann.main_stream, str) and ann.main_stream != "auto":
        raise DataFileError(f'{src}: $.main_stream must be "auto" or a stream number')
    if ann.allgather.group_size is not None and ann.allgather.group_size < 2:
        raise DataFileError(f"{src}: $.allgather.group_size must be at least 2")
    for name, size in ann.allgather.sizes.items():
        if not str(name).strip() or "=" in str(name) or size <= 0:
            raise DataFileError(
                f"{src}: $.allgather.sizes.{name} must name a type (no '=') and give its full size as"
                f" a positive number of bytes, not {size!r}"
            )


def _validate_type_rule(r: TypeRule, where: str) -> None:
    if r.grid is not None and len(r.grid) != 3:
        raise DataFileError(f"{where}.grid must be [x, y, z] (3 numbers, null for any), not {len(r.grid)} value(s)")
    if not r.gap_ratio > 0:
        raise DataFileError(f"{where}.gap_ratio must be more than 0")
    for k in ("min_us", "max_us"):
        v = getattr(r, k)
        if v is not None and not v >= 0:
            raise DataFileError(f"{where}.{k} must be 0 or more")
    if r.min_us is not None and r.max_us is not None and r.min_us > r.max_us:
        raise DataFileError(f"{where}: min_us ({r.min_us}) is more than max_us ({r.max_us}), so no block can match")


def _without_docs(obj):
    """``_doc`` and ``_doc_*`` keys are comments (``tracekit suggest`` writes them): dropped at any depth."""
    if isinstance(obj, dict):
        return {k: _without_docs(v) for k, v in obj.items() if not (isinstance(k, str) and k.startswith("_doc"))}
    if isinstance(obj, list):
        return [_without_docs(v) for v in obj]
    return obj


def parse_annotation(data: bytes, src: str) -> Annotation:
    try:
        ann = (
            _DECODER.decode(data)
            if b'"_doc' not in data
            else msgspec.convert(_without_docs(json.loads(data)), Annotation)
        )
    except msgspec.ValidationError as exc:
        raise DataFileError(f"{src}: {exc}; see docs/annotations.md") from exc
    except (msgspec.DecodeError, ValueError) as exc:
        raise DataFileError(f"{src} is not valid JSON ({exc})") from exc
    _validate_regexes(ann, src)
    ann.source = src
    return ann


def _shipped_dirs() -> list[Path]:
    dirs = []
    # the installed folder, found as a folder of the package and never imported as the module
    # tracekit.annotations: a module by that name would replace the public function tracekit.annotations
    installed = Path(str(resources.files("tracekit"))) / "annotations"
    if installed.is_dir():
        dirs.append(installed)
    checkout = Path(__file__).resolve().parents[2] / "annotations"
    if checkout.is_dir():
        dirs.append(checkout)
    return dirs


@lru_cache(maxsize=1)
def shipped() -> dict[str, Path]:
    """Name and alias → file of every shipped annotation."""
    out: dict[str, Path] = {}
    for d in _shipped_dirs():
        for f in sorted(d.glob("*.json")):
            try:
                doc = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            names = [f.stem, doc.get("name", f.stem), *doc.get("aliases", [])]
            for n in names:
                out.setdefault(str(n), f)
    return out


def load_annotation(ref: str | Path) -> Annotation:
    """An annotation by path, or by the name or alias of a shipped one."""
    check_argument(ref, "ref", "an annotation name or a path (str or Path) to an annotation file", paths=True)
    p = Path(ref)
    if p.suffix == ".json" and p.exists() or p.is_file():
        try:
            return parse_annotation(p.read_bytes(), str(p))
        except OSError as exc:
            raise InputError(f"{p} could not be read ({exc}); check the path") from exc
    known = shipped()
    key = str(ref).removesuffix(".json")
    if key in known:
        return parse_annotation(known[key].read_bytes(), str(known[key]))
    names = ", ".join(sorted(known)) or "none"
    raise InputError(f"annotation {ref!r} is neither a file nor a shipped annotation (shipped: {names})")


def as_annotation(ann, *, name: str = "ann") -> Annotation | None:
    """What every analysis calls on its annotation argument, so that a notebook may pass what the CLI's ``-a``
    takes: None stays None, an Annotation is itself, a name or a path is loaded (:func:`load_annotation`).
    ``name`` is the argument's name, for the error."""
    return named_or_loaded(
        ann,
        Annotation,
        load_annotation,
        name=name,
        must_be="an annotation name, a path to an annotation file or an Annotation",
    )


def required_annotation(ann, what: str, *, name: str = "ann") -> Annotation:
    """:func:`as_annotation` for an analysis that cannot run without one (blocks, roofline, hbm)."""
    found = as_annotation(ann, name=name)
    if found is None:
        names = ", ".join(sorted({p.stem for p in shipped().values()})) or "none"
        raise MissingDataError(
            f"{what} needs an annotation that describes the model's blocks: pass {name} as a"
            f" shipped name ({names}), a path to an annotation file or an Annotation"
            " (docs/annotations.md)"
        )
    return found
