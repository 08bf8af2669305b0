"""Which files are the ranks of one run, and which rank each is (docs/multirank.md).

A rank is named by, in this order: sglang's tags in the file name (``TP-3``, ``DP-1``, ``EP-3``, ``PP-0``,
``ATTN_CP-2`` in any order; read by :func:`tracekit.ingest.discover.rank_tags`, the sweep's reader too),
``rank[-_]?N`` in the file name or in the name of a folder between the run's root and the file (nearest first), or
the trace's own ``distributedInfo.rank`` (read when the file is reduced). sglang's per-stage files of one rank
(``…-TP-0-DECODE…``, ``…-TP-0-EXTEND…``, in one folder, names alike but for the stage) are merged into that rank.
Two files with one rank identity are a contradiction, refused in one sentence naming both (:class:`RankConflict`,
exit 3): two files that claim one rank (a restart's second recording, two sweep points, two runs), two ranks whose
traces say one ``distributedInfo.rank``, or one trace given twice (the same bytes).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ....errors import InputError, MissingDataError, UsageError
from ....ingest.discover import discover_all, rank_tags, rank_tags_text
from ....result import shown_path
from .processes import OneClock, export_of, exports_under, gpu_processes, is_part, part_of

RANK = re.compile(r"(?i)(?<![a-z])rank[-_]?(\d+)(?![0-9])")
STAGE = re.compile(r"(?<![A-Za-z])(DECODE|EXTEND|PREFILL|MIXED|IDLE|TARGET_VERIFY|DRAFT_EXTEND(?:_V2)?)(?![A-Za-z])")
# PyTorch's tensorboard_trace_handler names a file <hostname>_<pid>.<ms>.pt.trace.json: the host is the node
HOST = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json")
TAG_ORDER = ("PP", "TP", "DP", "EP", "ATTN_CP", "DCP", "CP")
SEPARATORS = "-_. "  # what splits a file name into its parts (a time, a host, a rank tag)


class RankConflict(InputError):
    """Two files of the run have one rank identity (exit 3): the sentence names both and says what to pass."""


@dataclass
class RankFiles:
    """One rank of the run: its files (several for sglang's per-stage files) and where its identity came from."""

    rank: int | None  # None until the trace's distributedInfo says it
    files: list[Path]
    source: str  # "sglang tags" | "name" | "folder" | "distributedInfo"
    tags: dict[str, int] = field(default_factory=dict)
    stages: list[str | None] = field(default_factory=list)

    @property
    def host(self) -> str | None:
        """The host its file names carry (tensorboard_trace_handler's ``<host>_<pid>.<ms>.pt.trace.json``)."""
        hosts = {m.group("host") for f in self.files for m in [HOST.match(f.name)] if m}
        hosts |= {shown_path(export_of(f)) for f in self.files if is_part(f)}  # one export's processes: one clock
        return hosts.pop() if len(hosts) == 1 else None

    @property
    def label(self) -> str:
        return "; ".join(shown_path(f) for f in self.files)


def stage_of(name: str) -> str | None:
    m = STAGE.search(name)
    return m.group(1) if m else None


def name_rank(path: Path, root: Path | None) -> tuple[int | None, str]:
    """``rank[-_]?N`` in the file's name, else in a folder between ``root`` and the file (nearest first)."""
    m = RANK.search(path.name)
    if m:
        return int(m.group(1)), "name"
    parents = []
    if root is not None and root.is_dir():
        try:
            parents = [p.name for p in path.relative_to(root).parents if p.name] + [root.name]
        except ValueError:
            parents = [path.parent.name]
    else:
        parents = [path.parent.name]
    for n in parents:
        m = RANK.search(n)
        if m:
            return int(m.group(1)), "folder"
    return None, ""


def trace_files(paths_or_dir) -> tuple[list[Path], Path | None, list[tuple[str, str]]]:
    """The trace files of a run: a directory (searched below, links followed) or a list of files and directories.
    Returns the files, the root (a single directory given, else None) and what was skipped with the reason."""
    items = [paths_or_dir] if isinstance(paths_or_dir, (str, Path)) else list(paths_or_dir)
    if not items:
        raise InputError("no trace given; pass a run directory or the ranks' trace files")
    files: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for it in items:
        exports, passed = exports_under(Path(it)) if Path(it).is_dir() else ([], [])  # nsys (docs/multirank.md)
        skipped += passed
        try:
            refs, sk = discover_all(it, rank=None)
        except InputError:
            if not exports:
                raise
            refs, sk = [], []
        files += [r.path for r in refs] + exports
        skipped += sk
    seen, unique = set(), []
    for f in files:
        key = str(Path(f).resolve())
        if key not in seen:
            seen.add(key)
            unique.append(Path(f))
    root = Path(items[0]) if len(items) == 1 and Path(items[0]).is_dir() else None
    return unique, root, skipped


def find_ranks(paths_or_dir) -> tuple[list[RankFiles], list[tuple[str, str]]]:
    """The ranks of one run from the files' names (see the module's doc). Ranks whose files name none come back
    with ``rank=None`` and one file each: :func:`settle` names them from the traces' ``distributedInfo``."""
    files, root, skipped = trace_files(paths_or_dir)
    inside = processes_as_ranks(files)
    if inside:
        return inside, skipped
    tagged = {f: rank_tags(f.name) for f in files}
    with_tp = [t for t in tagged.values() if "TP" in t]
    tp_world = max((t["TP"] for t in with_tp), default=-1) + 1
    ranks: dict[int, RankFiles] = {}
    unnamed: list[RankFiles] = []
    for f in files:
        tags = tagged[f]
        r, src = None, ""
        if tags and "TP" in tags:
            r, src = tags.get("PP", 0) * tp_world + tags["TP"], "sglang tags"
        elif tags:
            k = next(k for k in TAG_ORDER if k in tags)
            r, src = tags[k], "sglang tags"
        else:
            r, src = name_rank(f, root)
        if r is None:
            unnamed.append(RankFiles(rank=None, files=[f], source="distributedInfo", stages=[stage_of(f.name)]))
            continue
        rf = ranks.get(r)
        if rf is None:
            ranks[r] = RankFiles(rank=r, files=[f], source=src, tags=tags, stages=[stage_of(f.name)])
            continue
        stage = stage_of(f.name)
        if not _stages_of_one_recording(rf, f, stage):
            first = rf.files[0]
            raise RankConflict(
                f"{shown_path(first)} and {shown_path(f)} both name rank {r} ({_claims(first, rf.source, f, src)})"
                f" and are not two stages of one recording: {_how_they_differ(first, f)}; pass the files of one run,"
                " one trace per rank (list them, or move the others aside)"
            )
        rf.files.append(f)
        rf.stages.append(stage)
    out = [ranks[r] for r in sorted(ranks)] + unnamed
    _refuse_copies(files)
    return out, skipped


def processes_as_ranks(files: list[Path]) -> list[RankFiles]:
    """The ranks of a run given as ONE nsys export of several GPU processes (``nsys profile`` around ``torchrun``):
    rank i is its i-th process by lowest device, then pid (:func:`.processes.gpu_processes`); ``[]`` when no file
    holds two. Such an export beside other files is refused (exit 3): it is a run of its own."""
    # a .nsys-rep given alone is listed through its export (nsys on PATH): a run of several processes, as its SQLite;
    # among several files each report is one rank, exported only when read (not exported here to count processes)
    suffixes = (".sqlite", ".sqlite3") + ((".nsys-rep", ".qdrep") if len(files) == 1 else ())
    procs = {f: gpu_processes(f) for f in files if f.name.lower().endswith(suffixes)}
    multi = [f for f, p in procs.items() if len(p) > 1]
    if not multi:
        return []
    if len(files) > 1:
        raise InputError(
            f"{shown_path(multi[0])} holds {len(procs[multi[0]])} GPU processes, the ranks of a run of its own;"
            " pass it alone, or one export per rank"
        )
    f = multi[0]
    return [RankFiles(rank=i, files=[part_of(f, pid)], source="process") for i, (pid, _) in enumerate(procs[f])]


def _digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _refuse_copies(files: list[Path]) -> None:
    """Two rank files with the same bytes are one rank given twice (a copy), never two ranks: one sentence (exit 3).
    Only files of equal size are read to compare, so a run of distinct ranks costs one ``stat`` per file."""
    by_size: dict[int, list[Path]] = {}
    for f in files:
        by_size.setdefault(os.stat(f).st_size, []).append(f)
    for same in (g for g in by_size.values() if len(g) > 1):
        seen: dict[str, Path] = {}
        for f in same:
            first = seen.setdefault(_digest(f), f)
            if first is not f:
                raise RankConflict(
                    f"{shown_path(first)} and {shown_path(f)} hold the same bytes: one rank's trace given twice, not"
                    " two ranks; pass each rank's own trace once"
                )


def settle(ranks: list[RankFiles], meta_ranks: list[list[int | None]]) -> tuple[list[RankFiles], list[str]]:
    """Give every rank its id: the names' where they gave one (a different ``distributedInfo.rank`` is a warning),
    else the trace's ``distributedInfo.rank``. ``meta_ranks[i]`` holds ``distributedInfo.rank`` of each file of
    ``ranks[i]``. A rank still unnamed is one sentence (exit 4); two ranks with one id, or two ranks whose traces say
    one ``distributedInfo.rank``, are a :class:`RankConflict` (exit 3)."""
    warnings = []
    said = [{m for m in metas if m is not None} for metas in meta_ranks]
    for rf, got in zip(ranks, said):
        if rf.rank is None:
            if not got:
                raise MissingDataError(
                    f"{rf.label}: which rank is this trace? Its name has no sglang tag (TP-3), no rank-N, nor does a"
                    " folder above it, and the trace has no distributedInfo.rank; name the files rank-N"
                )
            rf.rank = min(got)
        elif got and got != {rf.rank}:
            warnings.append(
                f"{rf.label}: its name says rank {rf.rank} ({rf.source}) and its distributedInfo says"
                f" {sorted(got)}; the name is used"
            )
    seen: dict[int, RankFiles] = {}
    for rf in ranks:
        if rf.rank in seen:
            other = seen[rf.rank]
            raise RankConflict(
                f"{other.label} and {rf.label} are both rank {rf.rank}"
                f" ({_claims(other.files[0], other.source, rf.files[0], rf.source)}): one rank's trace"
                " given twice, or the files of two runs; pass one trace per rank of one run"
            )
        seen[rf.rank] = rf
    _refuse_one_distributed_rank_twice(ranks, said)
    if len(ranks) < 2:
        raise MissingDataError(
            f"{ranks[0].label if ranks else 'the input'} is one rank; the analysis of a run's ranks"
            " needs the traces of at least two ranks of one run"
        )
    return sorted(ranks, key=lambda r: r.rank), warnings


def _refuse_one_distributed_rank_twice(ranks: list[RankFiles], said: list[set[int]]) -> None:
    """Two ranks (distinct by their names) whose traces both say ``distributedInfo.rank`` d: one process's trace
    given under two names, or two runs' files mixed; the names cannot both be right (exit 3)."""
    owner: dict[int, RankFiles] = {}
    for rf, got in zip(ranks, said):
        for d in sorted(got):
            other = owner.setdefault(d, rf)
            if other is not rf:
                raise RankConflict(
                    f"{other.label} and {rf.label} both say distributedInfo.rank {d}, though they are named ranks"
                    f" {other.rank} ({other.source}) and {rf.rank} ({rf.source}): one process's trace under two names,"
                    " or the files of two runs; pass one trace per rank of one run"
                )


def nodes_of(ranks: list[RankFiles], gpus_per_node: int | None) -> tuple[dict[int, int], str]:
    """Each rank's node, and from what: ``gpus_per_node`` when given; else the hosts in the file names when every
    rank's carries one (nodes numbered in the order of their lowest rank); else 8 GPUs per node."""
    if gpus_per_node is None:
        hosts = [rf.host for rf in ranks]
        if all(hosts):
            ids: dict[str, int] = {}
            for rf in sorted(ranks, key=lambda x: x.rank):
                ids.setdefault(rf.host, len(ids))
            one_export = all(is_part(f) for rf in ranks for f in rf.files)
            if one_export:  # one export's processes: one host clock, exactly (no fit: processes.OneClock)
                return {rf.rank: OneClock(ids[rf.host]) for rf in ranks}, "one export"
            return {rf.rank: ids[rf.host] for rf in ranks}, "host names"
        gpus_per_node = 8
    return {rf.rank: rf.rank // int(gpus_per_node) for rf in ranks}, f"{gpus_per_node} GPUs per node"


def check_world_size(world_size) -> int | None:
    """``--world-size`` as given: None, or a whole number of at least 1 (else one sentence, exit 2)."""
    if world_size is not None and (
        isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1
    ):
        raise UsageError(f"--world-size must be a whole number of at least 1, not {world_size!r}")
    return None if world_size is None else int(world_size)


def world_size_of(
    ranks: list[RankFiles], said: dict[Path, int | None], given: int | None
) -> tuple[int | None, str, list[str]]:
    """The run's world size, from what (``world_size_from``) and the warnings: ``given`` (``--world-size``) when
    given; else the traces' ``distributedInfo.world_size`` (``said``: each file's; 1, a trace of its own one-rank
    run, says nothing of this run); else the highest rank id + 1 (the rank tags or rank-N in the file names, which
    cannot see a missing last rank). Two files that say two world sizes are the files of two runs (exit 3); a
    ``given`` below the ranks the files hold is a usage error (exit 2)."""
    warnings: list[str] = []
    ids = [rf.rank for rf in ranks if rf.rank is not None]
    top = max(ids) + 1 if ids else None
    sizes: dict[int, Path] = {}
    for f, ws in said.items():
        if ws is not None and ws > 1:
            sizes.setdefault(int(ws), f)
    if len(sizes) > 1:
        (a, fa), (b, fb) = sorted(sizes.items())[:2]
        raise InputError(
            f"{shown_path(fa)} says distributedInfo.world_size {a} and {shown_path(fb)} says {b}: the files of two"
            " runs; pass the files of one run"
        )
    traced = next(iter(sizes), None)
    if given is not None:
        if top is not None and given < top:
            raise UsageError(
                f"--world-size {given} is less than the ranks the files hold (rank {top - 1}); pass at least {top}"
            )
        if traced is not None and traced != given:
            warnings.append(f"--world-size {given} is used; the traces' distributedInfo says world_size {traced}")
        return given, "--world-size", warnings
    if traced is not None:
        if top is not None and top > traced:
            warnings.append(
                f"the traces' distributedInfo says world_size {traced} but the files hold rank {top - 1}; the world"
                f" size is taken as {top} (pass --world-size to say it)"
            )
            return top, "rank ids", warnings
        return traced, "distributedInfo", warnings
    if top is None:
        return None, "unknown", warnings
    named = all(rf.source in ("sglang tags", "name", "folder") for rf in ranks)
    return top, "file names" if named else "rank ids", warnings


def missing_of(ranks: list[RankFiles], world_size: int | None) -> list[int]:
    """The ranks of a world of ``world_size`` that have no file among ``ranks`` (none when the size is unknown)."""
    have = {rf.rank for rf in ranks if rf.rank is not None}
    return [] if world_size is None else [r for r in range(int(world_size)) if r not in have]


def _stages_of_one_recording(rf: RankFiles, f: Path, stage: str | None) -> bool:
    """``f`` is one more stage of the recording ``rf`` holds: a stage it lacks, in the same folder, the names alike
    but for the stage (``T-TP-0-DECODE…`` and ``T-TP-0-EXTEND…``; another ``T`` is another recording)."""
    if stage is None or None in rf.stages or stage in rf.stages:
        return False
    first = rf.files[0]
    return first.parent == f.parent and STAGE.sub("", first.name) == STAGE.sub("", f.name)


def _what(p: Path) -> str:
    return rank_tags_text(rank_tags(p.name)) or p.name


def _claim(p: Path, source: str) -> str:
    """What names a file's rank: ``sglang tags TP-0``, ``rank-0 in the name``, ``folder rank_1``, its
    ``distributedInfo.rank``."""
    if source == "sglang tags":
        return f"sglang tags {_what(p)}"
    if source == "name":
        return f"{RANK.search(p.name).group(0)} in the name"
    if source == "folder":
        return next((f"folder {d.name}" for d in p.parents if RANK.search(d.name)), "a folder")
    return "distributedInfo.rank"


def _claims(a: Path, source_a: str, b: Path, source_b: str) -> str:
    """How two files claim one rank: ``both by sglang tags TP-0`` or ``rank-1 in the name; folder rank_1``."""
    ca, cb = _claim(a, source_a), _claim(b, source_b)
    return f"both by {ca}" if ca == cb else f"{ca}; {cb}"


def _how_they_differ(a: Path, b: Path) -> str:
    """Two files of one rank, told apart for the user: the folders when the names are one, else the part of the names
    that differs, widened to whole parts (``1758612345.12`` and ``1758619999.55``, a restart's two recordings)."""
    if a.name == b.name:
        return (
            f"the same name in two folders ({shown_path(a.parent)} and {shown_path(b.parent)}), two runs or two points"
            " of a sweep (tracekit analyze reads a sweep)"
        )
    x, y = a.name, b.name
    i = len(os.path.commonprefix([x, y]))
    while i > 0 and x[i - 1] not in SEPARATORS:
        i -= 1
    j = len(os.path.commonprefix([x[i:][::-1], y[i:][::-1]]))
    while j > 0 and x[len(x) - j] not in SEPARATORS:
        j -= 1
    return f"two recordings of it (the names differ in {x[i : len(x) - j]!r} and {y[i : len(y) - j]!r})"
