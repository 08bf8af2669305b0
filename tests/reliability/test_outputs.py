"""Outputs are written whole or not at all, and every output error is one sentence with exit 3
(docs/reliability.md, "Outputs"; ``O`` in that page is this file).

The full-disk and read-only cases mount a small tmpfs (root, or a user namespace's root); where mounting is not
permitted they skip and say so. SIGINT is sent at random points of an export's write phase in subprocesses (their
``pyarrow.parquet.write_table`` slowed down so that the phase is wide enough to hit) and at fixed points in process.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.cli.common import bundled_sample
from tracekit.render.files import OutputError
from tracekit.render.outdir import LOCK_NAME

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "fixtures" / "synthetic" / "dp16.launch.log"
INTERRUPTS = int(os.environ.get("TRACEKIT_SOAK", "3"))  # random SIGINTs per run (the soak: 200)


# --------------------------------------------------------------------------- helpers


def _one_sentence(code: int, out: str, err: str, needle: str, expect: int = 3) -> None:
    assert code == expect, (code, err)
    assert needle in err, err
    assert out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "tracekit bug" not in err


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if ".tmp-" in p.name) if d.exists() else []


def export_state(d: Path) -> str:
    """'complete:<ag>' when the manifest and every file it lists agree (sizes, rows) and nothing else is there."""
    manifest = json.loads((d / "manifest.json").read_text())
    listed = {e["file"]: e for e in manifest["tables"]}
    present = {p.name for p in d.iterdir() if p.suffix == ".parquet"}
    assert present == set(listed), (present, set(listed))
    for name, e in listed.items():
        assert (d / name).stat().st_size == e["bytes"], name
        assert len(pd.read_parquet(d / name)) == e["rows"], name
    assert _leftovers(d) == []
    return f"complete:{manifest['params']['ag']}"


@contextlib.contextmanager
def _tmpfs(where: Path, size: str, ro: bool = False):
    where.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if ro else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(
            f"mounting a tmpfs is not permitted here ({(r.stderr or r.stdout).strip() or r.returncode});"
            " run as root for the full-disk and read-only cases"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def read_only(tmp_path):
    """A directory nothing can be written into: a read-only tmpfs for root (who ignores modes), else mode 0555."""
    d = tmp_path / "ro"
    if os.geteuid() == 0:
        with _tmpfs(d, "64k", ro=True):
            yield d
    else:
        d.mkdir()
        d.chmod(0o555)
        yield d
        d.chmod(0o755)


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs with an old JSON file and an old complete export on it, then filled up."""
    d = tmp_path / "full"
    with _tmpfs(d, "1m"):
        (d / "x.json").write_text("old\n")
        tracekit.export_parquet(
            tracekit.load(bundled_sample(), cache=False),
            tracekit.load_annotation("decode_sample"),
            d / "exp",
            ag="ptop",
        )
        fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
        os.close(fd)
        yield d


# --------------------------------------------------------------------------- wrong places


@pytest.mark.parametrize("fmt", ["table", "json", "md"])
def test_out_onto_a_directory_is_one_sentence(cli, tmp_path, fmt):
    _one_sentence(*cli("info", "-f", fmt, "-o", tmp_path), "is a directory; pass a file name")


@pytest.mark.slow
def test_annotated_trace_and_plot_onto_a_directory(cli, tmp_path):
    _one_sentence(*cli("annotate", "-o", tmp_path), "is a directory")
    (tmp_path / "p.png").mkdir()
    _one_sentence(*cli("plot", "ledger", LOG, "-o", tmp_path / "p.png"), "is a directory")


@pytest.mark.slow
def test_no_folder_is_created_for_an_output_file(cli, tmp_path):
    for args in (
        ("info", "-f", "json", "-o", tmp_path / "no" / "x.json"),
        ("annotate", "-o", tmp_path / "no" / "a.json"),
        ("plot", "ledger", LOG, "-o", tmp_path / "no" / "p.png"),
    ):
        _one_sentence(*cli(*args), "does not exist; create it first")
    assert not (tmp_path / "no").exists()


def test_an_output_never_replaces_an_input(cli, tmp_path):
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(bundled_sample().read_bytes())
    before = trace.read_bytes()
    _one_sentence(*cli("info", trace, "-f", "json", "-o", trace, "--no-cache"), "is an input of this info")
    _one_sentence(*cli("annotate", trace, "-o", trace, "--no-cache"), "is an input of this annotate")
    assert trace.read_bytes() == before


@pytest.mark.slow
def test_analyze_never_reads_its_own_outputs(cli, tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "d_bs4_100k").mkdir(parents=True)
    (sweep / "d_bs4_100k" / "1-TP-0.trace.json.gz").write_bytes(bundled_sample().read_bytes())
    for out in (sweep, sweep / "out"):
        code, _, err = cli("analyze", sweep, "-j", "1", "-o", out, "--no-cache")
        assert code == 0 and (out / "analyze.json").exists() and (out / "manifest.json").exists(), err
        code, text, err = cli("analyze", sweep, "-j", "1", "--no-cache", "-f", "json")
        doc = json.loads(text)
        assert code == 0 and doc["summary"]["traces"] == 1 and doc["summary"]["points"] == ["d_bs4_100k"], err
        assert any("analyze.json: a tracekit output, not a trace" in w for w in doc["warnings"])


# --------------------------------------------------------------------------- csv names


@pytest.mark.slow
def test_csv_with_a_suffix_is_one_file_without_one_a_folder(cli, tmp_path):
    code, _, err = cli("info", "-f", "csv", "-o", tmp_path / "x.csv")
    assert code == 0 and (tmp_path / "x.csv").is_file() and "the first of" in err and "--table NAME" in err
    assert (tmp_path / "x.csv").read_text().startswith("kind,count,total_ns")
    code, _, err = cli("info", "-f", "csv", "-o", tmp_path / "all")
    assert code == 0 and "into the folder" in err and "(created)" in err
    assert "info.summary.csv" in {p.name for p in (tmp_path / "all").iterdir()}
    code, _, err = cli("info", "-f", "csv", "-o", tmp_path / "all", "--table", "ingest")
    assert code == 0 and "table ingest" in err
    code, _, err = cli("info", "-f", "csv", "-o", tmp_path / "s.csv", "--table", "summary")
    assert code == 0 and (tmp_path / "s.csv").read_text().startswith("rank,")
    assert _leftovers(tmp_path) == [] and _leftovers(tmp_path / "all") == []


# --------------------------------------------------------------------------- read-only and full


@pytest.mark.slow
def test_read_only_targets_are_one_sentence(cli, read_only):
    for args in (
        ("info", "-f", "json", "-o", read_only / "x.json"),
        ("export", "-o", read_only / "e"),
        ("info", "-f", "csv", "-o", read_only / "c"),
        ("annotate", "-o", read_only / "a.json.gz"),
        ("plot", "ledger", LOG, "-o", read_only / "p.png"),
    ):
        code, out, err = cli(*args)
        assert code == 3 and out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1, (args, err)
        assert "read-only file system" in err or "permission denied" in err, err
    assert list(read_only.iterdir()) == []


@pytest.mark.slow
def test_a_full_disk_leaves_what_was_there(cli, full_disk):
    old = export_state(full_disk / "exp")
    before = {p.name: p.read_bytes() for p in (full_disk / "exp").iterdir()}
    for args, what in (
        (("info", "-f", "json", "-o", full_disk / "x.json"), "json output"),
        (("export", "--ag", "ptop+local", "-o", full_disk / "exp"), "export"),
        (("annotate", "-o", full_disk / "a.json.gz"), "annotated trace"),
        (("info", "-f", "csv", "-o", full_disk / "c"), "csv file"),
        (("plot", "ledger", LOG, "-o", full_disk / "p.png"), "picture"),
    ):
        _one_sentence(*cli(*args), f"no space left on the device for {args[-1]}: no {what} was written")
    assert (full_disk / "x.json").read_text() == "old\n"
    assert export_state(full_disk / "exp") == old
    assert {p.name: p.read_bytes() for p in (full_disk / "exp").iterdir()} == before
    assert sorted(p.name for p in full_disk.iterdir()) == ["exp", "filler", "x.json"]  # no half file, no new folder


# --------------------------------------------------------------------------- interrupts


def _old_export(d: Path) -> str:
    tracekit.export_parquet(
        tracekit.load(bundled_sample(), cache=False), tracekit.load_annotation("decode_sample"), d, ag="ptop"
    )
    return export_state(d)


@pytest.mark.slow
def test_an_interrupt_while_writing_leaves_the_old_export(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    d = tmp_path / "exp"
    old = _old_export(d)
    real, calls = pq.write_table, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(pq, "write_table", flaky)
    trace, ann = tracekit.load(bundled_sample(), cache=False), tracekit.load_annotation("decode_sample")
    with pytest.raises(KeyboardInterrupt):
        tracekit.export_parquet(trace, ann, d, ag="ptop+local")
    assert export_state(d) == old
    monkeypatch.setattr(pq, "write_table", real)
    tracekit.export_parquet(trace, ann, d, ag="ptop+local")  # the lock was released
    assert export_state(d) == "complete:ptop+local"


@pytest.mark.slow
def test_an_interrupt_while_renaming_waits_for_the_new_export(tmp_path, monkeypatch):
    d = tmp_path / "exp"
    _old_export(d)
    real, sent = os.replace, []

    def replace(src, dst):
        if not sent and Path(dst).parent == d:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)  # held back until every file is in place
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    trace, ann = tracekit.load(bundled_sample(), cache=False), tracekit.load_annotation("decode_sample")
    # SIGINT raises KeyboardInterrupt, as in a foreground shell (a test run started in the background of a
    # non-interactive shell inherits it ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            tracekit.export_parquet(trace, ann, d, ag="ptop+local")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sent and export_state(d) == "complete:ptop+local"


_SLOW_EXPORT = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a foreground shell, whoever started the tests
import pyarrow.parquet as pq
real = pq.write_table
def slow(*a, **k):
    if not getattr(slow, "said", False):
        slow.said = True
        sys.stderr.write("writing\\n"); sys.stderr.flush()
    time.sleep(0.1)
    return real(*a, **k)
pq.write_table = slow
from tracekit.cli import run
sys.exit(run(sys.argv[1:]))
"""


def _spawn_export(d: Path, ag: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _SLOW_EXPORT, "export", "--ag", ag, "-o", str(d), "-f", "json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}


@pytest.mark.slow
def test_sigint_at_random_points_leaves_the_old_or_the_new_export(tmp_path, env):
    d = tmp_path / "exp"
    _old_export(d)
    rng = random.Random()
    seen = set()
    for i in range(INTERRUPTS):
        ag = "ptop+local" if i % 2 == 0 else "ptop"
        p = _spawn_export(d, ag, env)
        assert p.stderr.readline().strip() == "writing"
        time.sleep(rng.uniform(0.0, 1.0))  # 8 tables × 0.1 s, then the renames
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        p.stderr.close()
        state = export_state(d)
        assert state in ("complete:ptop", "complete:ptop+local"), state
        seen.add(state)
        assert not (d / LOCK_NAME).exists() or _lock_is_free(d)


def _lock_is_free(d: Path) -> bool:
    import fcntl

    with open(d / LOCK_NAME, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
    return True


# --------------------------------------------------------------------------- concurrent writers


@pytest.mark.slow
def test_a_second_writer_is_refused_in_one_sentence(cli, tmp_path):
    import fcntl

    d = tmp_path / "exp"
    _old_export(d)
    with open(d / LOCK_NAME, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        _one_sentence(*cli("export", "-o", d, "--ag", "ptop+local"), f"another tracekit is writing into {d} right now")
        with pytest.raises(OutputError, match="another tracekit"):
            tracekit.render.outdir.write_outputs(tracekit.trace_info(tracekit.load(bundled_sample(), cache=False)), d)
    assert export_state(d) == "complete:ptop"


@pytest.mark.slow
def test_concurrent_exports_leave_one_complete_export(tmp_path, env):
    d = tmp_path / "exp"
    procs = [_spawn_export(d, ag, env) for ag in ("ptop", "ptop+local", "ptop")]
    errs = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for p in procs:
        p.stderr.close()
    assert any(code == 0 for code, _ in errs), errs
    for code, err in errs:
        assert code == 0 or (code == 3 and "another tracekit is writing into" in err), (code, err)
    assert export_state(d) in ("complete:ptop", "complete:ptop+local")


# --------------------------------------------------------------------------- the manifest is the truth


def test_files_the_new_export_lacks_are_removed(cli, tmp_path):
    d = tmp_path / "exp"
    code, _, err = cli("export", "-o", d, "--log", LOG)
    assert code == 0, err
    assert (d / "ledger.parquet").exists()
    (d / "mine.txt").write_text("a file of the user's")
    code, _, err = cli("export", "-o", d)
    assert code == 0, err
    assert not (d / "ledger.parquet").exists() and (d / "mine.txt").exists()
    assert export_state(d) == "complete:ptop"
