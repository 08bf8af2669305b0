"""Trace directories: which files are traces, which rank each is, and the batch size and context of each run.

sglang names trace files ``<profile_id>-TP-<tp>[-DP-<dp>][-PP-<pp>][-EP-<ep>][-<stage>].trace.json.gz`` and a
sweep keeps one directory per operating point (``d_bs16_100k``). The point pattern is a parameter with a
documented default, not a hard-wired assumption. :func:`rank_tags` is the one reader of rank tags in file names:
the sweep's ``--rank`` filter here and the ranks of one run (``analyses/fleet/multirank/discover.py``) use it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..data import DEFAULT_POINT_PATTERN  # noqa: F401 - re-exported
from ..errors import InputError
from ..result import shown_path, shown_text
from . import TRACE_SUFFIXES
from ..regexes import bounded
from ..errors import check_argument

# a rank tag: a parallelism kind and its rank, not glued to a letter before or a digit after, ``-`` or ``_`` between
RANK_TAG = re.compile(r"(?<![A-Za-z])(ATTN[-_]?CP|TP|DP|EP|PP|DCP|CP)[-_](\d+)(?![0-9])")


@dataclass(frozen=True)
class TraceRef:
    """One trace file of a sweep: its operating point and rank tags."""

    path: Path  # as the OS names it: it opens, whatever bytes the name holds
    point: str  # the directory (or file) name the point was read from, as text (shown_text: any name shows)
    bs: int | None
    context: int | None
    ranks: dict[str, int]

    @property
    def rank_label(self) -> str:
        return rank_tags_text(self.ranks) or "rank-?"


def parse_context(text: str | None) -> int | None:
    """``100k`` → 100000, ``1m`` → 1000000, ``4096`` → 4096."""
    if not text:
        return None
    mult = {"k": 1000, "m": 1_000_000}.get(text[-1].lower(), 1)
    digits = text[:-1] if mult != 1 else text
    return int(digits) * mult if digits.isdigit() else None


def rank_tags(name: str) -> dict[str, int]:
    """The rank tags in a file name, in the order they appear: ``…-TP-3-DP-1-EP-3-DECODE…`` →
    ``{"TP": 3, "DP": 1, "EP": 3}``. Kinds: TP, DP, EP, PP, DCP, CP and ATTN_CP (written ``ATTN_CP``, ``ATTN-CP`` or
    ``ATTNCP``); ``-`` or ``_`` between a kind and its number (``TP_3``); a tag glued to a letter before it
    (``XTP-3``) is none."""
    out = {}
    for kind, number in RANK_TAG.findall(name):
        kind = kind.upper().replace("-", "_")
        out["ATTN_CP" if kind in ("ATTNCP", "ATTN_CP") else kind] = int(number)
    return out


def rank_tags_text(tags: dict[str, int]) -> str:
    """``{"TP": 3, "DP": 1}`` → ``"TP-3-DP-1"`` (``""`` for none): the tags as a file name and ``--rank`` write them."""
    return "-".join(f"{k}-{v}" for k, v in tags.items())


def _is_trace(p: Path) -> bool:
    return p.is_file() and p.name.endswith(TRACE_SUFFIXES) and not p.name.endswith((".truth.json", "manifest.json"))


def _is_tracekit_output(p: Path) -> bool:
    """A JSON document tracekit wrote (``analyze -o``'s ``analyze.json``, a ``-f json -o`` file): not a trace."""
    if not p.name.endswith(".json"):
        return False
    try:
        with open(p, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"tracekit"' in head and b'"schema"' in head


def _walk(root: Path, skipped: list[tuple[str, str]]) -> list[Path]:
    """Trace files below ``root``, following links to directories (each real directory once) and counting what
    cannot be read."""
    files, seen = [], set()

    def unreadable(err: OSError) -> None:
        skipped.append((shown_path(err.filename), f"cannot be read ({err.strerror or err})"))

    for d, dirs, names in os.walk(root, onerror=unreadable, followlinks=True):
        real = os.path.realpath(d)
        if real in seen:  # a link back up the tree
            skipped.append((shown_path(d), "a link to a directory already searched"))
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        for n in sorted(names):
            p = Path(d) / n
            if p.is_symlink() and not p.exists():
                skipped.append((shown_path(p), "a broken link"))
                continue
            if not n.endswith(TRACE_SUFFIXES) or n.endswith((".truth.json", "manifest.json")):
                continue
            elif not os.access(p, os.R_OK):
                skipped.append((shown_path(p), "cannot be read (permission denied)"))
            elif _is_tracekit_output(p):
                skipped.append((shown_path(p), "a tracekit output, not a trace"))
            elif p.is_file():
                files.append(p)
    return files


def discover(
    root: str | Path, *, point_pattern: str = DEFAULT_POINT_PATTERN, rank: str | None = "TP-0"
) -> list[TraceRef]:
    """Every trace under ``root`` (a file, a run directory, or a directory of run directories); see
    :func:`discover_all`, which also says what it skipped."""
    check_argument(root, "root", "a path (str or Path) of a trace or a folder of traces", paths=True)
    return discover_all(root, point_pattern=point_pattern, rank=rank)[0]


def discover_all(
    root: str | Path, *, point_pattern: str = DEFAULT_POINT_PATTERN, rank: str | None = "TP-0"
) -> tuple[list[TraceRef], list[tuple[str, str]]]:
    """Every trace under ``root``, and every file or directory skipped with the reason.

    The operating point (bs, context) is searched in the file name first, then in its directory names.
    With ``rank`` (``TP-0``, ``DP-1-TP-1``, …) only files carrying all those tags are kept where a run has
    several ranks; ``rank=None`` keeps every file. Links to directories are followed; unreadable directories
    and files, broken links and tracekit's own outputs are skipped and named.
    """
    root = Path(root)
    if not root.exists():
        raise InputError(f"{root} does not exist; pass a trace file or a directory of traces")
    skipped: list[tuple[str, str]] = []
    files = [root] if root.is_file() else _walk(root, skipped)
    if not files:
        why = f" ({'; '.join(f'{p}: {r}' for p, r in skipped[:3])})" if skipped else ""
        raise InputError(f"{root} holds no trace file (*.json, *.json.gz, *.json.zst){why}; pass a trace directory")
    pat = bounded(point_pattern, "--point-pattern")  # a user's pattern: time-bounded, one sentence if invalid
    want = rank_tags("-" + rank) if rank else {}
    refs = []
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        by_dir.setdefault(f.parent, []).append(f)
    for d, group in by_dir.items():
        tagged = [f for f in group if rank_tags(f.name)]
        if want and len(group) > 1 and tagged:
            kept = [f for f in group if all(rank_tags(f.name).get(k) == v for k, v in want.items())]
            skipped += [(shown_path(f), f"another rank (--rank {rank})") for f in group if f not in kept]
            group = kept
        for f in group:
            bs = ctx = None
            point = f.name
            names = [f.name] + (
                [p.name for p in f.relative_to(root).parents if p.name] + [root.name] if root != f else []
            )
            # the nearest name that gives both bs and context wins; else the nearest that gives bs
            found = [(t, m.groupdict()) for t in names for m in [pat.search(t)] if m]
            best = next((x for x in found if x[1].get("bs") and x[1].get("ctx")), None) or next(
                (x for x in found if x[1].get("bs")), None
            )
            if best:
                point, gd = best
                if not str(gd["bs"]).isdigit():
                    skipped.append(
                        (shown_path(f), f"--point-pattern's bs group read {shown_text(gd['bs'])!r}, not a number")
                    )
                    continue
                bs = int(gd["bs"])
                ctx = parse_context(gd.get("ctx"))
            refs.append(TraceRef(path=f, point=shown_text(point), bs=bs, context=ctx, ranks=rank_tags(f.name)))
    if not refs:
        raise InputError(
            f"{root} has traces but none for rank {rank}; pass --rank with a tag that exists"
            f" (e.g. {sorted({r for f in files for r in [rank_tags_text(rank_tags(f.name))] if r})[:5]})"
        )
    return sorted(refs, key=lambda r: (r.bs if r.bs is not None else -1, r.context or 0, str(r.path))), skipped
