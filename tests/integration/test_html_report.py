"""The single-file HTML report, opened in a real (headless) browser: no console error, no network request, the
page's text holds the step time and the findings, and a screenshot that is not blank.

The browser is Debian's `chromium` (`.ci/run` installs it and sets TRACEKIT_REQUIRE_BROWSER=1, so CI fails rather
than skips without one); where no browser exists the browser tests skip with that reason. Screenshots are written
under the test's temporary directory (pytest keeps the last runs' directories)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.annotation import load_annotation
from tracekit.ingest.sglang_log import read_log
from tracekit.render import emit
from tracekit.render.human import value_text

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

ROOT = Path(__file__).resolve().parents[2]
SYN = ROOT / "fixtures" / "synthetic"
sys.path.insert(0, str(ROOT))

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
]


def _browser() -> str:
    for b in BROWSERS:
        found = shutil.which(b)
        if found:
            return found
    if os.environ.get("TRACEKIT_REQUIRE_BROWSER"):
        pytest.fail(f"TRACEKIT_REQUIRE_BROWSER is set but none of {', '.join(BROWSERS)} is on PATH")
    pytest.skip(
        f"no headless browser ({', '.join(BROWSERS)}) on PATH: the HTML report is checked in CI, where "
        ".ci/run installs Debian's chromium"
    )


def open_in_browser(page: Path, work: Path) -> dict:
    """Load ``page`` headless: its DOM text, console lines, the network requests it made and a screenshot."""
    exe = _browser()
    profile = work / "profile"
    net = work / "net.json"
    url = page.resolve().as_uri()
    dom = subprocess.run(
        [
            exe,
            *FLAGS,
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            f"--log-net-log={net}",
            "--virtual-time-budget=3000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    shot = work / f"{page.stem}.png"
    subprocess.run(
        [exe, *FLAGS, f"--user-data-dir={profile}", "--window-size=1200,2400", f"--screenshot={shot}", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln]
    requests = set()
    if net.exists():
        doc = json.loads(net.read_text() or "{}")
        for ev in doc.get("events", []):
            p = ev.get("params") or {}
            # the page's own requests carry its file:// isolation key; the browser's background ones do not
            if (
                "url" in p
                and str(p.get("network_isolation_key", "")).startswith("file://")
                and not p["url"].startswith(("file:", "data:"))
            ):
                requests.add(p["url"])
    text = re.sub(r"<[^>]+>", " ", dom.stdout)
    return {
        "text": re.sub(r"\s+", " ", text),
        "console": console,
        "requests": requests,
        "shot": shot,
        "code": dom.returncode,
    }


def _not_blank(png: Path) -> None:
    from PIL import Image

    assert png.exists(), "no screenshot was written"
    im = Image.open(png).convert("RGB").resize((120, 240))
    colors = im.getcolors(maxcolors=120 * 240)
    assert colors is not None and len(colors) > 20, "the screenshot is (nearly) one colour: a blank page"


def _check(page: Path, work: Path, must: list[str]) -> dict:
    got = open_in_browser(page, work)
    assert got["code"] == 0
    assert not got["console"], got["console"]
    assert not got["requests"], f"the page asked the network for {sorted(got['requests'])}"
    for m in must:
        assert m in got["text"], f"{m!r} is not in the page's text"
    _not_blank(got["shot"])
    return got


def test_bundled_sample_report_in_a_browser(tmp_path, cli):
    out = tmp_path / "sample.html"
    code, _, err = cli("report", "-f", "html", "-o", out)
    assert code == 0, err
    side = json.loads(out.with_suffix(".json").read_text())  # the JSON sidecar is the -f json document
    assert side["command"] == "report"
    wall = value_text("median_wall_ns", side["summary"]["median_wall_ns"])
    _check(out, tmp_path, ["Summary", wall, "How these numbers were obtained"])


def test_k3_report_with_its_log_in_a_browser(tmp_path):
    t = tracekit.load(SYN / "dp16_bs4.trace.json.gz", cache=False)
    res = tracekit.report(t, load_annotation("k3_dp16"), log=read_log(SYN / "dp16.launch.log"))
    page = tmp_path / "k3.html"
    page.write_text(emit(res, "html"))
    top = res.tables["findings"].iloc[0]["title"]
    got = _check(
        page,
        tmp_path,
        [
            value_text("median_wall_ns", res.summary["median_wall_ns"]),
            top,
            "Findings",
            "Memory ledger",
            "timeline",
            "Wall decomposition per step",
        ],
    )
    assert "Extra request slots" in got["text"]  # a memory finding from the log


def test_two_deployment_compare_in_a_browser(tmp_path, cli):
    from fixtures.synth import build, write_trace

    for side, preset, bs in (("a", "dp16", 8), ("b", "dp2dcp8", 64)):
        tr, _ = build(preset, bs, steps=2)
        write_trace(tmp_path / side / f"d_bs{bs}_100k" / "1758612345.12-TP-0.trace.json.gz", tr)
    out = tmp_path / "cmp.html"
    code, _, err = cli(
        "compare",
        tmp_path / "a",
        tmp_path / "b",
        "--dp-a",
        "16",
        "--dp-b",
        "2",
        "-j",
        "1",
        "--annotation-a",
        "k3_dp16",
        "--annotation-b",
        "k3_dp2_dcp8",
        "-f",
        "html",
        "-o",
        out,
    )
    assert code == 0, err
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["tables"]["findings"], "compare of two trace directories carries findings"
    _check(out, tmp_path, ["Median step time per instance concurrency", doc["tables"]["findings"][0]["title"]])


# --------------------------------------------------------------------------- a page of 10^5 steps

MANY_STEPS = 100_000
REPORT_BOUND_S = 60  # well under the 90 s (report -f html on 10^5 steps ran past it)
LOOSE_BOUND_S = 300  # what must hold even on a loaded machine
# report -f html on 10^5 steps took 43 s quiet and 81-213 s loaded when the automatic layers masked every kernel per
# step (layers _context, since replaced by one pass over the kernels sorted by step); at 0321c76 it took 23.9 s on
# 2 cores at load average 9.5, so the 60 s bound is a plain test again, no longer an expected failure


def _many_steps_trace(path: Path, n: int) -> Path:
    """``n`` ProfilerStep#N markers on the GPU, a small kernel in each (text written directly: 2·10^5 events in
    about a second)."""
    ev = []
    for i in range(n):
        t = i * 100
        ev.append(
            f'{{"ph":"X","cat":"gpu_user_annotation","name":"ProfilerStep#{i}","pid":0,"tid":7,"ts":{t},'
            f'"dur":90,"args":{{"device":0,"stream":7,"External id":{i + 1}}}}}'
        )
        for name, off, dur in (("gemm", 1, 40),):
            ev.append(
                f'{{"ph":"X","cat":"kernel","name":"{name}","pid":0,"tid":7,"ts":{t + off},"dur":{dur},'
                f'"args":{{"device":0,"stream":7,"correlation":{i + 1}}}}}'
            )
    path.write_text('{"schemaVersion":1,"traceEvents":[' + ",\n".join(ev) + "]}")
    return path


@pytest.fixture(scope="module")
def many_steps_page(tmp_path_factory):
    """`tracekit report TRACE -f html` (to stdout) on a 10^5-step trace: the page, and the seconds it took."""
    import contextlib
    import io
    import time

    from tracekit.cli import run

    path = _many_steps_trace(tmp_path_factory.mktemp("many") / "steps.json", MANY_STEPS)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["report", str(path), "--no-cache", "-f", "html"])
    took = time.perf_counter() - t0
    assert code == 0, err.getvalue()
    return out.getvalue(), took


@pytest.mark.slow
def test_a_page_of_1e5_steps_is_bounded_and_says_it_sampled(many_steps_page):
    from tracekit.render.html.svg import MAX_BARS
    from tracekit.render.html.tables import MAX_ROWS

    page, took = many_steps_page
    assert took < LOOSE_BOUND_S, f"report -f html on {MAX_STEPS_TEXT} steps took {took:.0f} s"
    assert f"Wall decomposition per step ({MAX_BARS:,} of {MAX_STEPS_TEXT} steps, sampled)" in page
    assert "evenly spaced from the first to the last" in page
    tables = page.count('<table class="sortable"')
    assert page.count("<tr") <= tables * (MAX_ROWS + 1)  # no table holds more than MAX_ROWS rows on the page
    assert f"the first {MAX_ROWS:,} of {MAX_STEPS_TEXT} rows" in page  # and a cut one says so
    assert len(page.encode()) < 5_000_000


@pytest.mark.slow
def test_report_html_of_1e5_steps_takes_well_under_90_s(many_steps_page):
    _, took = many_steps_page
    assert took < REPORT_BOUND_S, f"report -f html on {MAX_STEPS_TEXT} steps took {took:.0f} s"


MAX_STEPS_TEXT = f"{MANY_STEPS:,}"
