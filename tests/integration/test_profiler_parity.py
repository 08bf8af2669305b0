"""One synthetic deployment written by three profilers from one truth (fixtures/synthlib: Kineto JSON, the nsys SQLite
export of fixtures/synthlib/nsys.py, the rocprofv3 JSON of fixtures/synthlib/rocprof.py) gives the same answers on
all three, with default options, to the ns: every command that answers on one trace is run on each file and its
JSON (summary, tables, warnings; the file's path written FILE) compared whole.

What differs is what the profilers record, and each difference is stated here:

* nsys and rocprofv3 record no GPU-side projection of a CPU range (Kineto's ``gpu_user_annotation``), so their
  steps are the CPU ranges' launch windows (``source`` cpu_launch_window, not gpu_annotation) and the health check
  of a GPU span against its launched work (window_covers_launched_work) has nothing to check; the windows
  themselves are the same, so every number built on the steps is.
* Only Kineto writes the rank and world size (``distributedInfo``) and ``baseTimeNanoseconds``; nsys writes its UTC
  zero as TARGET_INFO_SESSION_START_TIME (meta ``session_start_utc_ns``).
* Each profiler's sentences name its own options and device records (tracekit/data/record_hints.json: "record with
  ProfilerActivity.CPU" / "nsys profile --trace=cuda" / "rocprofv3 --hip-trace"; "sms from trace deviceProperties" /
  "TARGET_INFO_GPU" / "rocprofv3 agents"): those phrases are written HINT and DEVICES before the JSON is compared.
* ``event_id`` is the record's position in the file, which each profiler orders its own way.
* rocprofv3's agents carry no registers or shared memory per block, so ``waves`` takes those limits from its
  occupancy table (``summary.occupancy.sm_limits.sources`` says so), with the same numbers; and rocprofv3 lists
  every GPU agent of the node (here the copy peer too).
"""

from __future__ import annotations

import json

import pytest

from fixtures.synth import build, write_trace
from fixtures.synthlib.nsys import write_nsys
from fixtures.synthlib.rocprof import write_rocprof

pytestmark = pytest.mark.slow

OTHERS = ("nsys", "rocprof")
# commands whose whole JSON is the same on the three files
SAME = [
    ("kernels",),
    ("wall",),
    ("layers",),
    ("comm",),
    ("exposure",),
    ("temporal",),
    ("stats",),
    ("overlap",),
    ("findings",),
    ("suggest",),
    ("blocks", "-a", "k3_dp16"),
    ("annotations", "-a", "k3_dp16"),
]
# commands that need what none of the three holds here (graph captures): the same exit 4 and sentence
REFUSED = ["roofline", "hbm", "replay"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("profiler_parity")
    trace, _ = build("dp16", 4, steps=3, seed=0)
    return {  # one stem, so that names made from it (suggest's auto_synth) agree
        "kineto": write_trace(d / "synth.trace.json.gz", trace),
        "nsys": write_nsys(d / "synth.sqlite", trace),
        "rocprof": write_rocprof(d / "synth.json", trace),
    }


def _run(cli, files, *args, code=0) -> dict[str, dict]:
    """``tracekit COMMAND FILE ARGS -f json`` on each file: its JSON with the file's path (and name) written FILE, or
    for a refusal its stderr so written."""
    out = {}
    for profiler, f in files.items():
        got, text, err = cli(args[0], f, *args[1:], "-f", "json", "--no-cache")
        assert got == code, f"{profiler}: {err}"
        text = _own_words((text if code == 0 else err).replace(str(f), "FILE").replace(f.name, "FILE"), profiler)
        out[profiler] = json.loads(text) if code == 0 else text
    return out


def _own_words(text: str, profiler: str) -> str:
    """``text`` with the profiler's own words for what records what (HINT) and for its device records (DEVICES)."""
    from tracekit.data import _record_hints

    words = _record_hints()[{"rocprof": "rocprofv3"}.get(profiler, profiler)]
    for phrase in sorted({v for k, v in words.items() if k != "devices"}, key=len, reverse=True):
        text = text.replace(phrase, "HINT")
    return text.replace(words["devices"], "DEVICES")


def _parts(doc: dict) -> dict:
    return {k: doc.get(k) for k in ("summary", "tables", "warnings")}


@pytest.mark.parametrize("args", SAME, ids=lambda a: " ".join(a))
def test_same_answers(cli, files, args):
    got = _run(cli, files, *args)
    for p in OTHERS:
        assert _parts(got[p]) == _parts(got["kineto"]), p


def test_steps_are_the_same_windows_by_default(cli, files):
    """The default step finder takes the CPU ranges as the steps where the profiler records no GPU ranges: the same
    3 windows, from the ranges' launch windows instead of the GPU spans."""
    got = _run(cli, files, "steps")
    k = got["kineto"]
    assert k["summary"]["steps"] == 3 and k["summary"]["source"] == "gpu_annotation"
    span_check = "window_covers_launched_work"
    for p in OTHERS:
        r = got[p]
        assert r["summary"].pop("source") == "cpu_launch_window"
        assert {s.pop("source") for s in r["tables"]["steps"]} == {"cpu_launch_window"}
        assert span_check not in {h["check"] for h in r["tables"]["health"]}
    k["summary"].pop("source")
    for s in k["tables"]["steps"]:
        s.pop("source")
    k["tables"]["health"] = [h for h in k["tables"]["health"] if h["check"] != span_check]
    for p in OTHERS:
        assert _parts(got[p]) == _parts(k), p


def test_report_same_but_rank_and_step_source(cli, files):
    got = _run(cli, files, "report")
    assert got["kineto"]["summary"]["rank"] == 0
    for doc in got.values():
        doc["summary"].pop("rank")
        for s in doc["tables"]["steps"]:
            s.pop("source")
        doc["tables"]["health"] = [h for h in doc["tables"]["health"] if h["check"] != "window_covers_launched_work"]
    for p in OTHERS:
        assert got[p]["summary"] and _parts(got[p]) == _parts(got["kineto"]), p


def test_allgather_same_but_event_ids(cli, files):
    got = _run(cli, files, "allgather")
    for doc in got.values():
        for rows in doc["tables"].values():
            for row in rows:
                row.pop("event_id", None)
    assert got["kineto"]["summary"]["allgathers"] > 0
    for p in OTHERS:
        assert _parts(got[p]) == _parts(got["kineto"]), p


def test_waves_same_numbers(cli, files):
    got = _run(cli, files, "waves")
    assert _parts(got["nsys"]) == _parts(got["kineto"])
    sources = got["rocprof"]["summary"]["occupancy"]["sm_limits"]["sources"]
    taken = {k for k, v in sources.items() if v != got["kineto"]["summary"]["occupancy"]["sm_limits"]["sources"][k]}
    assert taken == {"registers_per_block", "registers_per_sm", "shared_memory_per_block_optin"}
    got["rocprof"]["summary"]["occupancy"]["sm_limits"]["sources"] = sources | {
        k: got["kineto"]["summary"]["occupancy"]["sm_limits"]["sources"][k] for k in taken
    }
    assert _parts(got["rocprof"]) == _parts(got["kineto"])


def test_info_same_counts_and_times(cli, files):
    got = _run(cli, files, "info")
    k = got["kineto"]["summary"]
    assert [got[p]["summary"]["profiler"] for p in got] == ["kineto", "nsys", "rocprofv3"]
    for p in OTHERS:
        r = got[p]["summary"]
        # what only Kineto records: rank, world size, its clock's base, and the GPU spans of the CPU ranges
        assert (r["rank"], r["world_size"], r["base_time_ns"], r["gpu_annotations"]) == (None, None, None, 0)
        assert k["gpu_annotations"] == 6 and r["events_total"] == k["events_total"] - 6
        assert "gpu_annotation" not in r["recorded"]
        for key in ("kernels", "memcpys", "memsets", "comm_kernels", "streams", "num_sms", "devices_used"):
            assert r[key] == k[key], (p, key)
        for key in ("first_gpu_start_ns", "last_gpu_end_ns", "span_ns", "gpu_busy_ns", "same_stream_overlaps"):
            assert r[key] == k[key], (p, key)
    assert got["nsys"]["summary"]["devices"] == k["devices"]


def test_nsys_session_start_is_kinetos_base(files):
    import tracekit

    k, n = tracekit.load(files["kineto"]), tracekit.load(files["nsys"])
    assert n.meta["session_start_utc_ns"] == k.meta["base_time_ns"]


@pytest.mark.parametrize("command", REFUSED)
def test_same_refusal(cli, files, command):
    """The same refusal (exit 4, the same reason) on every input; where the sentence names how to record what is
    missing, it names the option of the profiler that wrote the file (tracekit/data/record_hints.json)."""
    import re

    got = _run(cli, files, command, code=4)
    assert "graph" in got["kineto"]

    def reason(text: str) -> str:  # the sentence less its "(how to record it)" part
        return re.sub(r"\((?:[^()]|\([^()]*\))*?\(?record_shapes=True\)\)?", "(…)", text)

    for p in OTHERS:
        assert reason(got[p]) == reason(got["kineto"]), p
    if "record_shapes" in got["nsys"]:
        assert "nsys profile --trace=cuda,nvtx" in got["nsys"]


@pytest.mark.parametrize("other", OTHERS)
def test_findings_compare_names_no_change(cli, files, other):
    """``findings --compare`` of the Kineto file against the same run from another profiler: nothing changed."""
    code, text, err = cli("findings", "--compare", files["kineto"], files[other], "-f", "json", "--no-cache")
    assert code == 0, err
    s = json.loads(text)["summary"]
    assert s["ops_compared"] > 0 and s["step_ms_a"] == s["step_ms_b"]
    assert (s["ops_slower"], s["config_differences"], s["findings"]) == (0, 0, 0)


@pytest.mark.parametrize("style", ["vllm", "sglang_modes", "profilerstep_rocm"])
def test_wall_same_for_other_step_markers(cli, tmp_path, style):
    """vLLM's execute_… markers (GPU and CPU spans), sglang's step[MODE …] (CPU spans of three phases) and ROCm's
    ProfilerStep#N (GPU spans of ~17 µs): the nsys file's steps and wall are Kineto's. Only Kineto has GPU spans to
    judge, so only it says that it replaced ROCm's short spans by their launch windows."""
    trace, _ = build("dp16", 4, steps=3, seed=0, step_marker=style)
    files = {
        "kineto": write_trace(tmp_path / "s.trace.json.gz", trace),
        "nsys": write_nsys(tmp_path / "s.sqlite", trace),
    }
    got = _run(cli, files, "wall")
    k, n = got["kineto"], got["nsys"]
    assert k["summary"]["steps"] >= 1 and k["summary"]["marker"] != "whole trace"
    switched = [w for w in k["warnings"] if "their windows are the launch windows" in w]
    assert bool(switched) == (style == "profilerstep_rocm")
    k["warnings"] = [w for w in k["warnings"] if w not in switched]
    assert _parts(n) == _parts(k)
