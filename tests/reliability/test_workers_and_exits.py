"""Fault injection, one class at a time (issue 41): workers live only in their parent's life, and every way a
command can end for a fault of the world is one sentence and the exit code the README gives (docs/reliability.md,
"Exit codes and signals"), never 1, which is tracekit's own bugs.

Each case runs ``tracekit`` in a new process. A harness (``HARNESS``) stands in for a slow or hanging rank: its
``load`` notes the worker's pid in a marker file and sleeps, so the test can kill the worker or the parent at a
known moment; ``write_synced`` (the output writer) can send the process a signal half-way through a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures.synthlib.multirank import write_run  # noqa: E402

pytestmark = [
    pytest.mark.slow,  # a tracekit process per case
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals, prctl and /dev/full are Linux's"),
]

HARNESS = """
import os, sys, time
from pathlib import Path

import tracekit.analyses.fleet.multirank.mapper as mapper
import tracekit.render.files as files

marks, slow, sig = Path(os.environ.get("TK_MARKS", ".")), os.environ.get("TK_SLOW"), os.environ.get("TK_SIGNAL")
real_load, real_write = mapper.load, files.write_synced


def load(path, **kw):  # a rank that takes its time: its worker's pid noted, then asleep
    if slow is not None and slow in Path(path).name:
        (marks / f"{Path(path).name}.{os.getpid()}").write_text("")
        time.sleep(60)
    return real_load(path, **kw)


def write_synced(tmp, write):  # the output half written when the signal arrives
    def half(fh):
        fh.write(b"{")
        fh.flush()
        os.kill(os.getpid(), int(sig))
        time.sleep(0.5)  # the handler runs here
        write(fh)

    return real_write(tmp, half if sig else write)


mapper.load, files.write_synced = load, write_synced
from tracekit.cli import main

sys.argv = ["tracekit", *sys.argv[1:]]
main()
"""


@pytest.fixture(scope="module")
def run4(tmp_path_factory) -> Path:
    """Four small ranks of a training run (the generator's nccl_train4): ``rank-0.json.gz`` … ``rank-3.json.gz``."""
    d = tmp_path_factory.mktemp("run4")
    write_run("nccl_train4", d / "run", truth_path=d / "truth.json")
    return d / "run"


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TK_")}
    env.update(COLUMNS="80", **extra)
    return env


def _harness(tmp_path: Path, args, **env) -> subprocess.Popen:
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(**env),
        cwd=tmp_path,
    )


def _tk(args, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw}
    return subprocess.run(
        [sys.executable, "-c", "from tracekit.cli import main; main()", *map(str, args)],
        env=_env(**(env or {})),
        timeout=120,
        **kw,
    )


def _marked(marks: Path, n: int, proc: subprocess.Popen) -> list[int]:
    """The pids of the ``n`` workers that have started their slow rank."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        found = sorted(marks.iterdir())
        if len(found) >= n:
            return [int(f.name.rsplit(".", 1)[1]) for f in found]
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.05)
    raise AssertionError("the workers never started")


def _gone(pid: int, within: float = 5.0) -> bool:
    """No process ``pid`` (or only its zombie) within ``within`` seconds."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------- workers in their parent's life


def test_a_killed_worker_is_one_sentence_naming_its_rank_file(run4, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = _harness(
        tmp_path, ["imbalance", str(run4), "--jobs", "2", "--no-cache"], TK_MARKS=str(marks), TK_SLOW="rank-1"
    )
    (pid,) = _marked(marks, 1, proc)
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=10)
    text = err.decode()
    assert proc.returncode == 3, text
    assert out == b""
    assert text.count("\n") == 1 and text.startswith("error: the worker process analysing ")
    assert "rank-1.json.gz was killed by SIGKILL" in text and "--jobs" in text
    assert "BrokenProcessPool" not in text and "tracekit bug" not in text


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_workers_die_with_their_parent_and_the_pipe_closes(run4, tmp_path, sig):
    """`tracekit imbalance RUN --jobs 2 | cat`, the parent killed while both workers read: the reader of its stdout
    sees the end within 10 s (no orphan holds the pipe) and both workers are gone."""
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = _harness(
        tmp_path, ["imbalance", str(run4), "--jobs", "2", "--no-cache"], TK_MARKS=str(marks), TK_SLOW="rank"
    )
    pids = _marked(marks, 2, proc)
    proc.send_signal(sig)
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=10)  # stdout and stderr read to their end, as `| cat` does
    except subprocess.TimeoutExpired:
        proc.kill()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        raise AssertionError("the parent's pipes stayed open: its workers outlived it") from None
    assert time.monotonic() - t0 < 10
    assert all(_gone(pid) for pid in pids), "a worker outlived its parent"
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM
        assert err.decode().strip() == (
            "terminated by SIGTERM: nothing partial was written, and the worker processes were stopped"
        )
    else:
        assert proc.returncode == -signal.SIGKILL
    assert out == b""


def _needs_dask():
    pytest.importorskip("distributed", reason="the --dask cases need dask.distributed (pip install 'tracekit[dask]')")


def test_an_unreachable_dask_scheduler_is_exit_3_within_the_timeout(run4):
    _needs_dask()
    t0 = time.monotonic()
    p = _tk(["imbalance", str(run4), "--dask", "tcp://127.0.0.1:9", "--dask-timeout", "0.5"])
    took = time.monotonic() - t0
    text = p.stderr.decode()
    assert p.returncode == 3, text
    assert text.count("\n") == 1
    assert text.startswith("error: no Dask scheduler answered at tcp://127.0.0.1:9 within 0.5 s")
    assert "--dask-timeout" in text and "tracekit bug" not in text
    assert took < 20  # not the 30 s of distributed's own default


def test_a_malformed_dask_address_is_a_usage_error(run4):
    _needs_dask()
    p = _tk(["imbalance", str(run4), "--dask", "garbage"])
    text = p.stderr.decode()
    assert p.returncode == 2, text
    assert text == (
        "error: --dask garbage is not a Dask scheduler address (missing port number in address 'garbage'); pass"
        " the scheduler's address as tcp://HOST:PORT (the scheduler prints it, e.g. tcp://10.0.0.5:8786)\n"
    )


@pytest.mark.parametrize(
    "address, why",
    [
        ("tcp://host-without-port", "missing port number"),
        ("foo://h:1", "unknown scheme 'foo'"),
        ("tcp://h:99999", "port 99999 is not between 1 and 65535"),
        ("tcp://:8786", "no host"),
    ],
)
def test_the_dask_address_check(address, why):
    _needs_dask()
    from tracekit.errors import UsageError
    from tracekit.fan_out import dask_address

    with pytest.raises(UsageError, match=why):
        dask_address(address)
    for good in ("tcp://10.0.0.5:8786", "10.0.0.5:8786", "tls://[::1]:8786", "inproc://x"):
        assert dask_address(good) == good


# --------------------------------------------------------------------------- exit codes that mean what they say


def test_a_closed_pipe_is_exit_0():
    """`tracekit kernels -f json | head -c 100` under `set -o pipefail`: the reader goes away; exit 0, nothing on
    stderr. Both ways: the reader gone before the first write, and after 100 bytes."""
    cmd = [
        sys.executable,
        "-c",
        "from tracekit.cli import main; main()",
        "kernels",
        "--all",
        "-f",
        "json",
        "--no-cache",
    ]
    gone_first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    gone_first.stdout.close()
    assert gone_first.wait(timeout=120) == 0
    assert gone_first.stderr.read() == b""
    shell = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$@" | head -c 100 > /dev/null', "sh", *cmd],
        capture_output=True,
        env=_env(),
        timeout=120,
    )
    assert shell.returncode == 0, shell.stderr.decode()
    assert shell.stderr == b""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_stdout_on_a_full_device_is_exit_3_naming_it(tmp_path):
    with open("/dev/full", "w") as full:
        p = _tk(["kernels", "--no-cache"], stdout=full)
    text = p.stderr.decode()
    assert p.returncode == 3, text
    assert text == (
        "error: no space left on the device for standard output (a device, /dev/full): the output is incomplete;"
        " free some space or write elsewhere (-o FILE on another disk)\n"
    )
    out = _tk(["kernels", "--no-cache", "-o", "/dev/full"])
    assert out.returncode == 3
    assert out.stderr.decode().startswith("error: no space left on the device for /dev/full")


def test_running_out_of_memory_is_exit_3_naming_the_input(tmp_path):
    """A launch log with a 128 MiB line, under an address-space limit (``ulimit -v``) that lets tracekit read a
    small log: exit 3 and one sentence naming the file."""
    limit = 512 << 20

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    head = "[2025-05-01 10:00:00] server_args=ServerArgs(model_path='x')\n"
    small = tmp_path / "small.log"
    small.write_text(head)
    ok = _tk(["log", str(small)], preexec_fn=limited)
    if ok.returncode != 0:
        pytest.skip(f"tracekit does not start under a {limit >> 20} MiB limit here: {ok.stderr.decode()[-200:]}")
    big = tmp_path / "big.log"
    with open(big, "w") as fh:
        fh.write(head)
        fh.write("x" * (128 << 20) + "\n")
    p = _tk(["log", str(big)], preexec_fn=limited)
    text = p.stderr.decode()
    assert p.returncode == 3, text
    assert text.count("\n") == 1
    assert text.startswith(f"error: ran out of memory working on {big}; free memory or raise the limit (ulimit -v)")


@pytest.mark.parametrize(
    "sig, code",
    [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_a_signal_while_writing_an_output_leaves_no_temporary_file(tmp_path, sig, code):
    out = tmp_path / "out.json"
    proc = _harness(tmp_path, ["kernels", "--no-cache", "-f", "json", "-o", str(out)], TK_SIGNAL=str(int(sig)))
    _, err = proc.communicate(timeout=120)
    text = err.decode()
    assert proc.returncode == code, text
    assert text.startswith("terminated by " + sig.name if sig != signal.SIGINT else "interrupted: nothing partial")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["harness.py"]  # no out.json, no .out.json.tmp-…


# --------------------------------------------------------------------------- a small disk that fills up


@contextlib.contextmanager
def _small_tmpfs(where: Path, size: str = "64k", free: int = 8192):
    """A ``size`` tmpfs at ``where``, filled by ``where/filler`` up to ``free`` bytes (so that a write starts, then
    meets ENOSPC part-way); unmounted in a finally. Skips, saying why, where mounting is not permitted."""
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(
            f"mounting a tmpfs is not permitted here ({(r.stderr or r.stdout).decode().strip() or r.returncode});"
            " run as root (as CI does) for the full-disk case"
        )
    try:
        filler = where / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        os.truncate(filler, max(filler.stat().st_size - free, 0))
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_outputs_and_the_cache_on_a_small_tmpfs_that_fills(cli, tmp_path, monkeypatch):
    """A 64 KiB tmpfs with 8 KiB free: every output starts to be written, then the disk is full. Each is exit 3 and
    one sentence naming its target; nothing partial (no half file, no temporary, no new folder) is left, and the page
    leaves no sidecar nor the sidecar a page. The trace cache that cannot be written is a warning and the answer is
    still printed (exit 0)."""
    with _small_tmpfs(tmp_path / "disk") as disk:
        monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))  # off the small disk, for the outputs
        for args, target, what in (
            (("blocks", "-f", "json", "-o", disk / "b.json"), disk / "b.json", "json output"),  # 20 kB
            (("blocks", "-f", "csv", "-o", disk / "csv"), disk / "csv", "csv file"),  # 5 tables: a page each, and more
            (("report", "-f", "html", "-o", disk / "r.html"), disk / "r.html", "html report"),  # 71 + 48 kB sidecar
            (("export", "-o", disk / "exp"), disk / "exp", "export"),  # 100 kB of parquet
        ):
            code, out, err = cli(*args)
            assert code == 3, (args, err)
            assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
            assert err.startswith(f"error: no space left on the device for {target}"), err
            assert err.endswith(
                f": no {what} was written, and whatever was there before is unchanged; free some space or choose"
                " another --out\n"
            ), err
            assert sorted(p.name for p in disk.iterdir()) == ["filler"], (args, list(disk.iterdir()))
        # the cache (a 61 kB entry) in a process of its own: its warning is the logger's, on the real stderr
        p = _tk(["blocks", "-f", "json"], env={"TRACEKIT_CACHE_DIR": str(disk / "cache")})
        err = p.stderr.decode()
        assert p.returncode == 0, err
        assert json.loads(p.stdout)["command"] == "blocks"  # the answer, printed whole
        assert err.count("\n") == 1, err
        assert err.startswith(f"warning: no space left for the cache entry {disk / 'cache'}/decode_sample.json.gz.")
        assert err.endswith(
            ".arrow; the trace is read without the cache — fix that, or pass --cache-dir DIR (or --no-cache)\n"
        )
        assert list((disk / "cache").iterdir()) == []  # no half entry, no temporary
