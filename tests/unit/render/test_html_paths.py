"""The page shows paths relative to where the command ran, and "How these numbers were obtained" prints a command the
CLI takes: run again from the same folder it gives the same numbers; every "See:" command parses."""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
import typer.main

import tracekit
from tracekit.cli import app, run
from tracekit.render import emit

ROOT = Path(__file__).resolve().parents[3]
SYN = ROOT / "fixtures" / "synthetic"


def _cmd(page: str) -> list[str]:
    m = re.search(r'<code class="cmd">(.*?)</code>', page, re.S)
    assert m, "the page prints no command"
    return shlex.split(html.unescape(m.group(1)))


def _see(page: str) -> list[list[str]]:
    return [shlex.split(html.unescape(c)) for c in re.findall(r"<b>See:</b> <code>(.*?)</code>", page, re.S) if c]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder holding a trace and a launch log (copies of fixtures), made the current directory."""
    d = tmp_path / "run here"
    (d / "traces").mkdir(parents=True)
    shutil.copy(SYN / "dp16_bs4.trace.json.gz", d / "traces" / "dp16_bs4.trace.json.gz")
    shutil.copy(SYN / "dp16.launch.log", d / "dp16.launch.log")
    monkeypatch.chdir(d)
    return d


def _no_machine_path(page: str, d: Path) -> None:
    text = html.unescape(page)
    for p in {str(d), str(d.resolve()), str(d.parent), os.path.expanduser("~") + "/", "/work/", str(ROOT)}:
        assert p not in page and p not in text, f"the page holds the machine's path {p!r}"


def test_no_absolute_path_of_the_machine_in_the_page(workdir):
    from tracekit.ingest.sglang_log import read_log

    t = tracekit.load(workdir / "traces" / "dp16_bs4.trace.json.gz", cache=False)  # given as an absolute path
    res = tracekit.report(t, "k3_dp16", log=read_log(workdir / "dp16.launch.log"))
    assert str(workdir) in json.dumps(res.inputs)  # the result itself holds the absolute path …
    page = emit(res, "html")
    _no_machine_path(page, workdir)  # … the page shows it from here
    assert "<title>tracekit report · dp16_bs4.trace.json.gz</title>" in page
    assert "traces/dp16_bs4.trace.json.gz" in page
    assert _see(page), "the findings' See: commands are on the page"
    assert all("traces/dp16_bs4.trace.json.gz" in c or "dp16.launch.log" in c for c in _see(page))


def test_paths_outside_the_folder_climb_to_it(workdir, monkeypatch):
    sub = workdir / "elsewhere"
    sub.mkdir()
    monkeypatch.chdir(sub)
    res = tracekit.report(tracekit.load(workdir / "traces" / "dp16_bs4.trace.json.gz", cache=False), "k3_dp16")
    page = emit(res, "html")
    assert "../traces/dp16_bs4.trace.json.gz" in page and str(workdir) not in page
    assert "../../traces" not in page and "..../" not in page  # replaced once, never inside a relative path


@pytest.mark.slow
def test_the_printed_command_runs_again_to_the_same_numbers(workdir):
    from tracekit.ingest.sglang_log import read_log

    t = tracekit.load(workdir / "traces" / "dp16_bs4.trace.json.gz", cache=False)
    res = tracekit.report(t, "k3_dp16", log=read_log(workdir / "dp16.launch.log"))
    args = _cmd(emit(res, "html"))
    assert args[:3] == ["tracekit", "report", "traces/dp16_bs4.trace.json.gz"], args
    assert "-a" in args and args[args.index("-a") + 1] == "k3_dp16"
    assert "--log" in args and args[args.index("--log") + 1] == "dp16.launch.log"
    for gone in ("--group-size-used", "--sizes", "--local-copy-pattern", "--min-step-ns"):
        assert gone not in args  # options the CLI does not have (issue 29)
    out = workdir / "again.json"
    code = run([*args[1:], "--no-cache", "-f", "json", "-o", str(out)])
    assert code == 0
    again = json.loads(out.read_text())
    assert again["params"] == json.loads(json.dumps(res.params, default=str)) | {"log": "dp16.launch.log"}
    for k in ("median_wall_ns", "median_busy_ns", "median_exposed_ns_per_step", "steps", "findings"):
        assert again["summary"][k] == res.summary[k], k


@pytest.mark.slow
def test_with_no_annotation_the_command_is_short_and_runs(workdir):
    res = tracekit.report(tracekit.load("traces/dp16_bs4.trace.json.gz", cache=False))
    args = _cmd(emit(res, "html"))
    assert args == ["tracekit", "report", "traces/dp16_bs4.trace.json.gz"]  # defaults are left out
    out = workdir / "again.json"
    assert run([*args[1:], "--no-cache", "-f", "json", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["median_wall_ns"] == res.summary["median_wall_ns"]


def test_every_see_command_parses(workdir):
    """Each finding's "See:" command names a command and options the CLI has (parsed, not run)."""
    from tracekit.ingest.sglang_log import read_log

    t = tracekit.load(workdir / "traces" / "dp16_bs4.trace.json.gz", cache=False)
    page = emit(tracekit.report(t, "k3_dp16", log=read_log(workdir / "dp16.launch.log")), "html")
    root = typer.main.get_command(app)
    seen = 0
    for args in _see(page):
        assert args[0] == "tracekit"
        cmd, rest = root, args[1:]
        while getattr(cmd, "commands", None) and rest and rest[0] in cmd.commands:
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        assert cmd is not root, args
        cmd.make_context(" ".join(args[:2]), list(rest))  # raises on an option or argument it does not take
        seen += 1
    assert seen >= 5


@pytest.mark.slow  # eight CLI runs
@pytest.mark.parametrize(
    "argv",
    [
        ["kernels", "traces/dp16_bs4.trace.json.gz"],
        ["waves", "trace", "traces/dp16_bs4.trace.json.gz"],
        ["waves", "calc", "--grid", "300,1,1", "--sms", "132", "--time-us", "10.5"],
        ["findings", "traces/dp16_bs4.trace.json.gz", "-a", "k3_dp16", "--min-pct", "2"],
    ],
)
def test_the_printed_command_of_other_commands_runs_again(workdir, argv):
    """Sub-commands (``waves trace``, ``waves calc``), ns parameters given in µs (``--time-us``), options of other
    commands: the page's command, run again through the CLI, gives the same summary."""
    page, again = workdir / "p.html", workdir / "again.json"
    nc = [] if argv[:2] == ["waves", "calc"] else ["--no-cache"]  # a calculator reads no trace
    assert run([*argv, *nc, "-f", "html", "-o", str(page)]) == 0
    args = _cmd(page.read_text())
    assert args[1 : 1 + len(argv[:2])] == argv[:2] if argv[0] == "waves" else args[1] == argv[0]
    assert run([*args[1:], *nc, "-f", "json", "-o", str(again)]) == 0, args
    first = json.loads(page.with_suffix(".json").read_text())
    assert json.loads(again.read_text())["summary"] == first["summary"], args
