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
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": stream, "correlation": corr, **args}}


def memcpy(name: str, ts: float, dur: float, nbytes: int | None = 1024, stream: int = 7, device: int = 0) -> dict:
    args = {"device": device, "stream": stream, "correlation": 1}
    if nbytes is not None:
        args["bytes"] = nbytes
    return {"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": args}


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
