"""Issue 20, "Prove it": random multi-device, nested-marker and reused-correlation traces give per-device wall
decompositions equal, to the nanosecond, to a slow reference written from the documentation alone.

The reference (``reference_steps`` / ``reference_wall``) reads the event dicts this file writes — never tracekit's
tables — and is plain Python loops. The rules it implements, from docs/steps.md and docs/reliability.md
("Analyses: preconditions"), for the ``scheduler.run_batch`` dialect (a GPU-span dialect; its CPU halves are
never steps alone) and the default options (``--step-source auto``, ``--phase auto``, ``--min-step-ms 0``):

1. **Device.** Device d's view holds d's GPU events and every CPU event (``Trace.on_device``). A file whose GPU
   activity is on several devices is refused in one sentence naming ``--device``.
2. **Launches.** A GPU activity belongs to the latest runtime launch of its correlation id that starts before it
   (ids are reused). The launch work of a CPU span is the GPU activity of device d whose launch starts in the span
   ``[start, end)``; its launch window runs from the first start to the last end of that work.
3. **Candidate windows.** Each GPU marker of device d; when its CPU half (same External id) launched work of
   union U: if ``|U ∩ span| < |U| / 2`` the window is the launch window; else if some of the work lies (partly)
   outside the span, the span widened to hold it; else the span as written.
4. **Empty markers** (judged before rule 5: an empty marker is no step, so it neither holds nor cuts one). A
   marker's busy time is that of the work its CPU half launched (``|U|``) when it launched any, else the busy time
   of device d's GPU activity in its window. A marker with no busy time, or less than 1 % of the median busy time
   of the dialect's other non-empty markers (all one phase, ``unknown``), is no step — unless it is an **empty
   step**: a GPU span as the marker wrote it (not replaced by its launch window) lasting at least 1 % of the median
   length of the non-empty windows, which is a step of idle time.
5. **Nested / overlapping.** Over the remaining windows sorted by start (longer first on a tie): a window whose
   end is not after the end of every window before it lies inside another and is no step; a kept window ends where
   the next kept one starts when they overlap.
6. **Wall.** Per step window: busy = the union of GPU activity other than PtoP copies, ag_only = time only PtoP
   copies run, idle = the rest; wall = the window's length.

Where the documentation leaves an order or a reading open, the generator keeps out of it (``assume``): the empty
markers are the same whether the median includes the window itself; no step is left empty by the cut of rule 5
(whether it then stays a step is not written down); no launch starts at the very nanosecond of a GPU activity of its id; every launched activity has a launch
of its id before it; CPU spans never overlap; External ids are unique; every device has a non-empty marker.

Examples per run (the ``max_examples`` below): 60 + 40 + 15 = 115, derandomized; about 17 s.
"""

from __future__ import annotations

import itertools
import json
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import assume as _assume
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

import tracekit
from tests.conftest import cpu_ann, gpu_ann, kernel, launch, load_events, memcpy, write_trace
from tracekit.analyses.steps.resolve import find_steps
from tracekit.errors import MissingDataError

MARKER = "scheduler.run_batch"
RANDOM_EXAMPLES = 60
REUSE_EXAMPLES = 40
CLI_EXAMPLES = 15
SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
}
UNLAUNCHED = 1_000_000  # correlation ids from here on have no launch
_names = itertools.count()


def us(ns: int) -> float:
    """ns → µs with three decimals (its repr is exact, so tracekit reads the same ns back)."""
    return ns / 1000


def assume(cond, why: str) -> None:
    """Inside a property: keep out of an open case. In a hand-built test: the case must be a specified one."""
    if currently_in_test_context():
        if not cond:
            event(f"left out: {why}")
        _assume(cond)
    else:
        assert cond


def note(what: str) -> None:
    if currently_in_test_context():
        event(what)


def ns_of(x) -> int:
    return int(Decimal(repr(x)) * 1000)


# --------------------------------------------------------------------------------------------------
# the generator
# --------------------------------------------------------------------------------------------------


@st.composite
def traces(draw, *, reuse_p: float | None = None, short_spans: bool = False):
    """A small random Kineto trace (a list of event dicts): 1–3 devices, 1–3 streams each, kernels and memcpys
    (PtoP with bytes among them), ``scheduler.run_batch`` GPU markers with sometimes a CPU half and launches,
    sometimes nested, overlapping or empty markers, sometimes reused correlation ids."""
    n_dev = draw(st.integers(1, 3))
    devices = draw(st.lists(st.integers(0, 5), min_size=n_dev, max_size=n_dev, unique=True))
    reuse = draw(st.sampled_from([0.0, 0.3, 0.8])) if reuse_p is None else reuse_p
    gpu_events, markers = [], []  # markers: (device, stream, start, end, ext)
    kernels_of: dict[int, list[dict]] = {}
    ext = itertools.count(1)
    unlaunched = itertools.count(UNLAUNCHED)
    ns = lambda lo, hi: draw(st.integers(lo, hi))

    def add_kernel(dev, streams, s, dur):
        k = kernel(
            f"k{len(gpu_events)}",
            us(s),
            us(dur),
            stream=draw(st.sampled_from(streams)),
            device=dev,
            corr=next(unlaunched),
        )
        gpu_events.append(k)
        kernels_of[dev].append(k)
        return k

    def add_copy(dev, streams, s, dur):
        kind = draw(st.sampled_from(["PtoP", "PtoP", "DtoD", "HtoD"]))
        m = memcpy(
            f"Memcpy {kind} (Device -> Device)",
            us(s),
            us(dur),
            nbytes=draw(st.sampled_from([None, 4096])),
            stream=draw(st.sampled_from(streams)),
            device=dev,
        )
        m["args"]["correlation"] = next(unlaunched)
        gpu_events.append(m)

    for dev in devices:
        kernels_of[dev] = []
        streams = sorted(draw(st.sets(st.integers(7, 9), min_size=1, max_size=3)))
        t = ns(0, 50_000)
        primary = []
        for i in range(draw(st.integers(1, 4))):
            s = t + ns(0, 30_000)
            e = s + (ns(2_000, 8_000) if short_spans else ns(5_000, 200_000))
            primary.append((s, e))
            markers.append((dev, streams[0], s, e, next(ext)))
            if i == 0 or draw(st.booleans()):  # a kernel well inside: this marker is not empty
                add_kernel(dev, streams, s + (e - s) // 4, max(1, (e - s) // 2))
            for _ in range(draw(st.integers(0, 3))):
                ks = ns(s - 5_000, e)
                add_kernel(dev, streams, ks, ns(1, 60_000 if short_spans else 40_000))
            if draw(st.booleans()):
                add_copy(dev, streams, ns(s - 5_000, e), ns(1, 30_000))
            t = e
        for _ in range(draw(st.integers(0, 3))):  # activity anywhere, in steps or between them
            (add_copy if draw(st.booleans()) else add_kernel)(dev, streams, ns(0, t), ns(1, 30_000))
        for _ in range(draw(st.integers(0, 2))):  # nested: inside a primary marker
            s, e = draw(st.sampled_from(primary))
            a = ns(s, e - 1)
            markers.append((dev, streams[0], a, ns(a + 1, e), next(ext)))
        for _ in range(draw(st.integers(0, 2))):  # overlapping: starts inside a marker, ends after it
            s, e = draw(st.sampled_from(primary))
            a, b = ns(s + 1, e - 1), ns(e + 1, e + 100_000)
            markers.append((dev, streams[0], a, b, next(ext)))
            if draw(st.booleans()):
                add_kernel(dev, streams, ns(e, b - 1), ns(1, 20_000))
        for _ in range(draw(st.integers(0, 2))):  # anywhere, any length: empty ones among them (~0 µs markers too)
            a = ns(0, t)
            markers.append((dev, streams[0], a, a + draw(st.sampled_from([0, 1, ns(1, 50_000)])), next(ext)))

    events = list(gpu_events)
    events += [gpu_ann(MARKER, us(s), us(e - s), ext=x, stream=stream, device=dev) for dev, stream, s, e, x in markers]
    # CPU halves, on one CPU timeline and never overlapping, placed a little before their GPU spans
    halves = sorted((m for m in markers if draw(st.integers(0, 3)) > 0), key=lambda m: m[2])
    cursor, launches, ids = 0, [], []
    for dev, _, s, e, x in halves:
        cs = max(cursor, s - ns(0, 40_000))
        ce = cs + ns(1_000, 10_000)
        cursor = ce + ns(0, 5_000)
        events.append(cpu_ann(MARKER, us(cs), us(ce - cs), ext=x))
        # the work it launches: mostly kernels in its span, sometimes others (the span is then widened or replaced)
        own = [k for k in kernels_of[dev] if s <= ns_of(k["ts"]) < e]
        pool = own if own and draw(st.integers(0, 2)) else kernels_of[dev]
        chosen = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique_by=id)) if pool else []
        last = None
        for k in sorted(chosen, key=lambda k: ns_of(k["ts"])):
            ks = ns_of(k["ts"])
            if ks <= cs:  # it starts before the span: it cannot have been launched there
                continue
            if last is not None and last[0] < ks and draw(st.booleans()):  # one launch, several activities
                k["args"]["correlation"] = last[1]
                continue
            lt = ns(cs, min(ce, ks) - 1)
            corr = draw(st.sampled_from(ids)) if ids and draw(st.floats(0, 1)) < reuse else len(ids) + 1
            ids.append(corr)
            launches.append(launch("cudaLaunchKernel", us(lt), corr))
            k["args"]["correlation"] = corr
            last = (lt, corr)
    events += launches
    draw(st.randoms()).shuffle(events)
    return sorted(devices), events


# --------------------------------------------------------------------------------------------------
# the slow reference: plain loops over the event dicts
# --------------------------------------------------------------------------------------------------


def _span(ev) -> tuple[int, int]:
    s = ns_of(ev["ts"])
    return s, s + ns_of(ev["dur"])


def _covered(intervals, a, b) -> int:
    """Length of [a, b) covered by the union of ``intervals``: cut [a, b) at every boundary, test each piece."""
    cuts = sorted({a, b, *(x for s, e in intervals for x in (s, e) if a < x < b)})
    return sum(hi - lo for lo, hi in itertools.pairwise(cuts) if any(s <= lo and hi <= e for s, e in intervals))


def _device_view(events, dev):
    acts = [ev for ev in events if ev["cat"] in ("kernel", "gpu_memcpy", "gpu_memset") and ev["args"]["device"] == dev]
    gpu = [(*_span(ev), ev["args"]["correlation"], ev["cat"] == "gpu_memcpy" and "PtoP" in ev["name"]) for ev in acts]
    gmarks = [
        (*_span(ev), ev["args"]["External id"])
        for ev in events
        if ev["cat"] == "gpu_user_annotation" and ev["name"] == MARKER and ev["pid"] == dev
    ]
    cpu = {
        ev["args"]["External id"]: _span(ev) for ev in events if ev["cat"] == "user_annotation" and ev["name"] == MARKER
    }
    launches = [(ns_of(ev["ts"]), ev["args"]["correlation"]) for ev in events if ev["cat"] == "cuda_runtime"]
    return gpu, gmarks, cpu, launches


def _launch_of(start, corr, launches):
    """The latest launch of ``corr`` that starts before ``start`` (None: no launch of that id)."""
    before = [t for t, c in launches if c == corr and t < start]
    assume(
        not any(t == start for t, c in launches if c == corr), "a launch at the ns of its kernel"
    )  # "before" at the same ns: left open
    if any(c == corr for _, c in launches):
        assume(before, "launched only after it")  # launched but only after it: the documentation says nothing
    return max(before) if before else None


def _empty(windows, busy_of, with_self: bool):
    """Indices of empty windows: no busy time, or below 1 % of the median of the (other) non-empty ones."""
    nonzero = [i for i, w in enumerate(windows) if busy_of(w) > 0]
    out = {i for i in range(len(windows)) if i not in nonzero}
    if len(nonzero) >= 2:
        for i in nonzero:
            others = sorted(busy_of(windows[j]) for j in nonzero if with_self or j != i)
            n = len(others)
            med = others[n // 2] if n % 2 else (others[n // 2 - 1] + others[n // 2]) / 2
            if busy_of(windows[i]) < 0.01 * med:
                out.add(i)
    return out


def _resolve(windows):
    """Nested windows are no steps; an overlapping window ends where the next starts."""
    order = sorted(windows, key=lambda w: (w[0], -w[1]))
    kept = []
    for i, (s, e) in enumerate(order):
        if any(e <= order[j][1] for j in range(i)):
            continue
        kept.append([s, e])
    for a, b in itertools.pairwise(kept):
        a[1] = min(a[1], b[0])
    return [tuple(w) for w in kept]


def reference_steps(events, dev) -> list[tuple[int, int]]:
    gpu, gmarks, cpu, launches = _device_view(events, dev)
    launched_at = [_launch_of(s, c, launches) for s, _, c, _ in gpu]
    if any(
        lt is not None and lt != min(t for t, c2 in launches if c2 == c) for (_, _, c, _), lt in zip(gpu, launched_at)
    ):
        note("a reused id: an activity belongs to a later launch than its id's first")
    all_gpu = [(s, e) for s, e, _, _ in gpu]
    windows, own, replaced = [], [], []
    for s, e, x in gmarks:
        w, u = (s, e), None
        if x in cpu:
            cs, ce = cpu[x]
            work = [(a, b) for (a, b, _, _), lt in zip(gpu, launched_at) if lt is not None and cs <= lt < ce]
            if work:
                first, last = min(a for a, _ in work), max(b for _, b in work)
                total = u = _covered(work, first, last)
                inside = _covered(work, s, e) if e > s else 0
                if 2 * inside < total:
                    w = (first, last)
                    note("a GPU span replaced by its launch window")
                elif any(a < s or b > e for a, b in work):
                    w = (min(s, first), max(e, last))
                    note("a GPU span widened")
        windows.append(w)
        own.append(u)
        replaced.append(w != (s, e) and w == (first, last) if u is not None else False)
    busy = lambda w: _covered(all_gpu, *w) if w[1] > w[0] else 0
    judged = lambda i: own[i] if own[i] else busy(windows[i])
    empty = _empty(list(range(len(windows))), judged, with_self=True)
    assume(empty == _empty(list(range(len(windows))), judged, with_self=False), "median with or without itself")
    full = [w[1] - w[0] for i, w in enumerate(windows) if i not in empty]
    n = len(full)
    med = sorted(full)[n // 2] if n % 2 else sum(sorted(full)[n // 2 - 1 : n // 2 + 1]) / 2 if n else 0
    idle_steps = {
        i
        for i in empty
        if not replaced[i] and windows[i][1] > windows[i][0] and windows[i][1] - windows[i][0] >= 0.01 * med
    }
    if idle_steps:
        note("an empty step")
    kept = [w for i, w in enumerate(windows) if i not in empty or i in idle_steps]
    steps = _resolve(kept)
    if len(steps) < len(kept):
        note("a nested window")
    if any(w not in kept for w in steps):
        note("a window cut where the next starts")
    if empty:
        note("an empty marker")
    if len({c for _, c in launches}) < len(launches):
        note("reused correlation ids")
    # an empty marker is no step, so it cuts no step; but a step that a cut leaves empty is not specified
    idle = {windows[i] for i in idle_steps}
    left_empty = _empty(steps, busy, True) | _empty(steps, busy, False)
    assume(all(steps[i] in idle for i in left_empty), "a step left empty by a cut")
    assume(steps, "no step")  # "no marker at all" (the whole-trace window) is another rule
    return steps


def reference_wall(events, dev) -> list[dict]:
    gpu = _device_view(events, dev)[0]
    rows = []
    for i, (ws, we) in enumerate(reference_steps(events, dev)):
        other = [(s, e) for s, e, _, p in gpu if not p]
        busy = _covered(other, ws, we)
        ag_only = _covered([(s, e) for s, e, _, _ in gpu], ws, we) - busy
        if ag_only:
            note("ag_only time in a step")
        rows.append(
            {
                "step": i,
                "start_ns": ws,
                "wall_ns": we - ws,
                "busy_ns": busy,
                "ag_only_ns": ag_only,
                "idle_ns": we - ws - busy - ag_only,
                "empty": busy + ag_only == 0,  # a step in which the GPU ran nothing (docs/steps.md)
            }
        )
    return rows


# --------------------------------------------------------------------------------------------------
# the properties
# --------------------------------------------------------------------------------------------------


def _rows(result) -> list[dict]:
    t = result.tables["per_step"]
    return [
        {**{k: int(v) for k, v in r.items() if k != "empty"}, "empty": bool(r["empty"])}
        for r in t[["step", "start_ns", "wall_ns", "busy_ns", "ag_only_ns", "idle_ns", "empty"]].to_dict("records")
    ]


def _refusal(trace, devices) -> str:
    with pytest.raises(MissingDataError) as err:
        tracekit.decompose(trace)
    msg = str(err.value)
    assert "--device" in msg and f"{len(devices)} devices" in msg
    assert "\n" not in msg and ". " not in msg.replace("trace.on_device", ""), msg  # one sentence
    return msg


@pytest.mark.slow
@settings(max_examples=RANDOM_EXAMPLES, **SETTINGS)
@given(case=traces())
def test_random_traces_decompose_like_the_reference_per_device(tmp_path, case):
    devices, events = case
    refs = {d: reference_wall(events, d) for d in devices}
    note(f"{len(devices)} device(s)")
    t = load_events(tmp_path, events)
    for d in devices:
        assert _rows(tracekit.decompose(t.on_device(d))) == refs[d], d
    if len(devices) > 1:
        _refusal(t, devices)
    else:
        assert _rows(tracekit.decompose(t)) == refs[devices[0]]


@pytest.mark.slow
@settings(max_examples=REUSE_EXAMPLES, **SETTINGS)
@given(case=traces(reuse_p=0.9, short_spans=True))
def test_reused_correlation_ids_give_the_reference_steps(tmp_path, case):
    """Short GPU spans (ROCm-style) and ids reused by nearly every launch: the windows come from launch work,
    so which launch a kernel belongs to decides the steps."""
    devices, events = case
    t = load_events(tmp_path, events)
    for d in devices:
        found = find_steps(t.on_device(d))
        assert found.table[["start_ns", "end_ns"]].values.tolist() == [list(w) for w in reference_steps(events, d)], d


@pytest.mark.slow
@settings(max_examples=CLI_EXAMPLES, **SETTINGS)
@given(case=traces())
def test_cli_wall_device_equals_the_reference(tmp_path, cli, case):
    devices, events = case
    refs = {d: reference_wall(events, d) for d in devices}
    path = write_trace(tmp_path / f"t{next(_names)}.json", events)
    for d in devices:
        code, out, err = cli("wall", path, "--device", str(d), "--format", "json")
        assert code == 0, err
        assert json.loads(out)["tables"]["per_step"] == refs[d]
    code, out, err = cli("wall", path, "--format", "json")
    if len(devices) > 1:
        assert code == 4 and out == "" and "--device" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
    else:
        assert code == 0 and json.loads(out)["tables"]["per_step"] == refs[devices[0]]


def test_the_latest_launch_before_a_kernel_decides_its_step(tmp_path):
    """Two steps whose CPU halves launch id 77. Step B's GPU span is 0.1 µs of a 3 µs kernel, so its window is
    its launch window — if that kernel is B's. Matched to the first launch of 77 it would be A's work, A's span
    would cover 0.8 of 3.8 µs of it and A's window would grow to swallow B."""
    evs = [
        cpu_ann(MARKER, 0.0, 100.0, ext=1),
        launch("cudaLaunchKernel", 10.0, 77),
        gpu_ann(MARKER, 1_000.0, 1_000.0, ext=1),
        kernel("a", 1_100.0, 800.0, corr=77),
        cpu_ann(MARKER, 5_000.0, 100.0, ext=2),
        launch("cudaLaunchKernel", 5_010.0, 77),
        gpu_ann(MARKER, 6_000.0, 100.0, ext=2),
        kernel("b", 6_000.0, 3_000.0, corr=77),
    ]
    want = [(1_000_000, 2_000_000), (6_000_000, 9_000_000)]
    assert reference_steps(evs, 0) == want
    t = load_events(tmp_path, evs)
    found = find_steps(t)
    assert [tuple(w) for w in found.table[["start_ns", "end_ns"]].values.tolist()] == want
    assert any("reused" in w for w in found.warnings)
    assert _rows(tracekit.decompose(t)) == reference_wall(evs, 0)


def test_the_reference_agrees_with_the_documented_nesting_example(tmp_path):
    """The reference itself, on test_analysis_preconditions' hand-checked case: nested, then overlapping."""
    evs = [
        gpu_ann(MARKER, 0.0, 20_000.0, ext=1),
        gpu_ann(MARKER, 5_000.0, 5_000.0, ext=2),
        gpu_ann(MARKER, 30_000.0, 20_000.0, ext=3),
        gpu_ann(MARKER, 45_000.0, 20_000.0, ext=4),
    ]
    evs += [kernel("k", float(t), 1_000.0) for t in (1_000, 6_000, 31_000, 46_000, 60_000)]
    want = [(0, 20_000_000), (30_000_000, 45_000_000), (45_000_000, 65_000_000)]
    assert reference_steps(evs, 0) == want
    assert _rows(tracekit.decompose(load_events(tmp_path, evs))) == reference_wall(evs, 0)


def test_two_devices_alone_equal_their_part_of_the_file(tmp_path):
    """Device 1's result from the two-device file equals the reference on device 1's events written alone."""
    evs = [
        gpu_ann(MARKER, 0.0, 20_000.0, ext=1),
        gpu_ann(MARKER, 0.0, 20_000.0, ext=2, device=1),
        kernel("a", 10.0, 5_000.0),
        kernel("b", 10.0, 15_000.0, device=1),
        memcpy("Memcpy PtoP (Device -> Device)", 12_000.0, 6_000.0, nbytes=4096, device=1),
    ]
    t = load_events(tmp_path, evs)
    _refusal(t, [0, 1])
    alone = [ev for ev in evs if ev.get("pid") == 1]
    assert (
        _rows(tracekit.decompose(t.on_device(1)))
        == reference_wall(alone, 1)
        == _rows(tracekit.decompose(load_events(tmp_path, alone, name="alone.json")))
    )
    assert reference_wall(alone, 1)[0]["ag_only_ns"] == 2_990_000  # PtoP 12–18 ms, kernel b to 15.01 ms
