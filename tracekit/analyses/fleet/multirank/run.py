"""A run in the API (issue 40): ``tracekit.load_run(PATH_OR_FILES)`` finds the ranks of one run once — which files
are which rank (:mod:`.discover`), the world size and the ranks it lacks, each rank's node — and the :class:`Run` it
returns is what ``tracekit.imbalance``, ``tracekit.report`` and ``tracekit.findings`` take, so that none of them
searches the run again (docs/multirank.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ....errors import InputError, UsageError, check_items
from ....ingest.distributed_info import distributed_info
from ....result import shown_path
from .processes import device_of_part, export_of
from .discover import RankFiles, check_world_size, find_ranks, missing_of, nodes_of, world_size_of

TAKES_RUN = "a path (str or Path) of a run's folder or a list of its rank files"


@dataclass
class Run:
    """The ranks of one run as found on disk. ``ranks``: one :class:`~.discover.RankFiles` per rank (its id, its
    files, where the id came from), in rank order (a rank only its trace's events can name, last, ``rank=None``);
    ``world_size`` and ``world_size_from`` (``--world-size``, ``distributedInfo``, ``file names``, ``rank ids`` or
    ``unknown``), ``missing_ranks`` (ranks of that world with no file), ``nodes`` (rank → node) and
    ``nodes_from``; ``skipped``: files passed over, with the reason."""

    source: object
    ranks: list[RankFiles]
    skipped: list[tuple[str, str]]
    world_size: int | None
    world_size_from: str
    world_size_given: int | None
    missing_ranks: list[int]
    gpus_per_node: int | None
    nodes: dict[int, int]
    nodes_from: str
    warnings: list[str] = field(default_factory=list)
    distributed: dict = field(default_factory=dict)  # file -> its head's distributedInfo ({} when none)

    is_run = True  # what tracekit's keyword layer recognises a Run by (it sits below this room)

    @property
    def root(self) -> Path | None:
        """The run directory given, else None (a list of files)."""
        src = self.source
        return Path(src) if isinstance(src, (str, Path)) and Path(src).is_dir() else None

    @property
    def files(self) -> dict:
        """Rank id → its files (sglang's per-stage files: several)."""
        return {rf.rank: list(rf.files) for rf in self.ranks}

    def reference_files(self) -> list[Path]:
        """The files of the reference rank (the lowest rank id): what `tracekit report RUN_DIR` reports on, the
        decode stage first where sglang wrote one file per stage."""
        named = [rf for rf in self.ranks if rf.rank is not None]
        if not named:
            raise InputError(f"{shown_path(self.ranks[0].files[0])}: no rank of the run is named yet; run imbalance")
        ref = min(named, key=lambda rf: rf.rank)
        return sorted({export_of(f) for f in ref.files}, key=lambda f: ("DECODE" not in f.name.upper(), str(f)))

    def reference_device(self) -> int | None:
        """The GPU of the reference rank where it is one process of an export of several (what its report is of,
        ``trace.on_device``), else None."""
        named = [rf for rf in self.ranks if rf.rank is not None]
        return device_of_part(min(named, key=lambda rf: rf.rank).files[0]) if named else None

    def __repr__(self) -> str:
        miss = f", missing ranks {self.missing_ranks}" if self.missing_ranks else ""
        return (
            f"Run({len(self.ranks)} ranks, world size {self.world_size} from {self.world_size_from}{miss},"
            f" {len(set(self.nodes.values()))} node(s))"
        )


def load_run(paths_or_files, *, world_size: int | None = None, gpus_per_node: int | None = None) -> Run:
    """The ranks of one run: a run directory (rank files, per-rank folders, sglang's per-stage files) or a list of
    its files, found once. Each rank's id comes from its file names (see :mod:`.discover`), else from the
    ``distributedInfo.rank`` in its trace's head; the world size from ``world_size`` when given, else the traces'
    ``distributedInfo.world_size``, else the highest rank + 1. Errors are one sentence: two files of one rank or two
    world sizes (exit 3), a bad ``world_size`` or ``gpus_per_node`` (exit 2)."""
    if isinstance(paths_or_files, Run):
        return run_with(paths_or_files, world_size=world_size, gpus_per_node=gpus_per_node)
    check_items(paths_or_files, "paths_or_files", TAKES_RUN, paths=True)
    check_world_size(world_size)
    check_gpus_per_node(gpus_per_node)
    ranks, skipped = find_ranks(paths_or_files)
    return run_of_ranks(paths_or_files, ranks, skipped, world_size=world_size, gpus_per_node=gpus_per_node)


def check_gpus_per_node(gpus_per_node) -> None:
    """``--gpus-per-node`` as given: None, or a whole number of at least 1 (else one sentence, exit 2)."""
    if gpus_per_node is not None and (
        isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1
    ):
        raise UsageError(f"--gpus-per-node must be a whole number of at least 1, not {gpus_per_node!r}")


def run_of_ranks(
    source, ranks: list[RankFiles], skipped: list, *, world_size: int | None = None, gpus_per_node: int | None = None
) -> Run:
    """The :class:`Run` of ranks :func:`~.discover.find_ranks` found in ``source`` (the CLI's `report` and
    `findings` have found them already, to tell a run from one trace): the ranks the names leave unnamed named by
    their traces' heads, the world size and the missing ranks, the nodes."""
    given = check_world_size(world_size)
    check_gpus_per_node(gpus_per_node)
    heads = {f: distributed_info(export_of(f)) for rf in ranks for f in rf.files}
    for rf in ranks:  # a rank only its trace names: the head's distributedInfo.rank (not that of a one-rank run)
        said = {h.get("rank") for f in rf.files for h in [heads[f]] if h.get("world_size") != 1} - {None}
        if rf.rank is None and len(said) == 1:
            rf.rank = said.pop()
    ranks.sort(key=lambda rf: (rf.rank is None, rf.rank if rf.rank is not None else 0))
    ws, ws_from, warnings = world_size_of(ranks, {f: h.get("world_size") for f, h in heads.items()}, given)
    named = [rf for rf in ranks if rf.rank is not None]
    nodes, nodes_from = nodes_of(named, gpus_per_node) if named else ({}, "unknown")
    return Run(
        source=source,
        ranks=ranks,
        skipped=skipped,
        world_size=ws,
        world_size_from=ws_from,
        world_size_given=given,
        missing_ranks=missing_of(ranks, ws) if all(rf.rank is not None for rf in ranks) else [],
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        nodes_from=nodes_from,
        warnings=warnings,
        distributed=heads,
    )


def run_with(run: Run, *, world_size: int | None = None, gpus_per_node: int | None = None) -> Run:
    """``run`` with another ``world_size`` or ``gpus_per_node`` (None: the run's own), its files not searched
    again."""
    given = check_world_size(world_size)
    if (given is None or given == run.world_size_given) and (gpus_per_node in (None, run.gpus_per_node)):
        return run
    given = run.world_size_given if given is None else given
    gpn = run.gpus_per_node if gpus_per_node is None else gpus_per_node
    ws, ws_from, warnings = world_size_of(
        run.ranks, {f: h.get("world_size") for f, h in run.distributed.items()}, given
    )
    named = [rf for rf in run.ranks if rf.rank is not None]
    nodes, nodes_from = nodes_of(named, gpn) if named else ({}, "unknown")
    return replace(
        run,
        world_size=ws,
        world_size_from=ws_from,
        world_size_given=given,
        missing_ranks=missing_of(run.ranks, ws) if len(named) == len(run.ranks) else [],
        gpus_per_node=gpn,
        nodes=nodes,
        nodes_from=nodes_from,
        warnings=warnings,
    )
