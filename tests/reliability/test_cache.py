"""The cache trusts nothing it should not (issues 20 and 26): it never replays an answer for a file that changed — a
same-size, same-mtime replacement or mid-file edit misses, a file that changed while it was read is not cached — and
it owns only what it wrote: `cache clear` leaves a user's files, a FIFO or link at an entry's path is neither opened
nor replaced, a cache folder that cannot be used is a warning (the load still succeeds), and a write killed by
SIGTERM, SIGHUP or SIGINT leaves no temporary file (one left by SIGKILL is removed once stale)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tracekit
from tests.conftest import comparable_doc, kernel, write_trace
from tracekit.cache import trace_entries as _cache
from tracekit.cache import keys as cache_key
from tracekit.cache.admin import cache_clear, cache_info
from tracekit.cache.tempfiles import STALE_TMP_S

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_warnings():
    _cache._warned.clear()  # one warning per folder and cause per process: each test starts afresh
    yield
    _cache._warned.clear()


def _trace(tmp_path, name, dur):
    evs = [
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "scheduler.run_batch",
            "pid": 0,
            "tid": 7,
            "ts": 0.0,
            "dur": 20_000.0,
        },
        kernel("k", 10.0, dur),
    ]
    return write_trace(tmp_path / name, evs)


def _busy(trace) -> list[int]:
    return tracekit.decompose(trace).tables["per_step"]["busy_ns"].tolist()


def _env(tmp_path) -> dict:
    return {**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "envcache"), "PYTHONPATH": str(ROOT)}


def _cli(args, env, timeout):
    code = "import sys; from tracekit.cli import run; sys.exit(run(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )


# --------------------------------------------------------------------------- never a stale answer


def test_a_replacement_of_the_same_size_and_mtime_misses(tmp_path):
    """`wall` said 10 ms busy when the file held 15 ms (the file was replaced with cp -p)."""
    p = _trace(tmp_path, "t.json", 10_000.0)
    first = tracekit.load(p)
    assert _busy(first) == [10_000_000]
    st = os.stat(p)
    other = _trace(tmp_path, "u.json", 15_000.0)
    assert other.stat().st_size == st.st_size  # same length: only the content differs
    os.replace(other, p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = tracekit.load(p)
    assert again.report.from_cache is False
    assert _busy(again) == [15_000_000]
    assert tracekit.load(p).report.from_cache is True


def _edit_in_place(p: Path, old: bytes, new: bytes) -> int:
    """Overwrite ``old`` by ``new`` (same length) in the file itself — same inode, same size — and put its mtime
    back; returns the offset edited."""
    assert len(old) == len(new)
    data = p.read_bytes()
    at = data.index(old)
    st = os.stat(p)
    with open(p, "r+b") as fh:
        fh.seek(at)
        fh.write(new)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(p)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    return at


def _padded(tmp_path, name="mid.json", pad=4000, dur=10_000.0):
    """A trace whose kernel sits mid-file, far from both ends (the 64 KiB the key once read at each end)."""
    evs = [kernel(f"pad{i}", float(i), 0.5, stream=9) for i in range(pad)]
    evs.insert(pad // 2, kernel("k", 30_000.0, dur))
    evs.insert(
        0,
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "scheduler.run_batch",
            "pid": 0,
            "tid": 7,
            "ts": 29_000.0,
            "dur": 20_000.0,
        },
    )
    return write_trace(tmp_path / name, evs)


def test_a_mid_file_edit_of_the_same_size_and_mtime_misses(tmp_path):
    """An edit in the middle of the trace, in place, that keeps its size and (put back) its mtime: the old
    analysis must not come back. Before issue 26 the key read the first and last 64 KiB only."""
    p = _padded(tmp_path)
    assert p.stat().st_size > 4 * 65536
    first = tracekit.load(p)
    assert _busy(first) == [10_000_000]
    at = _edit_in_place(p, b'"dur": 10000.0', b'"dur": 15000.0')
    assert 65536 < at < p.stat().st_size - 65536
    again = tracekit.load(p)
    assert again.report.from_cache is False
    assert _busy(again) == [15_000_000]
    assert tracekit.load(p).report.from_cache is True


class _FrozenCtimeOs:
    """``os`` as the cache module sees it on a file system whose ctime never moves (or for an edit in the same
    clock tick as the file's last change): the checksum alone must catch the edit."""

    class _St:
        def __init__(self, st):
            self._st = st

        def __getattr__(self, name):
            return 7 if name == "st_ctime_ns" else getattr(self._st, name)

    def __getattr__(self, name):
        return getattr(os, name)

    def stat(self, *a, **kw):
        return self._St(os.stat(*a, **kw))

    def fstat(self, *a, **kw):
        return self._St(os.fstat(*a, **kw))


@pytest.mark.parametrize("mode", ["whole", "sampled+racy"])
def test_the_checksum_alone_catches_a_mid_file_edit(tmp_path, monkeypatch, mode):
    """Size, mtime, ctime and inode all agree; only the CRC-32 of the content differs. `whole`: a file up to
    WHOLE_MAX is summed byte for byte. `sampled+racy`: a big file changed in the last RACY_NS is summed whole too."""
    monkeypatch.setattr(cache_key, "os", _FrozenCtimeOs())
    if mode != "whole":
        monkeypatch.setattr(cache_key, "WHOLE_MAX", 0)  # every file is "big"; it was just written, so it is racy
    p = _padded(tmp_path)
    assert _busy(tracekit.load(p)) == [10_000_000]
    assert cache_key.key(p)["whole"] is True
    _edit_in_place(p, b'"dur": 10000.0', b'"dur": 15000.0')
    again = tracekit.load(p)
    assert again.report.from_cache is False and _busy(again) == [15_000_000]


@pytest.mark.slow
def test_a_big_file_is_sampled_and_an_edit_between_samples_is_caught_by_ctime(tmp_path, monkeypatch):
    """A file above WHOLE_MAX, last changed long ago, is summed over blocks spread over it; an edit that no block
    covers still moves ctime (every write does, and so does the utime that puts mtime back)."""
    monkeypatch.setattr(cache_key, "WHOLE_MAX", 0)
    monkeypatch.setattr(cache_key, "RACY_NS", -(10**18))  # never racy
    p = _padded(tmp_path, pad=20_000)
    first = tracekit.load(p)
    assert first.report.from_cache is False and cache_key.key(p)["whole"] is False
    at = p.read_bytes().index(b'"dur": 10000.0')
    covered = [(o, o + n) for o, n in cache_key._samples(p.stat().st_size)]
    assert not any(a <= at + 8 < b for a, b in covered)  # the edited byte is in no sampled block
    ctime = os.stat(p).st_ctime_ns
    time.sleep(0.02)  # past the file-time clock's tick
    _edit_in_place(p, b'"dur": 10000.0', b'"dur": 15000.0')
    assert os.stat(p).st_ctime_ns != ctime
    again = tracekit.load(p)
    assert again.report.from_cache is False and _busy(again) == [15_000_000]
    assert tracekit.load(p).report.from_cache is True


def test_a_file_that_changed_while_it_was_read_is_not_cached(tmp_path):
    p = _trace(tmp_path, "t.json", 10_000.0)
    before = cache_key.key(p)
    trace = tracekit.load(p, cache=False)
    with open(p, "a") as fh:
        fh.write("\n")  # the writer was still appending
    assert _cache.write(p, trace, before=before) is None
    assert _cache.read(p) is None
    assert _cache.write(p, trace, before=cache_key.key(p)) is not None


# --------------------------------------------------------------------------- FIFOs and links at an entry's path


def _load_within(p, seconds, **kw):
    """tracekit.load in a thread; fails (and unblocks a FIFO reader) if it has not returned within ``seconds``."""
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("t", tracekit.load(p, **kw)), daemon=True)
    t0 = time.monotonic()
    th.start()
    th.join(seconds)
    if th.is_alive():
        entry = _cache.cache_path(Path(p), kw.get("cache_dir"))
        fd = os.open(entry, os.O_WRONLY | os.O_NONBLOCK)  # a writer lets the blocked open() return
        os.close(fd)
        th.join(5)
        pytest.fail(f"tracekit.load blocked for more than {seconds} s")
    return box["t"], time.monotonic() - t0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_at_the_entry_path_is_neither_opened_nor_replaced(tmp_path, caplog):
    p = _trace(tmp_path, "t.json", 10_000.0)
    cdir = tmp_path / "cache"
    cdir.mkdir()
    entry = _cache.cache_path(p, cdir)
    os.mkfifo(entry)
    with caplog.at_level(logging.WARNING, logger="tracekit.cache.trace_entries"):
        t, took = _load_within(p, 5, cache_dir=cdir)
    assert t.report.from_cache is False and _busy(t) == [10_000_000]
    assert took < 5
    assert stat.S_ISFIFO(os.lstat(entry).st_mode)  # left as it was
    assert any("is a FIFO" in r.getMessage() and str(entry) in r.getMessage() for r in caplog.records)
    info = cache_info(cdir)  # neither blocks on it nor counts it
    assert info.summary["entries"] == 0 and info.summary["other_files"] == 1
    assert cache_clear(cdir).summary["removed"] == 0 and stat.S_ISFIFO(os.lstat(entry).st_mode)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_the_cli_info_with_a_fifo_at_the_entry_path_returns(tmp_path):
    """What the user saw: `tracekit info` blocked forever. A subprocess, killed if it outlives the timeout."""
    p = _trace(tmp_path, "t.json", 10_000.0)
    env = _env(tmp_path)
    cdir = Path(env["TRACEKIT_CACHE_DIR"])
    cdir.mkdir()
    os.mkfifo(_cache.cache_path(p, cdir))
    t0 = time.monotonic()
    try:
        r = _cli(["info", p, "--format", "json"], env, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("tracekit info blocked on a FIFO at its cache entry's path")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"][0]["from_cache"] is False
    assert "Traceback" not in r.stderr and "is a FIFO" in r.stderr
    again = _cli(["info", p, "--format", "json"], env, timeout=60)
    assert again.returncode == 0 and json.loads(again.stdout)["inputs"][0]["from_cache"] is False
    print(f"info with a FIFO at the entry path: {took:.2f} s (the process, imports included)")


def test_a_symlink_at_the_entry_path_is_not_followed_nor_replaced(tmp_path):
    p = _trace(tmp_path, "t.json", 10_000.0)
    cdir = tmp_path / "cache"
    cdir.mkdir()
    mine = tmp_path / "precious.arrow"
    mine.write_bytes(b"the user's own bytes")
    entry = _cache.cache_path(p, cdir)
    entry.symlink_to(mine)
    t = tracekit.load(p, cache_dir=cdir)
    assert t.report.from_cache is False and _busy(t) == [10_000_000]
    assert entry.is_symlink() and mine.read_bytes() == b"the user's own bytes"
    assert cache_clear(cdir).summary["removed"] == 0
    assert entry.is_symlink() and mine.read_bytes() == b"the user's own bytes"


# --------------------------------------------------------------------------- a cache folder that cannot be used


def test_a_cache_dir_that_is_a_file_is_a_warning_and_the_load_succeeds(tmp_path, caplog):
    """Root reads and writes through any chmod, so a folder that cannot be used is simulated by a path that is a
    file (ENOTDIR/EEXIST on every use); a real permission denial is below (as another user) and monkeypatched."""
    p = _trace(tmp_path, "t.json", 10_000.0)
    not_a_dir = tmp_path / "cachefile"
    not_a_dir.write_bytes(b"user data")
    with caplog.at_level(logging.WARNING, logger="tracekit.cache.trace_entries"):
        for _ in range(2):
            t = tracekit.load(p, cache_dir=not_a_dir)
            assert t.report.from_cache is False and _busy(t) == [10_000_000]
    warned = [r.getMessage() for r in caplog.records if r.name == "tracekit.cache.trace_entries"]
    assert len(warned) == 1 and f"the cache folder {not_a_dir} is a file" in warned[0]  # once, not per load
    assert not_a_dir.read_bytes() == b"user data"


@pytest.mark.slow
def test_the_cli_with_a_cache_dir_that_is_a_file(tmp_path):
    p = _trace(tmp_path, "t.json", 10_000.0)
    not_a_dir = tmp_path / "cachefile"
    not_a_dir.write_bytes(b"user data")
    env = _env(tmp_path)
    r = _cli(["info", p, "--cache-dir", not_a_dir, "--format", "json"], env, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["summary"]
    assert "Traceback" not in r.stderr and "is a file, not a folder" in r.stderr
    for action in ("info", "clear"):
        r = _cli(["cache", action, "--cache-dir", not_a_dir], env, timeout=120)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert str(not_a_dir) in r.stderr and "--cache-dir" in r.stderr
    assert not_a_dir.read_bytes() == b"user data"


def test_permission_denied_on_the_cache_folder_is_a_warning(tmp_path, monkeypatch, caplog):
    """EACCES on every path in the cache folder (what a non-root user gets from a chmod 000 folder), monkeypatched
    because the tests run as root."""
    p = _trace(tmp_path, "t.json", 10_000.0)
    cdir = tmp_path / "cache"
    real_lstat, real_mkdir = os.lstat, Path.mkdir

    def lstat(path, *a, **kw):
        if str(path).startswith(str(cdir)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_lstat(path, *a, **kw)

    def mkdir(self, *a, **kw):
        if str(self).startswith(str(cdir)):
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *a, **kw)

    monkeypatch.setattr(_cache.os, "lstat", lstat)
    monkeypatch.setattr(Path, "mkdir", mkdir)
    with caplog.at_level(logging.WARNING, logger="tracekit.cache.trace_entries"):
        t = tracekit.load(p, cache_dir=cdir)
    assert t.report.from_cache is False and _busy(t) == [10_000_000]
    warned = [r.getMessage() for r in caplog.records if r.name == "tracekit.cache.trace_entries"]
    assert warned and all("permission denied" in w and str(cdir) in w and "--cache-dir" in w for w in warned)


def _can_drop_to_nobody() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and hasattr(os, "setuid")


_AS_NOBODY = r"""
import contextlib, io, os, sys
import isal.isal_zlib, pyarrow.ipc  # noqa: F401 - the interpreter's files are root's: import all first
from tracekit.cli import run
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    run(["info", sys.argv[1], "--no-cache", "--format", "json"])
import logging
logging.getLogger().handlers.clear()  # basicConfig bound its handler to the captured stderr
os.setgid(65534)
os.setuid(65534)
assert not os.access(sys.argv[2], os.R_OK)
sys.exit(run(["info", sys.argv[1], "--format", "json"]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not _can_drop_to_nobody(), reason="needs root to become another user")
def test_an_unreadable_cache_folder_for_a_real_user(tmp_path):
    """The real thing, not simulated: the child process becomes `nobody` (uid 65534) after its imports and loads a
    trace whose cache folder is chmod 000."""
    base = Path(f"/tmp/tk-cache-perm-{os.getpid()}")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    try:
        os.chmod(base, 0o755)
        p = _trace(base, "t.json", 10_000.0)
        os.chmod(p, 0o644)
        cdir = base / "cache"
        cdir.mkdir()
        os.chmod(cdir, 0o000)
        env = {**_env(tmp_path), "TRACEKIT_CACHE_DIR": str(cdir)}
        r = subprocess.run(
            [sys.executable, "-c", _AS_NOBODY, str(p), str(cdir)],
            capture_output=True,
            text=True,
            env=env,
            cwd="/",
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["inputs"][0]["from_cache"] is False
        assert "Traceback" not in r.stderr and "permission denied" in r.stderr and str(cdir) in r.stderr
        cache_lines = [line for line in r.stderr.strip().splitlines() if "cache folder" in line]
        assert len(cache_lines) == 1, r.stderr  # one cache warning, for the read and the write (info's own aside)
        assert os.listdir(cdir) == []
    finally:
        if (base / "cache").exists():
            os.chmod(base / "cache", 0o755)
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- signals during a write


_SLOW_WRITE = r"""
import signal, sys, time
import pyarrow.ipc
import tracekit

# the signals as a shell starts a command in the foreground: a test run under nohup inherits SIGHUP ignored, one
# started in the background of a non-interactive shell SIGINT ignored (and then Python raises no KeyboardInterrupt)
for name in ("SIGTERM", "SIGHUP"):
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.default_int_handler)

real = pyarrow.ipc.new_file
class Slow:                        # the cache's Arrow writer, stopped once its temporary file is whole
    def __init__(self, writer):
        self.writer = writer
    def __enter__(self):
        self.writer.__enter__()
        return self
    def __exit__(self, *exc):
        return self.writer.__exit__(*exc)
    def write_table(self, table):
        self.writer.write_table(table)
        print("writing", flush=True)
        time.sleep(60)
pyarrow.ipc.new_file = lambda *a, **kw: Slow(real(*a, **kw))
tracekit.load(sys.argv[1], cache_dir=sys.argv[2])
print("done", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [s for s in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, s)])
def test_a_signal_during_a_cache_write_leaves_no_temporary_file(tmp_path, sig):
    p = _trace(tmp_path, "t.json", 10_000.0)
    cdir = tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITE, str(p), str(cdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        cwd=ROOT,
    )
    try:
        assert proc.stdout.readline().strip() == "writing", proc.stderr.read()
        assert [f.name for f in cdir.iterdir() if f.name.startswith(".tmp-")]  # caught mid-write
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == -getattr(signal, sig), (proc.returncode, err)  # it ends as the signal says
    assert "done" not in out
    assert list(cdir.iterdir()) == []  # no temporary file, and no entry (the write did not finish)
    assert tracekit.load(p, cache_dir=cdir).report.from_cache is False


_REAL_LOAD = r"""
import sys, tracekit
print("start", flush=True)
tracekit.load(sys.argv[1], cache_dir=sys.argv[2])
print("done", flush=True)
"""


@pytest.mark.slow
def test_sigterm_at_random_points_of_a_real_load_leaves_no_temporary_file(tmp_path):
    """Unpatched: SIGTERM at a random moment of a load (decode, table conversion, the Arrow write, the rename) leaves
    no temporary file; when an entry is there it is whole and used."""
    import random

    p = write_trace(tmp_path / "big.json", [kernel(f"k{i % 50}", float(i), 0.5) for i in range(20_000)])
    cdir = tmp_path / "cache"
    rng = random.Random(26)
    outcomes = set()
    for _ in range(3):
        shutil.rmtree(cdir, ignore_errors=True)
        proc = subprocess.Popen(
            [sys.executable, "-c", _REAL_LOAD, str(p), str(cdir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(tmp_path),
            cwd=ROOT,
        )
        try:
            assert proc.stdout.readline().strip() == "start"
            time.sleep(rng.uniform(0.0, 1.5))
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        finally:
            proc.kill() if proc.poll() is None else None
        outcomes.add(proc.returncode)
        left = [f.name for f in cdir.iterdir()] if cdir.exists() else []
        assert not [n for n in left if n.startswith(".tmp-")], left
        if left:
            t = tracekit.load(p, cache_dir=cdir)
            assert t.report.from_cache is True and len(t.events) == 20_000
    assert outcomes <= {0, -signal.SIGTERM}


def test_a_handler_of_the_callers_own_is_kept(tmp_path):
    """A program that handles SIGTERM itself keeps its handler during the write (and after)."""
    p = _trace(tmp_path, "t.json", 10_000.0)
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    mine = lambda signum, frame: None  # noqa: E731
    old = signal.signal(signal.SIGTERM, mine)
    try:
        tracekit.load(p, cache_dir=tmp_path / "c")
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)
    tracekit.load(p, cache_dir=tmp_path / "d")
    assert signal.getsignal(signal.SIGTERM) == old


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_stale_temporary_files_are_removed_fresh_ones_left(tmp_path):
    """A write killed by SIGKILL or a power cut leaves its temporary file: `cache clear` and the next write remove it
    once no write has touched it for STALE_TMP_S; a fresh one may be a write in progress and is left."""
    cdir = tmp_path / "cache"
    cdir.mkdir()
    legacy = cdir / ".tmp-abcd1234.arrow"  # mkstemp's name before issue 26
    legacy.write_bytes(b"ARROW1\x00\x00partial")
    killed = cdir / ".tmp-tracekit-4242-zz_9abcd.arrow"
    killed.write_bytes(b"")
    fresh = cdir / ".tmp-tracekit-4243-abcdefgh.arrow"
    fresh.write_bytes(b"ARROW1\x00\x00in progress")
    users = cdir / ".tmp-notes.arrow"  # not a name tracekit writes
    users.write_bytes(b"ARROW1 but mine")
    for f in (legacy, killed, users):
        _age(f, STALE_TMP_S + 60)
    info = cache_info(cdir).summary
    assert (info["entries"], info["temporary_files"], info["stale_temporary_files"], info["other_files"]) == (
        0,
        3,
        2,
        1,
    )
    res = cache_clear(cdir)
    assert res.summary["stale_temporary_files_removed"] == 2 and res.summary["temporary_files_left"] == 1
    assert sorted(f.name for f in cdir.iterdir()) == sorted([fresh.name, users.name])
    # the next write sweeps too
    legacy.write_bytes(b"ARROW1\x00\x00partial")
    _age(legacy, STALE_TMP_S + 60)
    p = _trace(tmp_path, "t.json", 10_000.0)
    tracekit.load(p, cache_dir=cdir)
    assert not legacy.exists() and fresh.exists() and users.exists()


# --------------------------------------------------------------------------- cache clear owns only its entries


def _users_files(cdir: Path) -> dict[str, bytes]:
    """What a user (or tracekit's own export) keeps in the folder they pointed --cache-dir at."""
    cdir.mkdir(parents=True, exist_ok=True)
    table = pa.table({"a": [1, 2, 3]})
    pq.write_table(table, cdir / "notes.parquet")
    with pa.ipc.new_file(str(cdir / "x.arrow"), table.schema) as w:
        w.write_table(table)
    # an export of tracekit's, and a parquet whose metadata even says tracekit, but not under an entry's name
    tagged = table.replace_schema_metadata({b"tracekit": json.dumps({"key": {"format": 3}, "report": {}}).encode()})
    pq.write_table(tagged, cdir / "events.parquet")
    # under an entry-like name: an Arrow file without tracekit's key, and garbage
    with pa.ipc.new_file(str(cdir / "mine.0123456789abcdef0123.arrow"), table.schema) as w:
        w.write_table(table)
    (cdir / "data.fedcba9876543210fedc.parquet").write_bytes(b"PAR1 not really")
    (cdir / "readme.txt").write_text("mine")
    return {f.name: f.read_bytes() for f in cdir.iterdir()}


def test_cache_clear_leaves_the_users_files(tmp_path):
    cdir = tmp_path / "cache"
    mine = _users_files(cdir)
    p = _trace(tmp_path, "t.json", 10_000.0)
    tracekit.load(p, cache_dir=cdir)
    entry = _cache.cache_path(p, cdir)
    info = cache_info(cdir)
    assert info.summary["entries"] == 1 and info.tables["entries"]["file"].tolist() == [entry.name]
    assert info.summary["other_files"] == len(mine) and info.summary["total_bytes"] == entry.stat().st_size
    res = cache_clear(cdir)
    assert res.summary["removed"] == 1 and res.tables["removed"]["file"].tolist() == [entry.name]
    assert res.summary["other_files_left"] == len(mine) and any("not tracekit cache entries" in w for w in res.warnings)
    assert {f.name: f.read_bytes() for f in cdir.iterdir()} == mine  # every byte of theirs, nothing of ours


@pytest.mark.slow
def test_the_cli_cache_clear_leaves_the_users_files(tmp_path):
    env = _env(tmp_path)
    cdir = tmp_path / "given"
    mine = _users_files(cdir)
    p = _trace(tmp_path, "t.json", 10_000.0)
    r = _cli(["info", p, "--cache-dir", cdir, "--format", "json"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert _cache.cache_path(p, cdir).exists()
    r = _cli(["cache", "clear", "--cache-dir", cdir, "--format", "json"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"]["removed"] == 1
    assert {f.name: f.read_bytes() for f in cdir.iterdir()} == mine


def test_an_entry_cut_after_its_schema_is_still_recognised_and_cleared(tmp_path):
    """The schema (with tracekit's key) is at the start of the file too, so an entry damaged later is still ours."""
    cdir = tmp_path / "cache"
    p = _trace(tmp_path, "t.json", 10_000.0)
    tracekit.load(p, cache_dir=cdir)
    entry = _cache.cache_path(p, cdir)
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2])
    assert tracekit.load(p, cache_dir=cdir).report.from_cache is False  # rebuilt
    entry.write_bytes(data[: len(data) // 2])
    assert cache_info(cdir).summary["entries"] == 1
    assert cache_clear(cdir).summary["removed"] == 1 and list(cdir.iterdir()) == []


# --------------------------------------------------------------------------- issue 41: checksummed entries


def _flipped(good: bytes, offset: int) -> bytes:
    data = bytearray(good)
    data[offset] ^= 1 << (offset % 8)  # one bit, a different one from byte to byte
    return bytes(data)


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def warned():
    """The cache's warnings (trace and result entries), as their messages."""
    h = _Warnings()
    logger = logging.getLogger("tracekit.cache")
    logger.addHandler(h)
    yield h.messages
    logger.removeHandler(h)


@pytest.mark.slow
def test_a_bit_flipped_anywhere_in_a_trace_entry_is_never_served(tmp_path, warned):
    """Every offset of a small trace entry, one bit each: the read is the fresh table, or None with one warning
    naming the entry (which is removed); then the load at a spread of those offsets gives the fresh answer and
    writes the entry anew. Before the seal, 1 flip in 16 was served as a wrong result (issue 41)."""
    p = _trace(tmp_path, "t.json", 5_000.0)
    cdir = tmp_path / "cache"
    fresh = tracekit.load(p, cache=False)
    tracekit.load(p, cache_dir=cdir)
    entry = _cache.cache_path(p, cdir)
    good = entry.read_bytes()
    wrong, detected = [], 0
    for offset in range(len(good)):
        entry.write_bytes(_flipped(good, offset))
        warned.clear()
        got = _cache.read(p, cdir)
        if got is None:
            assert len(warned) == 1 and str(entry) in warned[0] and "damaged" in warned[0], (offset, warned)
            assert not entry.exists(), offset  # dropped
            detected += 1
        elif not got.events.equals(fresh.events) or got.meta != fresh.meta:
            wrong.append(offset)
    assert wrong == []
    assert detected == len(good)  # CRC-32 finds every single-bit flip: none is even served unchanged
    for offset in range(0, len(good), max(1, len(good) // 16)):
        entry.write_bytes(_flipped(good, offset))
        warned.clear()
        t = tracekit.load(p, cache_dir=cdir)
        assert not t.report.from_cache and t.events.equals(fresh.events) and len(warned) == 1, offset
        assert entry.read_bytes() == good, offset  # rebuilt, byte for byte
        assert tracekit.load(p, cache_dir=cdir).report.from_cache


@pytest.mark.slow
def test_a_bit_flipped_anywhere_in_a_result_entry_is_never_served(tmp_path, warned):
    """Every offset of a small result entry (a Result with a table of each kind of column), one bit each: get()
    gives the Result stored, or None with one warning (the entry removed) — never another Result."""
    import numpy as np
    import pandas as pd

    from tracekit.cache import result_entries
    from tracekit.result import Result

    table = pd.DataFrame(
        {
            "step": np.array([0, 1], dtype="int64"),
            "name": pd.array(["a", None], dtype="str"),
            "overlapped_ns": pd.array([0, None], dtype="Int64"),
            "pct": [0.5, float("nan")],
            "ok": [True, False],
        }
    )
    result = Result("report", [{"path": "t.json", "rank": 0}], {"min_ms": 0.1}, {"span_ns": 20_000}, {"t": table})
    src = tmp_path / "t.json"
    src.write_text("{}")
    key = {"trace": 1, "options": {"min_ms": 0.1}}
    entry = result_entries.put(src, "report", key, result, tmp_path)
    good = entry.read_bytes()
    assert result_entries.get(src, "report", key, tmp_path).to_json() == result.to_json()
    wrong, detected = [], 0
    for offset in range(len(good)):
        entry.write_bytes(_flipped(good, offset))
        warned.clear()
        got = result_entries.get(src, "report", key, tmp_path)
        if got is None:
            assert len(warned) == 1 and str(entry) in warned[0] and "damaged" in warned[0], (offset, warned)
            assert not entry.exists(), offset
            detected += 1
        elif got.to_json() != result.to_json() or any(
            not got.tables[n].equals(result.tables[n]) for n in result.tables
        ):
            wrong.append(offset)
    assert wrong == []
    assert detected == len(good)


@pytest.mark.slow
def test_a_damaged_result_entry_is_one_warning_and_the_fresh_report(cli, tmp_path, caplog):
    """End to end: `report` over a result entry with a flipped bit prints the fresh document (byte for byte), warns
    once naming the entry, and stores it anew — the next run reads it without a warning."""
    p = _trace(tmp_path, "t.json", 5_000.0)
    code, fresh, _ = cli("report", p, "-f", "json", "--no-cache")
    assert code == 0
    code, first, _ = cli("report", p, "-f", "json")
    from tracekit.cache import result_entries

    entry = result_entries.entry_path(p, "report")
    good = entry.read_bytes()
    entry.write_bytes(_flipped(good, len(good) // 2))
    with caplog.at_level(logging.WARNING, logger="tracekit.cache"):
        code, again, _ = cli("report", p, "-f", "json")
    assert code == 0
    damaged = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(damaged) == 1 and str(entry) in damaged[0]
    # the fresh document; `inputs[].from_cache` (the trace's entry was read) is the one field that differs
    assert comparable_doc(again) == comparable_doc(first) == comparable_doc(fresh)
    assert again.replace('"from_cache": true', '"from_cache": false') == fresh
    assert entry.exists() and entry.read_bytes() != _flipped(good, len(good) // 2)  # stored anew
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tracekit.cache"):
        code, third, _ = cli("report", p, "-f", "json")
    assert code == 0 and not caplog.records and json.loads(third)["inputs"][0]["from_cache"] is True


def test_entries_of_the_formats_before_the_seal_are_rebuilt_silently(tmp_path, caplog):
    """A format-6 trace entry (Arrow without a seal) and a format-1 result entry (a pickle) are never read: the
    trace is ingested again and the entry replaced, without a warning; the pickle is not loaded."""
    import pickle

    from tracekit.cache import result_entries

    p = _trace(tmp_path, "t.json", 5_000.0)
    cdir = tmp_path / "cache"
    tracekit.load(p, cache_dir=cdir)
    entry = _cache.cache_path(p, cdir)
    good = entry.read_bytes()
    entry.write_bytes(good[:-32])  # the Arrow file as format 6 wrote it
    marker = tmp_path / "ran"

    class Boom:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    old = result_entries.entry_path(p, "report", cdir)
    old.write_bytes(result_entries.MAGIC + b'{"format": 1, "key": {}}\n' + pickle.dumps(Boom()))
    with caplog.at_level(logging.INFO, logger="tracekit.cache"):
        t = tracekit.load(p, cache_dir=cdir)
        assert result_entries.get(p, "report", {}, cdir) is None
    assert not t.report.from_cache and entry.read_bytes() == good
    assert not marker.exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
