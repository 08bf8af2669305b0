"""Shared test helpers: write small hand-built traces, run the CLI in-process."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus"


def kernel(name: str, ts: float | str, dur: float, stream: int = 7, device: int = 0, corr: int = 1, **args) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": stream, "correlation": corr, **args},
    }


def memcpy(name: str, ts: float, dur: float, nbytes: int | None = 1024, stream: int = 7, device: int = 0) -> dict:
    args = {"device": device, "stream": stream, "correlation": 1}
    if nbytes is not None:
        args["bytes"] = nbytes
    return {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def write_trace(path: Path, events: list, *, wrap: bool = True, compress: str | None = None, **top) -> Path:
    doc = {"schemaVersion": 1, **top, "traceEvents": events} if wrap else events
    text = json.dumps(doc, indent=1).encode()
    if compress == "gz":
        text = gzip.compress(text)
    elif compress == "zst":
        import zstandard

        text = zstandard.ZstdCompressor().compress(text)
    path.write_bytes(text)
    return path


def gpu_ann(name: str, ts: float, dur: float, ext: int = 1, stream: int = 7, device: int = 0) -> dict:
    """A gpu_user_annotation span (a GPU step marker), paired to its CPU half by ``External id``."""
    return {
        "ph": "X",
        "cat": "gpu_user_annotation",
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"External id": ext},
    }


def cpu_ann(name: str, ts: float, dur: float, ext: int | None = None) -> dict:
    """A CPU user_annotation span (a CPU step marker)."""
    ev = {"ph": "X", "cat": "user_annotation", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur}
    if ext is not None:
        ev["args"] = {"External id": ext}
    return ev


def launch(name: str, ts: float, corr: int) -> dict:
    """A runtime launch (cudaLaunchKernel, cudaGraphLaunch, …) with its correlation id."""
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": 1.0,
        "args": {"correlation": corr},
    }


def load_events(tmp_path: Path, events: list, name: str = "t.json", **top):
    """Write ``events`` as a trace (``top``: more top-level keys) and load it without the cache."""
    import tracekit

    return tracekit.load(write_trace(tmp_path / name, events, **top), cache=False)


def comparable_doc(result) -> dict:
    """The ``--format json`` document of a Result (or of its printed text), without each input's ``from_cache`` —
    the one field that differs between a run that read the cache and one that did not — so two runs compare equal."""
    doc = json.loads(result if isinstance(result, str) else result.to_json())
    for inp in doc.get("inputs", []):
        inp.pop("from_cache", None)
    return doc


@pytest.fixture
def cli(capsys):
    """Run `tracekit ARGS...` in-process: returns (exit code, stdout, stderr)."""
    from tracekit.cli import run

    def invoke(*args: str):
        code = run([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


# The quick tier (`pytest -m "not slow"`, under 2 minutes on 2 cores) stays quick only if what grows slow is marked
# slow: the summary names every test without the mark that took longer than QUICK_TEST_S (setup + call + teardown).
QUICK_TEST_S = 5.0
_TOOK: dict[str, float] = {}
_NOT_SLOW: set[str] = set()


def pytest_runtest_setup(item):
    if item.get_closest_marker("slow") is None:
        _NOT_SLOW.add(item.nodeid)


def pytest_runtest_logreport(report):
    _TOOK[report.nodeid] = _TOOK.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    over = sorted(((s, n) for n, s in _TOOK.items() if n in _NOT_SLOW and s > QUICK_TEST_S), reverse=True)
    if over:
        terminalreporter.section(
            "tests not marked slow that took over %.0f s (mark them @pytest.mark.slow)" % QUICK_TEST_S
        )
        for s, n in over:
            terminalreporter.write_line(f"{s:6.1f} s  {n}")


BF16 = "c10::BFloat16"


def op(name: str, ts: float, dur: float, dims=None, types=None, concrete=None, tid: int = 100) -> dict:
    args = {"External id": 1}
    if dims is not None:
        args.update({"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete or [""] * len(dims)})
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}


def gemm_trace(tmp_path):
    """linear > addmm > one GEMM kernel (M 64, N 4096, K 1024, 20 µs); a sibling mul that ended before; a copy_
    launching two kernels (the longer carries the bytes); a kernel launched outside every op; a graph replay."""
    ev = [
        cpu_ann("ProfilerStep#1", 0.0, 400.0, ext=9),
        gpu_ann("ProfilerStep#1", 10.0, 380.0, ext=9),
        op("aten::mul", 1.0, 5.0, [[64, 1024], [64, 1024]], [BF16, BF16]),
        launch("cudaLaunchKernel", 2.0, 1),
        kernel("mul_kernel", 10.0, 2.0, corr=1),
        op("aten::linear", 10.0, 30.0, [[64, 1024], [4096, 1024], [4096]], [BF16, BF16, BF16]),
        op("aten::t", 11.0, 1.0, [[4096, 1024]], [BF16]),
        op(
            "aten::addmm",
            13.0,
            20.0,
            [[4096], [64, 1024], [1024, 4096], [], []],
            [BF16, BF16, BF16, "Scalar", "Scalar"],
        ),
        launch("cudaLaunchKernel", 15.0, 2),
        kernel("gemm_kernel", 20.0, 20.0, corr=2),
        op("aten::copy_", 50.0, 10.0, [[1000], [1000]], [BF16, "float"]),
        launch("cudaLaunchKernel", 51.0, 3),
        kernel("copy_long", 50.0, 3.0, corr=3),
        launch("cudaLaunchKernel", 52.0, 4),
        kernel("copy_short", 60.0, 1.0, corr=4),
        launch("cudaLaunchKernel", 70.0, 5),
        kernel("orphan", 80.0, 5.0, corr=5),
        launch("cudaGraphLaunch", 90.0, 6),
        kernel("replayed", 100.0, 50.0, corr=6),
        op("aten::zero_dur", 95.0, 0.0, [[1]], [BF16]),
    ]
    return load_events(
        tmp_path, ev, "s.json", deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]
    )


def write_as_rank(source: Path, target: Path, rank: int) -> Path:
    """``source`` (a gzipped Kineto trace) written to ``target`` as rank ``rank`` of a run: its
    ``distributedInfo.rank`` set, so that two copies are two ranks (two files that claim one rank are refused)."""
    import gzip
    import json

    doc = json.loads(gzip.decompress(Path(source).read_bytes()))
    doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": rank}
    Path(target).write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    return Path(target)
