"""One output rule for every command (docs/reliability.md, "Outputs"; ``R`` in that page is this file).

* An output that resolves (symlinks followed) to any input of the command — trace, annotation, hardware file,
  categories, steps file, log, bench file — or a companion (the html page's json sidecar, a csv folder's files) is
  refused before anything is written: exit 3, one sentence, the input unchanged, no file left behind.
* A character device, a FIFO or ``/dev/stdout`` is written to directly, never renamed over; a symbolic link is written
  through to its target, never replaced.
* An input that cannot be read is exit 3, one sentence (not the argument parser's usage error).

The commands come from the registry (``tracekit/registry.py``) and their parameters from the CLI itself, so a new
command is covered without a line here — except the arguments a real run needs (``RUN``), which the test asks for.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from tracekit.cli import command
from tracekit.cli.common import bundled_sample
from tracekit.registry import COMMANDS
from tests.conftest import write_as_rank

ROOT = Path(__file__).resolve().parents[2]
SYN = ROOT / "fixtures" / "synthetic"
LOG = SYN / "dp16.launch.log"
DP16 = SYN / "dp16_bs4.trace.json.gz"
TK = [sys.executable, "-c", "from tracekit.cli import main; main()"]  # `tracekit ARGS` in a new process
PRECIOUS = b'{"precious": "the user\'s own file"}\n'


def _commands() -> dict[str, object]:
    """Every CLI command by its registry name ("plot ledger"), as the click command the CLI runs."""

    def walk(group, prefix=""):
        for name, sub in group.commands.items():
            if hasattr(sub, "commands"):
                yield from walk(sub, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", sub

    return dict(walk(command()))


CLI = _commands()
WITH_OUT = sorted(c for c in COMMANDS if any(p.name == "out" for p in CLI[c].params))


def _annotation(p) -> str:
    return repr(getattr(p.type_descriptor, "annotation", ""))


def _is_path(p) -> bool:
    return "Path" in _annotation(p)


def _file_or_name(p) -> bool:
    """Text options that take a file or a shipped name (-a, --hw, hw NAME)."""
    return not _is_path(p) and (
        p.name.startswith("annotation") or p.name == "hw" or (p.name == "name" and "JSON file" in (p.help or ""))
    )


def _input_params(cmd) -> list:
    return [p for p in cmd.params if p.name not in ("out", "cache_dir") and (_is_path(p) or _file_or_name(p))]


def _opt(p) -> str:
    return next(o for o in p.opts if o.startswith("--"))


def _args(cmd, values: dict) -> list[str]:
    """Arguments for ``cmd``: ``values`` by parameter name, plus a placeholder for every other required one."""
    pos, opts = [], []
    for p in cmd.params:
        if p.name == "out":
            continue
        v = values.get(p.name)
        if v is None and p.required:
            v = [values["_other"]] if _is_path(p) else ["1" if "int" in _annotation(p) else "x=1"]
        if v is None:
            continue
        v = [str(x) for x in (v if isinstance(v, list) else [v])]
        if p.param_type_name == "argument":
            pos += v
        elif p.nargs and p.nargs > 1:
            opts += [_opt(p), *v]
        else:
            for x in v:
                opts += [_opt(p), x]
    return [*pos, *opts]


def _cases():
    """Every (command, input parameter) through a symlink to the input; the first input of each also by its path."""
    for c in WITH_OUT:
        for i, p in enumerate(_input_params(CLI[c])):
            for how in ("same path", "a symlink to it") if i == 0 else ("a symlink to it",):
                yield pytest.param(c, p.name, how, id=f"{c}-{p.name}-{how.split()[1]}")


def test_every_command_with_out_and_an_input_is_covered():
    """The registry's commands that write -o and read a file: what the parametrised test below runs over."""
    covered = {c for c, *_ in (case.values for case in _cases())}
    assert covered == {c for c in WITH_OUT if _input_params(CLI[c])}
    assert {
        "info",
        "report",
        "blocks",
        "kernels",
        "roofline",
        "bench",
        "export",
        "annotate",
        "plot ledger",
        "suggest",
        "whatif",
        "findings",
        "compare",
    } <= covered


def _listing(d: Path) -> dict[str, str]:
    return {
        p.name: ("link:" + os.readlink(p)) if p.is_symlink() else p.read_bytes().hex()[:64] for p in sorted(d.iterdir())
    }


def _one_sentence(code: int, out: str, err: str, needle: str, expect: int = 3) -> None:
    assert code == expect, (code, err)
    assert needle in err, err
    assert out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "tracekit bug" not in err


@pytest.mark.slow
@pytest.mark.parametrize("name,param,how", list(_cases()))
def test_an_output_onto_any_input_is_refused_before_anything_is_written(cli, tmp_path, name, param, how):
    cmd = CLI[name]
    p = next(x for x in cmd.params if x.name == param)
    inp = tmp_path / "mine.json"
    inp.write_bytes(PRECIOUS)
    other = tmp_path / "other.json"
    other.write_bytes(PRECIOUS)
    out = inp
    if how == "a symlink to it":
        out = tmp_path / "link.json"
        out.symlink_to(inp)
    value = [inp, other] if p.nargs == 2 else inp
    before = _listing(tmp_path)
    args = [*name.split(), *_args(cmd, {param: value, "_other": other}), "-o", out]
    code, text, err = cli(*args)
    _one_sentence(code, text, err, "is an input of this")
    assert inp.read_bytes() == PRECIOUS and _listing(tmp_path) == before  # nothing replaced, nothing left behind
    if how == "a symlink to it":
        assert out.is_symlink() and os.readlink(out) == str(inp)


# --------------------------------------------------------------------------- the cases people met


@pytest.mark.slow
def test_the_html_sidecar_never_replaces_the_annotation(cli, tmp_path):
    ann = tmp_path / "myann.json"
    shutil.copy(ROOT / "annotations" / "decode_sample.json", ann)
    before = ann.read_bytes()
    _one_sentence(*cli("report", "-a", ann, "-f", "html", "-o", tmp_path / "myann.html"), "json sidecar of")
    assert ann.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["myann.json"]
    code, _, err = cli("report", "-a", ann, "-f", "html", "-o", tmp_path / "page.html")
    assert code == 0 and (tmp_path / "page.html").is_file(), err
    assert json.loads((tmp_path / "page.json").read_text())["command"] == "report" and ann.read_bytes() == before


def test_an_html_refusal_leaves_no_page(cli, tmp_path):
    (tmp_path / "r.json").mkdir()  # the sidecar's place is a folder
    _one_sentence(*cli("info", "-f", "html", "-o", tmp_path / "r.html"), "is a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    _one_sentence(*cli("info", "-f", "html", "-o", tmp_path / "x.json"), "are the same file")  # page = sidecar
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_csv_folder_never_replaces_the_bench_file_it_reads(cli, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    bench = d / "bench.results.csv"
    bench.write_text("deployment,context,concurrency,generation_time_ms\ndp16,100000,64,83.5\n")
    before = bench.read_bytes()
    _one_sentence(*cli("bench", bench, "-f", "csv", "-o", d), "is an input of this bench")
    assert bench.read_bytes() == before and sorted(p.name for p in d.iterdir()) == ["bench.results.csv"]


def test_a_directory_trace_is_guarded_too(cli, tmp_path):
    """TRACE given as a folder: the trace file found in it is an input as well."""
    trace = tmp_path / "t.json.gz"
    shutil.copy(bundled_sample(), trace)
    before = trace.read_bytes()
    _one_sentence(*cli("info", tmp_path, "-f", "json", "-o", trace, "--no-cache"), "is an input of this info")
    assert trace.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz"]


def test_an_export_never_replaces_an_input_inside_its_folder(cli, tmp_path):
    """A directory output's files are checked one by one: a --log named like a table is refused, the export left out."""
    log = tmp_path / "ledger.parquet"
    shutil.copy(LOG, log)
    before = log.read_bytes()
    _one_sentence(*cli("export", "--log", log, "-o", tmp_path), "is an input of this export")
    assert log.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["ledger.parquet"]


# --------------------------------------------------------------------------- devices, FIFOs, links


def _sweep(tmp: Path) -> dict[str, Path]:
    d = {}
    for name, points in (("a", ("d_bs4_100k",)), ("b", ("d_bs8_100k",))):
        for pt in points:
            (tmp / name / pt).mkdir(parents=True)
            shutil.copy(bundled_sample(), tmp / name / pt / "1-TP-0.trace.json.gz")
        d[name] = tmp / name
    (tmp / "ranks").mkdir()
    for r in (0, 1):
        write_as_rank(bundled_sample(), tmp / "ranks" / f"1-TP-{r}.trace.json.gz", r)
    d["ranks"] = tmp / "ranks"
    (tmp / "bench.csv").write_text("deployment,context,concurrency,generation_time_ms\ndp16,100000,64,83.5\n")
    d["bench"] = tmp / "bench.csv"
    return d


def RUN(d: dict[str, Path]) -> dict[str, list]:
    """Arguments for a real run of each command that takes -o (the bundled sample and its annotation unless said)."""
    shapes = [DP16, "-a", "k3_dp16", "--hw", "b200", "--bs", "4"]
    return {
        "roofline": shapes,
        "hbm": shapes,
        "log": [LOG],
        "ledger": [LOG],
        "capacity": ["--log", LOG],
        "whatif": [LOG, "--set", "cuda_graph_max_bs=8"],
        "plot ledger": [LOG],
        "bench": [d["bench"]],
        "ranks": ["--tp", "2"],
        "analyze": [d["a"], "-j", "1"],
        "compare": [d["a"], d["b"], "-j", "1"],
        "imbalance": [d["ranks"]],
        "waves calc": ["--sms", "132", "--grid", "1,1,1"],
        "hw": ["b200"],
        # a graph-replayed trace with its capture traces beside it (the generator's committed case)
        "replay": [DP16.parent / "graph" / "full_nodeid" / "replay.trace.json.gz"],
    }


DIRECTORY_OUTPUTS = {"export", "analyze"}  # -o is a folder: a device there is refused, never replaced


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return RUN(_sweep(tmp_path_factory.mktemp("runs")))


@pytest.mark.slow
@pytest.mark.skipif(
    not os.path.exists("/dev/null") or not stat.S_ISCHR(os.stat("/dev/null").st_mode),
    reason="no /dev/null character device here",
)
@pytest.mark.parametrize("name", WITH_OUT)
def test_dev_null_stays_a_device_for_every_command(cli, tmp_path, runs, name):
    """-o /dev/null is written to (or refused in one sentence); it is never renamed over. Plots need a suffix, so
    they write to a .png link to /dev/null, written through."""
    out: Path = Path("/dev/null")
    if name.startswith("plot"):
        out = tmp_path / "p.png"
        out.symlink_to("/dev/null")
    code, text, err = cli(*name.split(), *runs.get(name, []), "-o", out)
    if name in DIRECTORY_OUTPUTS:  # export calls it a usage error (2), analyze an output that cannot be written (3)
        _one_sentence(code, text, err, "is not a directory", expect=2 if name == "export" else 3)
    else:
        assert code == 0, err
        assert "Traceback" not in err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and not os.path.islink("/dev/null")
    if name.startswith("plot"):
        assert out.is_symlink() and os.readlink(out) == "/dev/null"
    assert not os.path.exists("/dev/null.json")  # no html companion, no temporary file in /dev
    assert not [n for n in os.listdir("/dev") if n.startswith(".null.")]


def test_html_csv_and_json_to_dev_null(cli):
    for fmt in ("html", "csv", "json", "md"):
        code, _, err = cli("info", "-f", fmt, "-o", "/dev/null")
        assert code == 0 and "wrote /dev/null" in err, err
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not os.path.exists("/dev/null.json")


def test_a_symlinked_output_is_written_through(cli, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "x.json").write_text("old\n")
    link = tmp_path / "x.json"
    link.symlink_to(real / "x.json")
    code, _, err = cli("info", "-f", "json", "-o", link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real / "x.json")
    assert json.loads((real / "x.json").read_text())["command"] == "info"
    # an html page and its sidecar, both links: both targets written, both links kept
    for n in ("r.html", "r.json"):
        (tmp_path / n).symlink_to(real / n)
    code, _, err = cli("info", "-f", "html", "-o", tmp_path / "r.html")
    assert code == 0, err
    assert (tmp_path / "r.html").is_symlink() and (tmp_path / "r.json").is_symlink()
    assert (real / "r.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert json.loads((real / "r.json").read_text())["command"] == "info"
    # a dangling link: its target is created; a link that loops is one sentence
    (tmp_path / "new.md").symlink_to(real / "new.md")
    code, _, err = cli("info", "-f", "md", "-o", tmp_path / "new.md")
    assert code == 0 and (real / "new.md").is_file() and (tmp_path / "new.md").is_symlink(), err
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    _one_sentence(*cli("info", "-o", tmp_path / "loop"), "loops")
    assert not [p for p in (*tmp_path.iterdir(), *real.iterdir()) if ".tmp-" in p.name]


@pytest.mark.slow
def test_a_symlinked_picture_and_annotated_trace_are_written_through(cli, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    for name, args in (("p.png", ("plot", "ledger", LOG)), ("a.json.gz", ("annotate",))):
        (tmp_path / name).symlink_to(real / name)
        code, _, err = cli(*args, "-o", tmp_path / name)
        assert code == 0 and (tmp_path / name).is_symlink() and (real / name).stat().st_size > 0, err


def test_a_fifo_is_written_to_not_replaced(cli, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, _, err = cli("info", "-f", "json", "-o", fifo)
    reader.join(30)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and json.loads(got[0])["command"] == "info"


@pytest.mark.slow
def test_dev_stdout_is_written_to_the_descriptor(tmp_path):
    """``-o /dev/stdout`` writes to the descriptor the shell gave (here a file), never renames over the link."""
    into = tmp_path / "stdout.json"
    with open(into, "wb") as fh:
        r = subprocess.run(
            [*TK, "-q", "info", "-f", "json", "-o", "/dev/stdout"],
            stdout=fh,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "cache")},
        )
    assert r.returncode == 0, r.stderr
    assert json.loads(into.read_text())["command"] == "info"
    assert (
        os.path.islink("/dev/stdout")
        or not os.path.exists("/dev/stdout")
        or stat.S_ISCHR(os.stat("/dev/stdout").st_mode)
        or True
    )  # the link is the system's: only read here
    assert Path("/dev/stdout").is_symlink() or not Path("/dev/stdout").exists()


# --------------------------------------------------------------------------- inputs and errors


@pytest.mark.slow
def test_an_unreadable_input_is_exit_3_not_a_usage_error(tmp_path):
    """As another user (root reads everything) a mode-000 trace, log, categories or steps file is one sentence,
    exit 3 — the argument parser's own readable check (exit 2) is off."""
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root reads every file, and setpriv is not here to run as another user")
    d = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        os.chmod(d, 0o777)
        files = {"t.json.gz": bundled_sample(), "l.log": LOG, "c.json": None}
        for n, src in files.items():
            (d / n).write_bytes(src.read_bytes() if src else b"{}")
            os.chmod(d / n, 0)
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        for args in (
            ["info", d / "t.json.gz"],
            ["log", d / "l.log"],
            ["kernels", "--categories", d / "c.json"],
            ["steps", "--steps-file", d / "c.json"],
            ["bench", d / "c.json"],
        ):
            r = subprocess.run(
                [*prefix, *TK, *map(str, args), "--no-cache"]
                if args[0] not in ("log", "bench")
                else [*prefix, *TK, *map(str, args)],
                capture_output=True,
                text=True,
                cwd=d,
                env={**os.environ, "HOME": str(d), "TRACEKIT_CACHE_DIR": str(d / "cache")},
            )
            assert r.returncode == 3, (args, r.stderr)
            assert "cannot be read" in r.stderr and "Traceback" not in r.stderr, r.stderr
            assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == "", r.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_out_of_memory_is_one_sentence(cli, monkeypatch):
    import tracekit.cli.common as common

    def boom(*a, **k):
        raise MemoryError

    monkeypatch.setattr(common, "load", boom)
    code, out, err = cli("info", "--no-cache")
    _one_sentence(code, out, err, "ran out of memory reading")
    assert "decode_sample.json.gz" in err


@pytest.mark.slow
def test_numbers_too_large_are_usage_errors(cli):
    for args in (
        ("steps", "--min-step-ms", "1e308"),
        ("steps", "--min-step-ms", "nan"),
        ("wall", "--min-step-ms", "inf"),
    ):
        code, out, err = cli(*args)
        assert code == 2 and "--min-step-ms" in err and "Traceback" not in err, err
    code, out, err = cli("waves", "calc", "--sms", "132", "--grid", "1,1,1", "--time-us", "1e308")
    _one_sentence(code, out, err, "too large", expect=2)
    code, out, err = cli("bench", ROOT / "fixtures" / "synthetic" / "dp16.launch.log", "--accept-len", "inf")
    _one_sentence(code, out, err, "--accept-len inf is not a finite number", expect=2)


def test_the_rule_is_one_function():
    """Every writer in tracekit goes through render.files.output_target (write_file, write_files, OutputDir)."""
    render = ROOT / "tracekit" / "render"
    for fn, module in (("def write_files", "files.py"), ("def stage", "outdir.py")):
        files = (render / module).read_text()
        body = files[files.index(fn) :]
        body = body[: body.index("\n    def ", 10) if fn == "def stage" else body.index("\ndef ", 5)]
        assert "output_target(" in body, fn
    pattern = re.compile(r"\.write_(text|bytes)\(|open\([^)]*['\"][wax]b?['\"]")
    for p in (ROOT / "tracekit" / "cli").glob("*.py"):
        assert not pattern.search(p.read_text()), f"{p.name} writes a file itself; use tracekit.render.files"


def test_an_output_never_replaces_a_file_read_beside_the_trace(cli, tmp_path):
    """The capture traces and execution_details.json found beside a replay trace are read without being named on the
    command line: `-o` at one of them is refused like `-o` at the trace, and nothing changes."""
    import hashlib
    import shutil

    run = shutil.copytree(SYN / "graph" / "full_nodeid", tmp_path / "run")
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.rglob("*") if p.is_file()}
    for target in sorted((run / "capture_traces").iterdir()):
        code, out, err = cli("roofline", run / "replay.trace.json.gz", "-o", target)
        assert code == 3 and "is an input of this roofline" in err and out == "", err
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.rglob("*") if p.is_file()} == before
