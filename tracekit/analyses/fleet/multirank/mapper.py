"""Map: one rank's file → small tables (its steps, its collective instances and the work before each).

:func:`reduce_file` is a pure function of a path and plain options, so it runs the same in this process, a
process-pool worker or a Dask worker, and what it returns is small (a row per step and per collective): the
parent never holds two ranks' events. Collective kinds come from ``tracekit/data/collectives.json``.
A process-pool worker starts with :func:`start_worker` (it dies with its parent) and runs each file through
:func:`in_worker` (which notes the file, so that a worker's death names it).
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import re
import signal
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from .... import intervals as iv
from ....errors import DataFileError
from ....ingest import load
from ...categories import categorize, families
from ...steps.resolve import find_steps, step_options
from . import set_back
from .processes import select_process, split_part

STEP_COLS = ["local_step", "name", "start_ns", "end_ns", "phase", "bs", "tokens"]
COLL_COLS = ["local_step", "kind", "start_ns", "end_ns", "kernels", "work_ns", "attention_ns", "expert_ns"]
# the work a rank did before arriving at an instance, by what it was (docs/multirank.md)
ATTENTION_FAMILIES = ("attention", "linear_attention")
EXPERT_CATEGORIES = ("expert_gemm", "moe_routing")

_LOAD_LOCK = threading.Lock()  # threads of one process (a Dask worker's) decode one trace at a time
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_TAKEN: list = []  # in a process-pool worker: the shared array where it notes which file it works on


@dataclass(frozen=True)
class Collectives:
    """The compiled ``collectives.json``: ordered (kind, regex) rules and each kind's properties."""

    rules: tuple[tuple[str, re.Pattern], ...]
    merge_runs: frozenset
    blocking: frozenset
    kinds: tuple[str, ...]

    def kind_codes(self, names: list[str]) -> np.ndarray:
        """Index into ``kinds`` of each name's kind, -1 for a name that is no collective."""
        out = np.full(len(names), -1, dtype=np.int64)
        for i, n in enumerate(names):  # per distinct name, not per event
            for kind, pat in self.rules:
                if pat.search(n):
                    out[i] = self.kinds.index(kind)
                    break
        return out


@lru_cache(maxsize=1)
def load_collectives() -> Collectives:
    src = "tracekit/data/collectives.json"
    doc = json.loads(resources.files("tracekit.data").joinpath("collectives.json").read_text(encoding="utf-8"))
    kinds = doc.get("kinds")
    if not isinstance(kinds, dict) or not isinstance(doc.get("rules"), list):
        raise DataFileError(f"{src}: needs 'kinds' (an object) and 'rules' (a list)")
    rules = []
    for i, r in enumerate(doc["rules"]):
        if not isinstance(r, dict) or r.get("kind") not in kinds or not isinstance(r.get("pattern"), str):
            raise DataFileError(f"{src}: rules[{i}] needs a 'kind' declared under 'kinds' and a 'pattern'")
        try:
            rules.append((r["kind"], re.compile(r["pattern"])))
        except re.error as exc:
            raise DataFileError(f"{src}: rules[{i}].pattern is not a valid regular expression ({exc})") from exc
    return Collectives(
        tuple(rules),
        frozenset(k for k, v in kinds.items() if v.get("merge_runs")),
        frozenset(k for k, v in kinds.items() if v.get("blocking", True)),
        tuple(kinds),
    )


@dataclass(frozen=True)
class MapOptions:
    step_name: str | None = None
    min_step_ns: int | None = None
    step_source: str | None = None
    steps_file: str | None = None
    cache: bool = True


def load_in_worker(path: str, cache: bool):
    """``tracekit.ingest.load`` where a fanned-out file is analysed: this process, a process-pool worker or a Dask
    worker (the ranks of a run here, the points of a sweep in ``tracekit.fan_out``), one trace at a time per process.

    A daemonic worker (Dask's nanny processes, multiprocessing.Pool) may not have children: the ingest's decode
    helper is a forked process, so there it decodes in this process — in a thread of its own: a Dask worker's
    profiler samples the frames of its task threads every few ms, and a sampled frame holds the decoder's views of
    the text past their call (``kineto.pieces.let_go`` drops such a view rather than release it: "BufferError:
    memoryview has N exported buffers" before). In a thread of its own the load is never sampled, and the same
    peak memory was measured either way (a task thread is not the main thread: it has a malloc arena of its own
    too)."""
    if multiprocessing.current_process().daemon:
        os.environ["TRACEKIT_WORKERS"] = "1"
        with _LOAD_LOCK:
            return _in_own_thread(lambda: load(path, cache=cache))
    with _LOAD_LOCK:
        return load(path, cache=cache)


def _in_own_thread(fn):
    """``fn()`` in a new thread, joined: its result, or its exception raised here."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name="tracekit-load", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def start_worker(parent: int, taken) -> None:
    """The initializer of every process-pool worker (``tracekit.fan_out.map_points``): a worker lives only in its
    parent's life.

    * On Linux the kernel sends it SIGTERM when the parent dies, however it dies (SIGKILL included:
      ``prctl(PR_SET_PDEATHSIG)``); a parent already gone before that was set ends it now. No orphan keeps the
      parent's stdout open (``tracekit imbalance … | cat`` ends).
    * SIGTERM and SIGHUP act as by default again (the parent's CLI raises them as an exception; a worker just ends,
      its cache write's temporary file removed on the way, ``tracekit.cache.tempfiles.signals_raise``), and SIGINT
      is ignored: Ctrl-C reaches the whole process group, and the parent decides (it stops its workers).
    * ``taken`` (a shared array, one slot per file) is where :func:`in_worker` notes which file this process
      works on, so that the parent can name the file of a worker that died."""
    for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGHUP")):
        if s is not None:
            signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the parent still stops its workers when it ends normally
            pass
    if os.getppid() != parent:  # the parent died before the death signal was asked for
        os._exit(1)
    _TAKEN[:] = [taken]


def in_worker(fn, index: int, path: str, opts):
    """``fn(path, opts)`` in a process-pool worker, this process's id noted in slot ``index`` first."""
    if _TAKEN:
        _TAKEN[0][index] = os.getpid()
    return fn(path, opts)


def reduce_file(path: str, opts: MapOptions = MapOptions()) -> dict:
    """One file of one rank, reduced: ``{"path", "meta", "steps", "collectives", "warnings"}`` (see
    :func:`reduce_trace`). Times are on the file's own clock (``baseTimeNanoseconds`` added where the file has
    one)."""
    file, pid = split_part(path)  # one process of an export of several (processes.py): the export read once here
    trace = load_in_worker(file, opts.cache) if pid is None else select_process(export_in_worker(file, opts.cache), pid)
    return reduce_trace(trace, opts, path=str(path))


_EXPORT: dict = {}  # the last export whose processes this worker reduces: (path, cache) → its whole trace


def export_in_worker(path: str, cache: bool):
    """The whole export at ``path``, loaded once per worker for all the ranks (processes) it holds."""
    key = (path, cache)
    if key not in _EXPORT:
        _EXPORT.clear()
        _EXPORT[key] = load_in_worker(path, cache)
    return _EXPORT[key]


def forget_exports() -> None:
    """Let go of the export held for its processes (this process's reductions are done: ``imbalance_of_run``)."""
    _EXPORT.clear()


def reduce_trace(trace, opts: MapOptions = MapOptions(), *, path: str | None = None) -> dict:
    """A loaded trace → ``steps`` (STEP_COLS: every phase, as the step finder found them) and ``collectives``
    (COLL_COLS: one row per instance, with the compute it did since its previous collective or the step's start:
    ``work_ns`` busy time, of it ``attention_ns`` and ``expert_ns``)."""
    trace, set_backs = set_back.undo(trace)  # a clock set back mid-run: the events after it moved forward
    ev = trace.events
    base = int(trace.meta.get("base_time_ns") or 0)
    st = find_steps(
        trace,
        step_options(
            step_name=opts.step_name,
            min_step_ns=opts.min_step_ns,
            phase="all",
            source=opts.step_source,
            steps_file=opts.steps_file,
        ),
    )
    t = st.table.sort_values("start_ns", kind="stable").reset_index(drop=True)
    steps = pd.DataFrame(
        {
            "local_step": np.arange(len(t), dtype=np.int64),
            "name": t["name"].astype(str).to_numpy(),
            "start_ns": t["start_ns"].to_numpy(np.int64) + base,
            "end_ns": t["end_ns"].to_numpy(np.int64) + base,
            "phase": t["phase"].astype(str).to_numpy(),
            "bs": t["bs"].astype("Int64").to_numpy(),
            "tokens": t["tokens"].astype("Int64").to_numpy(),
        }
    )
    cats = categorize(ev)
    coll = collective_table(ev, steps, base, cats)
    steps["phase"] = training_phase(ev, steps, base, cats)
    meta = trace.meta
    return {
        "path": path or str(meta.get("source")),
        "meta": {
            "rank": meta.get("rank"),
            "world_size": meta.get("world_size"),
            "devices_used": meta.get("devices_used"),
            "base_time_ns": base,
            "events": int(len(ev)),
            "clock_set_back": [{**x, "local_ns": x["local_ns"] + base} for x in set_backs],
        },
        "steps": steps,
        "collectives": coll,
        "warnings": list(st.warnings) if hasattr(st, "warnings") else [],
    }


TRAIN_CATEGORIES = ("optimizer",)  # a step that runs an optimizer kernel is a training step


def category_mask(cats: pd.Categorical, wanted) -> np.ndarray:
    """Rows whose category is one of ``wanted`` (on the codes: no per-row strings)."""
    lookup = np.append(np.isin(np.asarray(cats.categories, dtype=object), list(wanted)), False)  # code −1: none
    return lookup[np.asarray(cats.codes)]


def family_mask(cats: pd.Categorical, wanted) -> np.ndarray:
    fam = np.asarray(families(pd.Categorical(cats.categories, categories=cats.categories)).astype(object))
    return category_mask(cats, [c for c, f in zip(cats.categories, fam) if f in wanted])


def training_phase(ev: pd.DataFrame, steps: pd.DataFrame, base: int = 0, cats=None) -> np.ndarray:
    """The steps' phases, with ``train`` for a step of no known phase (``ProfilerStep#N``) that runs an optimizer
    kernel (a category of tracekit/data/categories.json)."""
    phase = steps["phase"].to_numpy(object).copy()
    unknown = phase == "unknown"
    if not unknown.any():
        return phase
    m = category_mask(categorize(ev) if cats is None else cats, TRAIN_CATEGORIES)
    if not m.any():
        return phase
    w = iv.window_of(
        ev["start_ns"].to_numpy(np.int64)[m] + base,
        steps["start_ns"].to_numpy(np.int64),
        steps["end_ns"].to_numpy(np.int64),
    )
    has = np.zeros(len(steps), dtype=bool)
    has[w[w >= 0]] = True
    phase[unknown & has] = "train"
    return phase


def collective_table(ev: pd.DataFrame, steps: pd.DataFrame, base: int = 0, cats=None) -> pd.DataFrame:
    """The collective instances of one rank's events (vectorised over events; the rules run once per name)."""
    rules = load_collectives()
    kernel = (ev["kind"] == "kernel").to_numpy()
    names = ev["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    codes = names.cat.codes.to_numpy()
    kind_of_name = np.append(rules.kind_codes([str(c) for c in names.cat.categories]), -1)  # code −1: no name
    kind = np.full(len(codes), -1, dtype=np.int64)
    at = np.flatnonzero(kernel)
    kind[at] = kind_of_name[codes[at]]
    s_all = ev["start_ns"].to_numpy(np.int64) + base
    e_all = ev["end_ns"].to_numpy(np.int64) + base
    is_coll = kind >= 0
    order = np.flatnonzero(is_coll)
    order = order[np.argsort(s_all[order], kind="stable")]
    cs, ce, ck = s_all[order], e_all[order], kind[order]
    ws, we = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    cstep = iv.window_of(cs, ws, we) if len(ws) else np.full(len(cs), -1, dtype=np.int64)
    # merge runs: a kernel of a merge_runs kind that follows one of the same kind (same step, no other kind between)
    merge_kind = np.array([k in rules.merge_runs for k in rules.kinds] + [False])
    cont = np.zeros(len(cs), dtype=bool)
    if len(cs) > 1:
        cont[1:] = (ck[1:] == ck[:-1]) & (cstep[1:] == cstep[:-1]) & merge_kind[ck[1:]]
    inst = np.cumsum(~cont) - 1
    n = int(inst[-1]) + 1 if len(inst) else 0
    first = np.flatnonzero(~cont)
    start = cs[first]
    end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(end, inst, ce)
    kernels = np.bincount(inst, minlength=n).astype(np.int64)
    istep = cstep[first]
    ikind = ck[first]
    # the work before each instance: since the previous instance's end (same step) or the step's start
    prev_end = np.concatenate([[np.iinfo(np.int64).min], end[:-1]]) if n else end
    prev_end = np.maximum.accumulate(prev_end) if n else prev_end
    same_step = np.concatenate([[False], istep[1:] == istep[:-1]]) if n else np.zeros(0, bool)
    step_start = np.where(istep >= 0, ws[np.clip(istep, 0, None)] if len(ws) else 0, start)
    win0 = np.where(same_step, np.minimum(prev_end, start), step_start)
    comp = kernel & ~is_coll
    cats = pd.Categorical(categorize(ev) if cats is None else cats)
    attn = comp & family_mask(cats, ATTENTION_FAMILIES)
    expert = comp & category_mask(cats, EXPERT_CATEGORIES)
    work = [
        iv.measure_in_windows((s_all[m], e_all[m]), win0, start) if n else np.zeros(0, np.int64)
        for m in (comp, attn, expert)
    ]
    # the kinds' names taken from an Index of them (a string column is inferred once, not from every row's text);
    # no instance: the empty object column as before
    kinds = pd.Index(list(rules.kinds)).take(ikind) if n else np.array(rules.kinds, dtype=object)[ikind]
    return pd.DataFrame(
        {
            "local_step": istep.astype(np.int64),
            "kind": kinds,
            "start_ns": start,
            "end_ns": end,
            "kernels": kernels,
            "work_ns": work[0],
            "attention_ns": work[1],
            "expert_ns": work[2],
        },
        columns=COLL_COLS,
    )
