"""The console script leaves without the interpreter's teardown (``tracekit.cli._leave``, issue 30): what a command
wrote still arrives whole, its exit code is kept, a closed pipe is no error, and under a tool that saves its data at
exit (or ``TRACEKIT_FULL_EXIT=1``) the normal exit runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

TK = [sys.executable, "-c", "from tracekit.cli import main; main()"]  # `tracekit ARGS` in a new process


def _env(full: bool = False) -> dict:
    e = {k: v for k, v in os.environ.items() if k != "TRACEKIT_FULL_EXIT"}
    e["COLUMNS"] = "80"
    if full:
        e["TRACEKIT_FULL_EXIT"] = "1"
    return e


def _tk(args, *, full: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(TK + list(args), capture_output=True, env=_env(full), timeout=300)


def test_a_large_stdout_arrives_whole_and_equals_the_normal_exit():
    args = ["report", "-f", "json", "--no-cache"]  # the bundled sample
    fast = _tk(args)
    full = _tk(args, full=True)
    assert fast.returncode == full.returncode == 0, fast.stderr.decode()
    assert len(fast.stdout) > 10_000
    assert fast.stdout == full.stdout
    assert fast.stdout.rstrip().endswith(b"}")


def test_exit_codes_are_kept():
    assert _tk(["--version"]).returncode == 0
    missing = _tk(["info", "/nonexistent/trace.json"])
    assert missing.returncode == 3
    assert missing.stderr.decode().startswith("error: ")  # the sentence was flushed before leaving
    assert _tk(["no-such-command"]).returncode == 2


def test_a_closed_pipe_is_no_error(tmp_path):
    """`tracekit info T | head -1`: the reader goes away; no BrokenPipeError message, exit 0."""
    proc = subprocess.Popen(
        TK + ["info", "--cache-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0
    assert "BrokenPipe" not in err and "Traceback" not in err


@pytest.mark.parametrize("how", ["env", "trace"])
def test_the_normal_exit_under_a_tool_that_saves_at_exit(tmp_path, how):
    """With TRACEKIT_FULL_EXIT=1, or a trace function set (a coverage tool, a debugger), atexit handlers run."""
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(tmp_path / 'ran')!r}, 'w').write('yes'))\n"
        + ("sys.settrace(lambda *a: None)\n" if how == "trace" else "")
        + "sys.argv = ['tracekit', '--version']\n"
        "from tracekit.cli import main; main()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=_env(full=how == "env"), timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(b"tracekit ")
    assert (tmp_path / "ran").read_text() == "yes"


def test_atexit_handlers_are_skipped_by_default(tmp_path):
    """The fast exit skips the teardown: an atexit handler registered before main() does not run (that is the
    point: the teardown is what costs 0.2 s)."""
    code = (
        "import atexit\n"
        f"atexit.register(lambda: open({str(tmp_path / 'ran')!r}, 'w').write('yes'))\n"
        "import sys; sys.argv = ['tracekit', '--version']\n"
        "from tracekit.cli import main; main()\n"
    )
    if any(k.startswith("COV_CORE") for k in os.environ):
        pytest.skip("the tests run under coverage, which the child inherits: the normal exit is taken")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=_env(), timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(b"tracekit ")
    assert not (tmp_path / "ran").exists()
