"""A1 — decode steps: which annotation marks a step, and each step's GPU window.

The markers and their order live in ``tracekit/data/steps.json``. A GPU annotation is its own
window. A CPU annotation (newer sglang writes ``step[DECODE bs=N]`` only on the CPU side) becomes
the window from the first to the last GPU activity whose launch — the runtime event with the same
correlation id, ``cudaGraphLaunch``/``hipGraphLaunch`` included — starts inside the CPU span.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from .. import schema
from ..errors import DataFileError, MissingDataError
from ..result import Result, trace_input
from ..trace import Trace


def median_ns(values) -> int | float | None:
    """Median as an int when it is a whole number of ns (it is .5 for an even count of odd sums)."""
    arr = np.asarray(values)
    if arr.size == 0:
        return None
    m = float(np.median(arr))
    return int(m) if m.is_integer() else m

DEFAULT_MIN_STEP_NS = 10_000_000
STEP_COLUMNS = ["step", "name", "start_ns", "dur_ns", "end_ns", "bs", "source"]


@dataclass(frozen=True)
class Marker:
    label: str
    pattern: re.Pattern
    kinds: tuple[str, ...]
    apply_floor: bool


@lru_cache(maxsize=1)
def _markers() -> tuple[tuple[Marker, ...], tuple[str, ...]]:
    src = "tracekit/data/steps.json"
    doc = json.loads(resources.files("tracekit.data").joinpath("steps.json").read_text(encoding="utf-8"))
    out = []
    for i, m in enumerate(doc.get("markers", [])):
        try:
            out.append(Marker(m["label"], re.compile(m["pattern"]), tuple(m["kinds"]), bool(m.get("apply_floor"))))
        except (KeyError, TypeError, re.error) as exc:
            raise DataFileError(f"{src}: $.markers[{i}] is invalid ({exc})") from exc
    return tuple(out), tuple(doc.get("launch_runtime_kinds", ["runtime"]))


@dataclass(frozen=True)
class Steps:
    """Step windows (``table`` has STEP_COLUMNS) and which marker produced them."""

    table: pd.DataFrame
    marker: str
    min_step_ns: int
    candidates: int  # marker spans seen before the floor

    @property
    def starts(self) -> np.ndarray:
        return self.table["start_ns"].to_numpy(np.int64)

    @property
    def ends(self) -> np.ndarray:
        return self.table["end_ns"].to_numpy(np.int64)


def find_steps(trace: Trace, *, step_name: str | None = None, min_step_ns: int = DEFAULT_MIN_STEP_NS) -> Steps:
    """Find the decode steps; raise MissingDataError (exit 4) naming the annotations that exist."""
    ev = trace.events
    markers, launch_kinds = _markers()
    if step_name is not None:
        markers = (Marker(step_name, re.compile(re.escape(step_name)), ("gpu_annotation", "cpu_annotation"), True),)
    tried = []
    for marker in markers:
        for kind in marker.kinds:
            spans = _spans(ev, marker, kind)
            if spans.empty:
                continue
            if kind == "cpu_annotation":
                spans = _gpu_windows(ev, spans, launch_kinds)
                if spans.empty:
                    tried.append(f"{marker.label} (CPU spans with no GPU work launched inside)")
                    continue
            n = len(spans)
            if marker.apply_floor:
                spans = spans[spans["dur_ns"] > min_step_ns]
            if spans.empty:
                tried.append(f"{marker.label} ({n} spans, none longer than {min_step_ns / 1e6:g} ms)")
                continue
            spans = spans.sort_values("start_ns", kind="stable").reset_index(drop=True)
            spans.insert(0, "step", np.arange(len(spans), dtype=np.int64))
            spans["source"] = kind
            return Steps(spans[STEP_COLUMNS], marker.label, min_step_ns, n)
    raise MissingDataError(_no_steps_message(trace, step_name, tried))


def _spans(ev: pd.DataFrame, marker: Marker, kind: str) -> pd.DataFrame:
    rows = ev[ev["kind"] == kind]
    if rows.empty:
        return pd.DataFrame(columns=["name", "start_ns", "dur_ns", "end_ns", "bs"])
    cats = rows["name"].cat.categories
    hits = {c: marker.pattern.fullmatch(str(c)) for c in cats}
    hits = {c: m for c, m in hits.items() if m}
    rows = rows[rows["name"].isin(list(hits))]
    bs = {c: (int(m.group("bs")) if "bs" in m.re.groupindex and m.group("bs") else None) for c, m in hits.items()}
    out = pd.DataFrame({
        "name": rows["name"].astype(str).to_numpy(),
        "start_ns": rows["start_ns"].to_numpy(np.int64),
        "dur_ns": rows["dur_ns"].to_numpy(np.int64),
        "end_ns": rows["end_ns"].to_numpy(np.int64),
    })
    out["bs"] = pd.array([bs.get(n) for n in out["name"]], dtype="Int64")
    return out


def _gpu_windows(ev: pd.DataFrame, spans: pd.DataFrame, launch_kinds: tuple[str, ...]) -> pd.DataFrame:
    """Map CPU spans to the GPU window of the work launched inside them (vectorised)."""
    launches = ev[ev["kind"].isin(launch_kinds) & (ev["correlation"] >= 0)]
    gpu = schema.gpu_activity(ev)
    gpu = gpu[gpu["correlation"] >= 0]
    if launches.empty or gpu.empty:
        return spans.iloc[0:0]
    lmap = launches.drop_duplicates("correlation").set_index("correlation")["start_ns"]
    launch_ts = gpu["correlation"].map(lmap)
    ok = launch_ts.notna().to_numpy()
    launch_ts = launch_ts.to_numpy()[ok].astype(np.int64)
    g_start = gpu["start_ns"].to_numpy()[ok]
    g_end = gpu["end_ns"].to_numpy()[ok]
    spans = spans.sort_values("start_ns", kind="stable").reset_index(drop=True)
    s, e = spans["start_ns"].to_numpy(), spans["end_ns"].to_numpy()
    idx = np.searchsorted(s, launch_ts, side="right") - 1
    inside = (idx >= 0) & (launch_ts < e[np.clip(idx, 0, None)])
    if not inside.any():
        return spans.iloc[0:0]
    grp = pd.DataFrame({"span": idx[inside], "start": g_start[inside], "end": g_end[inside]}).groupby("span")
    first, last = grp["start"].min(), grp["end"].max()
    out = spans.loc[first.index].copy()
    out["start_ns"] = first.to_numpy()
    out["end_ns"] = last.to_numpy()
    out["dur_ns"] = out["end_ns"] - out["start_ns"]
    return out.reset_index(drop=True)


def _no_steps_message(trace: Trace, step_name: str | None, tried: list[str]) -> str:
    ev = trace.events
    ann = ev[ev["kind"].isin(("gpu_annotation", "cpu_annotation"))]
    counts = ann["name"].astype(str).value_counts()
    present = ", ".join(f"{n} ({c})" for n, c in counts.head(12).items()) or "none"
    if len(counts) > 12:
        present += f", … ({len(counts)} distinct)"
    looked = f"'{step_name}'" if step_name else " or ".join(m.label for m in _markers()[0])
    detail = f" ({'; '.join(tried)})" if tried else ""
    return (f"{trace.path} has no decode step: looked for {looked}{detail}; annotations present: {present};"
            " pass --step-name NAME or lower --min-step-ms")


def steps_result(trace: Trace, *, step_name: str | None = None, min_step_ns: int = DEFAULT_MIN_STEP_NS) -> Result:
    """`tracekit steps`: every step window and the median wall."""
    st = find_steps(trace, step_name=step_name, min_step_ns=min_step_ns)
    durs = st.table["dur_ns"].to_numpy()
    summary = {
        "marker": st.marker,
        "source": str(st.table["source"].iloc[0]),
        "steps": int(len(st.table)),
        "marker_spans": st.candidates,
        "median_wall_ns": median_ns(durs),
        "min_wall_ns": int(durs.min()),
        "max_wall_ns": int(durs.max()),
    }
    warnings = list(trace.report.warnings)
    if st.candidates > len(st.table):
        warnings.append(f"{trace.path}: {st.candidates - len(st.table)} {st.marker} span(s) not longer than"
                        f" {min_step_ns / 1e6:g} ms were not counted as steps")
    return Result(command="steps", inputs=[trace_input(trace)],
                  params={"step_name": step_name, "min_step_ns": min_step_ns},
                  summary=summary, tables={"steps": st.table}, warnings=warnings)
