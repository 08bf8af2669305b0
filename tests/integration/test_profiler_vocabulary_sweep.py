"""One vocabulary over every command (issue 42): on an Nsight Systems export and a rocprofv3 JSON of one synthetic
deployment (fixtures/synthlib), no command's JSON or stderr words Kineto's options or records (ProfilerActivity,
record_shapes outside PyTorch's emit_nvtx, deviceProperties, …); a command that needs what the file lacks names the
profiler's own option (tracekit/data/record_hints.json)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from fixtures.synth import build
from fixtures.synthlib.nsys import write_nsys
from fixtures.synthlib.rocprof import write_rocprof
from tests.unit.core.test_profiler_vocabulary import kineto_only

pytestmark = pytest.mark.slow

COMMANDS = [
    ("info",),
    ("kernels",),
    ("kernels", "--by", "op"),
    ("steps",),
    ("wall",),
    ("temporal",),
    ("overlap",),
    ("stats",),
    ("layers",),
    ("suggest",),
    ("allgather",),
    ("exposure",),
    ("comm",),
    ("report",),
    ("findings",),
    ("roofline",),
    ("hbm",),
    ("replay",),
    ("waves",),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocabulary")
    trace, _ = build("dp16", 4, steps=2, seed=0)
    return {"nsys": write_nsys(d / "synth.sqlite", trace), "rocprofv3": write_rocprof(d / "synth.json", trace)}


@pytest.mark.parametrize("profiler", ["nsys", "rocprofv3"])
def test_no_kineto_words_on_other_profilers(cli, files, profiler):
    said = []
    for args in COMMANDS:
        code, out, err = cli(args[0], files[profiler], *args[1:], "-f", "json", "--no-cache")
        assert code in (0, 4), (args, err)
        said.append((args, out + err))
    bad = {" ".join(a): kineto_only(t) for a, t in said if kineto_only(t)}
    assert not bad, bad
    refusals = " ".join(t for a, t in said if a[0] in ("roofline", "hbm"))
    own = {"nsys": "nsys profile --trace=cuda,nvtx", "rocprofv3": "rocprofv3 records no PyTorch op"}[profiler]
    assert own in refusals
    waves = json.loads(next(t for a, t in said if a == ("waves",)))
    assert (
        waves["summary"]["sms_from"]
        == {"nsys": "trace TARGET_INFO_GPU", "rocprofv3": "trace rocprofv3 agents"}[profiler]
    )


def test_rocprof_without_hip_trace_graph_launches_unknown(cli, files, tmp_path):
    """A rocprofv3 JSON recorded without --hip-trace: replay says graph launches are unknown and what records them."""
    doc = json.loads(files["rocprofv3"].read_text())
    for proc in doc["rocprofiler-sdk-tool"]:
        proc["buffer_records"].pop("hip_api", None)
    p = tmp_path / "nohip.json"
    p.write_text(json.dumps(doc))
    code, _, err = cli("replay", p, "--no-cache")
    assert code == 4 and "unknown" in err and "rocprofv3 --hip-trace" in err and "no hipGraphLaunch" not in err


def test_nsys_without_target_info_gpu_devices_unknown(cli, files, tmp_path):
    p = tmp_path / "nogpu.sqlite"
    p.write_bytes(files["nsys"].read_bytes())
    with sqlite3.connect(p) as con:
        con.execute("DROP TABLE TARGET_INFO_GPU")
    code, out, err = cli("info", p, "-f", "json", "--no-cache")
    assert code == 0, err
    doc = json.loads(out)
    s = doc["summary"]
    assert s["devices"] is None and s["device_names_missing"] == s["gpus_used"] > 0
    assert any("TARGET_INFO_GPU" in w and "unknown" in w for w in doc["warnings"])


@pytest.mark.parametrize("profiler", ["nsys", "rocprofv3"])
def test_annotate_needs_a_chrome_trace(cli, files, profiler, tmp_path):
    """annotate writes tracks into the source's Chrome-trace JSON: another profiler's file is exit 4, one sentence
    (a rocprofv3 JSON was an unexpected KeyError, exit 1)."""
    code, _, err = cli("annotate", files[profiler], "-o", tmp_path / "a.json", "--no-cache")
    assert code == 4 and "tracekit export" in err and err.count("\n") == 1
    assert not (tmp_path / "a.json").exists()
