"""Trace directories: which files are traces, which rank each is, and the batch size and context of each run.

sglang names trace files ``<profile_id>-TP-<tp>[-DP-<dp>][-PP-<pp>][-EP-<ep>][-<stage>].trace.json.gz`` and a
sweep keeps one directory per operating point (``d_bs16_100k``). The patterns are parameters with
documented defaults, not hard-wired assumptions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from . import TRACE_SUFFIXES

DEFAULT_POINT_PATTERN = r"bs(?P<bs>\d+)(?:_(?P<ctx>\d+[kKmM]?))?"
RANK_TAG = re.compile(r"-(TP|DP|PP|EP)-(\d+)")


@dataclass(frozen=True)
class TraceRef:
    """One trace file of a sweep: its operating point and rank tags."""

    path: Path
    point: str  # the directory (or file) name the point was read from
    bs: int | None
    context: int | None
    ranks: dict[str, int]

    @property
    def rank_label(self) -> str:
        return "-".join(f"{k}-{v}" for k, v in self.ranks.items()) or "rank-?"


def parse_context(text: str | None) -> int | None:
    """``100k`` → 100000, ``1m`` → 1000000, ``4096`` → 4096."""
    if not text:
        return None
    mult = {"k": 1000, "m": 1_000_000}.get(text[-1].lower(), 1)
    digits = text[:-1] if mult != 1 else text
    return int(digits) * mult if digits.isdigit() else None


def rank_tags(name: str) -> dict[str, int]:
    return {k: int(v) for k, v in RANK_TAG.findall(name)}


def _is_trace(p: Path) -> bool:
    return p.is_file() and p.name.endswith(TRACE_SUFFIXES) and not p.name.endswith((".truth.json", "manifest.json"))


def discover(root: str | Path, *, point_pattern: str = DEFAULT_POINT_PATTERN, rank: str | None = "TP-0") -> list[TraceRef]:
    """Every trace under ``root`` (a file, a run directory, or a directory of run directories).

    The operating point (bs, context) is searched in the file name first, then in its directory names.
    With ``rank`` (``TP-0``, ``DP-1-TP-1``, …) only files carrying all those tags are kept where a run has
    several ranks; ``rank=None`` keeps every file.
    """
    root = Path(root)
    if not root.exists():
        raise InputError(f"{root} does not exist; pass a trace file or a directory of traces")
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if _is_trace(p))
    if not files:
        raise InputError(f"{root} holds no trace file (*.json, *.json.gz, *.json.zst); pass a trace directory")
    try:
        pat = re.compile(point_pattern)
    except re.error as exc:
        raise InputError(f"--point-pattern {point_pattern!r} is not a valid regular expression ({exc})") from exc
    want = rank_tags("-" + rank) if rank else {}
    refs = []
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        by_dir.setdefault(f.parent, []).append(f)
    for d, group in by_dir.items():
        tagged = [f for f in group if rank_tags(f.name)]
        if want and len(group) > 1 and tagged:
            group = [f for f in group if all(rank_tags(f.name).get(k) == v for k, v in want.items())]
        for f in group:
            bs = ctx = None
            point = f.name
            names = [f.name] + ([p.name for p in f.relative_to(root).parents if p.name] + [root.name]
                                if root != f else [])
            # the nearest name that gives both bs and context wins; else the nearest that gives bs
            found = [(t, m.groupdict()) for t in names for m in [pat.search(t)] if m]
            best = next((x for x in found if x[1].get("bs") and x[1].get("ctx")), None) or \
                next((x for x in found if x[1].get("bs")), None)
            if best:
                point, gd = best
                bs = int(gd["bs"])
                ctx = parse_context(gd.get("ctx"))
            refs.append(TraceRef(path=f, point=point, bs=bs, context=ctx, ranks=rank_tags(f.name)))
    if not refs:
        raise InputError(f"{root} has traces but none for rank {rank}; pass --rank with a tag that exists"
                         f" (e.g. {sorted({r for f in files for r in [_tag_str(f)] if r})[:5]})")
    return sorted(refs, key=lambda r: (r.bs if r.bs is not None else -1, r.context or 0, str(r.path)))


def _tag_str(f: Path) -> str:
    return "-".join(f"{k}-{v}" for k, v in rank_tags(f.name).items())
