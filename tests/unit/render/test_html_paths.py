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


# ------------------------------------------------------------------ issue 41: a page carries none of the user's folders


def _machine_folders(tmp_path: Path) -> list[str]:
    return [str(tmp_path), str(tmp_path.resolve()), os.path.expanduser("~") + os.sep, str(ROOT)]


def _holds(text: str, folders: list[str]) -> list[str]:
    plain = html.unescape(text)
    return [f for f in folders if f in text or f in plain or json.dumps(f)[1:-1] in text]


@pytest.fixture
def elsewhere(workdir, tmp_path, monkeypatch):
    """The page's folder (``out``) beside the traces' folder, the command run from a third folder."""
    (tmp_path / "out").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path / "out"


@pytest.mark.slow  # a CLI run
def test_a_page_and_its_sidecar_from_absolute_paths_hold_no_folder_of_the_machine(workdir, elsewhere, tmp_path, cli):
    trace, log = workdir / "traces" / "dp16_bs4.trace.json.gz", workdir / "dp16.launch.log"
    code, _, err = cli(
        "report", trace, "-a", "k3_dp16", "--log", log, "--no-cache", "-f", "html", "-o", elsewhere / "p.html"
    )
    assert code == 0, err
    page, side = (elsewhere / "p.html").read_text(), (elsewhere / "p.json").read_text()
    assert _holds(page, _machine_folders(tmp_path)) == [] and _holds(side, _machine_folders(tmp_path)) == []
    rel = "../run here/traces/dp16_bs4.trace.json.gz"  # relative to the page's folder, not to where it ran
    assert _cmd(page)[:3] == ["tracekit", "report", rel]
    doc = json.loads(side)
    assert [i["path"] for i in doc["inputs"]] == [rel, "../run here/dp16.launch.log"]
    assert doc["params"]["log"] == "../run here/dp16.launch.log"
    assert all(not w.startswith("/") for w in doc["warnings"])
    assert _see(page) and all("../run here/" in " ".join(c) for c in _see(page) if len(c) > 2)


@pytest.mark.slow  # a CLI run
def test_full_paths_keeps_them_and_json_is_data_for_scripts(workdir, elsewhere, cli):
    trace = workdir / "traces" / "dp16_bs4.trace.json.gz"
    code, _, err = cli("kernels", trace, "--no-cache", "-f", "html", "--full-paths", "-o", elsewhere / "k.html")
    assert code == 0, err
    assert _cmd((elsewhere / "k.html").read_text())[2] == str(trace)
    side = json.loads((elsewhere / "k.json").read_text())
    assert side["inputs"][0]["path"] == str(trace)
    code, out, err = cli("kernels", trace, "--no-cache", "-f", "json")  # -f json keeps the paths as given
    assert code == 0 and json.loads(out)["inputs"][0]["path"] == str(trace)
    assert json.loads(out) == side
    assert cli("kernels", trace, "--no-cache", "-f", "json", "-o", elsewhere / "x.json")[0] == 0
    assert json.loads((elsewhere / "x.json").read_text())["inputs"][0]["path"] == str(trace)


def test_result_save_takes_full_paths(workdir, elsewhere):
    trace = workdir / "traces" / "dp16_bs4.trace.json.gz"
    res = tracekit.kernel_stats(tracekit.load(trace, cache=False))
    res.save(elsewhere / "a.html")
    res.save(elsewhere / "b.html", full_paths=True)
    assert str(workdir) not in (elsewhere / "a.html").read_text() + (elsewhere / "a.json").read_text()
    assert str(trace) in (elsewhere / "b.html").read_text() and str(trace) in (elsewhere / "b.json").read_text()


def test_a_path_that_would_climb_to_the_root_or_past_home_is_its_file_name(monkeypatch):
    from tracekit.render.html.paths import PathView

    monkeypatch.setenv("HOME", "/home/me")
    assert PathView("/home/me/out").shown("/home/me/t/x.json") == "../t/x.json"  # home's own folders: relative
    assert PathView("/home/other/out").shown("/home/me/t/x.json") == "x.json"  # up to /home, down to "me"
    assert PathView("/var/out").shown("/data/t/x.json") == "x.json"  # up to the root
    assert PathView("/data/out").shown("/data/t/x.json") == "../t/x.json"
    assert PathView("/data/out", full=True).shown("/data/t/x.json") == "/data/t/x.json"
    assert PathView("/data/out").shown("k3_dp16") == "k3_dp16"  # a name, not a path here


@pytest.mark.slow  # the page's command run again through the CLI
def test_the_command_runs_again_from_the_pages_folder(workdir, elsewhere, cli, monkeypatch):
    trace, log = workdir / "traces" / "dp16_bs4.trace.json.gz", workdir / "dp16.launch.log"
    code, _, err = cli(
        "report", trace, "-a", "k3_dp16", "--log", log, "--no-cache", "-f", "html", "-o", elsewhere / "p.html"
    )
    assert code == 0, err
    args = _cmd((elsewhere / "p.html").read_text())
    monkeypatch.chdir(elsewhere)
    assert run([*args[1:], "--no-cache", "-f", "json", "-o", "again.json"]) == 0
    again, first = json.loads((elsewhere / "again.json").read_text()), json.loads((elsewhere / "p.json").read_text())
    assert again["summary"] == first["summary"]
    assert again["inputs"] == first["inputs"]  # the sidecar's paths are the ones the command was given


@pytest.mark.slow  # writes and reads an 8-rank run
def test_the_page_of_a_run_of_ranks_holds_no_folder_of_the_machine(tmp_path, monkeypatch, cli):
    from fixtures.synthlib.multirank import write_run

    write_run("dp_attn_deepep8", tmp_path / "run", truth_path=tmp_path / "truth.json", steps=3)
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(ROOT)
    for command in ("report", "imbalance"):
        code, _, err = cli(command, tmp_path / "run", "--no-cache", "-f", "html", "-o", tmp_path / "out" / "r.html")
        assert code == 0, err
        page, side = (tmp_path / "out" / "r.html").read_text(), (tmp_path / "out" / "r.json").read_text()
        assert _holds(page, _machine_folders(tmp_path)) == [] and _holds(side, _machine_folders(tmp_path)) == []
        assert all(a.startswith("../run/") for a in _cmd(page)[2:] if not a.startswith("-")), _cmd(page)
