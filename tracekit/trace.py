"""The Trace object: one rank's events table, its metadata and the ingest report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import MissingDataError, TracekitError

if TYPE_CHECKING:  # only for the annotation: `tracekit --version` and `--help` need not import pandas (issue 30)
    import pandas as pd


@dataclass
class IngestReport:
    """What happened to every record of the file: nothing disappears uncounted.

    ``records_read`` = ``events_kept`` + sum(``not_events``) + sum(``dropped``), checked at
    ingest. ``not_events`` are records that are not timeline events (metadata, flow arrows,
    counters); ``dropped`` are events that could not be used, by reason.
    """

    path: str
    compression: str = "none"
    reader: str = "stream"  # "stream", or "whole" (the fallback that also salvages)
    file_bytes: int = 0
    text_bytes: int = 0
    records_read: int = 0
    events_kept: int = 0
    not_events: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    salvaged: bool = False
    bytes_lost: int = 0
    loose_chunks: int = 0
    int_overflows: int = 0
    warnings: list[str] = field(default_factory=list)
    from_cache: bool = False

    def check(self) -> None:
        total = self.events_kept + sum(self.not_events.values()) + sum(self.dropped.values())
        if total != self.records_read:
            raise TracekitError(
                f"{self.path}: ingest accounting is off ({self.records_read} records read, {total} accounted for);"
                " this is a tracekit bug, please report it with --debug"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Trace:
    """One rank's trace. ``events`` follows the schema in docs/events-schema.md, sorted by start."""

    events: pd.DataFrame
    meta: dict[str, Any]
    report: IngestReport
    # what is computed once per trace and shared by every analysis (the steps, by their options)
    derived: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def path(self) -> str:
        return self.report.path

    @property
    def rank(self) -> int | None:
        return self.meta.get("rank")

    def on_device(self, device: int) -> "Trace":
        """The trace of one GPU: that device's GPU events and every CPU event — only those of the process(es) that
        ran work on it where the file says which (meta ``device_pids``: an nsys export of several ranks) — (a file
        that holds several GPUs is analysed one GPU at a time; ``tracekit --device N``)."""
        dev = self.events["device"]
        if not (dev == device).any():
            used = ", ".join(str(d) for d in self.meta.get("devices_used", [])) or "none"
            raise MissingDataError(
                f"{self.path} has no GPU activity on device {device} (devices with activity: {used})"
            )
        cpu = (dev < 0).to_numpy().copy()
        pids = (self.meta.get("device_pids") or {}).get(str(device))  # a file of several processes (nsys): its own
        if pids:
            cpu &= self.events["pid"].isin(pids).to_numpy()
        events = self.events[(dev == device).to_numpy() | cpu].reset_index(drop=True)
        return Trace(
            events=events, meta={**self.meta, "devices_used": [int(device)], "device": int(device)}, report=self.report
        )
