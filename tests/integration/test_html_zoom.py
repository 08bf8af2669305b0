"""The HTML page's step timeline zooms and pans in a real (headless) browser, and a report of 10^4 steps renders
there; the browser helpers are those of test_html_report.py (skip without a browser unless
TRACEKIT_REQUIRE_BROWSER is set)."""

from __future__ import annotations

import html
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

import tracekit
from tracekit.render import emit

from test_html_report import FLAGS, SYN, _browser, _check, _many_steps_trace

pytestmark = pytest.mark.slow  # whole-deployment runs: the slow tier (issue 27)

# dispatched after the page's own script: a wheel over the plot a quarter from its left edge, a drag 60 px to the
# left, then the "whole step" button; the view box and the axis' first tick after each, written into the page
PROBE = """<script>
(function(){
  var p=document.querySelector('.timeline svg.tl-plot'),t=document.querySelector('.timeline svg.tl-axis text');
  var r=p.getBoundingClientRect(),got={before:p.getAttribute('viewBox'),tick0:t.textContent};
  p.dispatchEvent(new WheelEvent('wheel',{deltaY:-120,clientX:r.left+r.width*0.25,clientY:r.top+4,bubbles:true,
                                          cancelable:true}));
  got.wheel=p.getAttribute('viewBox');got.tick0_wheel=t.textContent;got.width=r.width;
  p.dispatchEvent(new MouseEvent('mousedown',{clientX:r.left+200,clientY:r.top+4,bubbles:true}));
  window.dispatchEvent(new MouseEvent('mousemove',{clientX:r.left+140,clientY:r.top+4}));
  window.dispatchEvent(new MouseEvent('mouseup',{}));
  got.drag=p.getAttribute('viewBox');
  document.querySelector('.timeline button[data-zoom="in"]').click();got.button_in=p.getAttribute('viewBox');
  document.querySelector('.timeline button[data-zoom="reset"]').click();got.reset=p.getAttribute('viewBox');
  var o=document.createElement('pre');o.id='probe';o.textContent=JSON.stringify(got);document.body.appendChild(o);
})();
</script></body>"""


def _probe(page: Path, work: Path) -> dict:
    exe = _browser()
    probed = work / f"{page.stem}.probe.html"
    probed.write_text(page.read_text().replace("</body>", PROBE, 1))
    dom = subprocess.run(
        [
            exe,
            *FLAGS,
            f"--user-data-dir={work / 'profile'}",
            "--window-size=1200,2000",
            "--virtual-time-budget=3000",
            "--dump-dom",
            probed.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert m, f"the probe did not run: {dom.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


def _box(vb: str) -> list[float]:
    return [float(x) for x in vb.split()]


@pytest.mark.slow  # two browser runs (9 s on 2 busy cores)
def test_the_timeline_zooms_pans_and_resets(tmp_path):
    res = tracekit.report(tracekit.load(SYN / "dp16_bs4.trace.json.gz", cache=False), "k3_dp16")
    page = tmp_path / "k3.html"
    page.write_text(emit(res, "html"))
    _check(page, tmp_path, ["zoom in", "whole step"])  # no console error, no network
    got = _probe(page, tmp_path)
    x0, y0, w0, h0 = _box(got["before"])
    assert (x0, y0) == (0, 0) and w0 > 0
    x1, y1, w1, h1 = _box(got["wheel"])
    assert w1 == pytest.approx(w0 / 1.5, rel=1e-3) and (y1, h1) == (y0, h0)  # x only: lanes keep their height
    assert x1 == pytest.approx(0.25 * w0 * (1 - 1 / 1.5), rel=1e-2)  # around the pointer
    assert got["tick0_wheel"] != got["tick0"] and got["tick0"].startswith("+0")  # the axis follows the view
    x2, _, w2, _ = _box(got["drag"])
    assert w2 == pytest.approx(w1) and x2 == pytest.approx(x1 + 60 / got["width"] * w1, rel=1e-2)  # panned right
    assert _box(got["button_in"])[2] == pytest.approx(w2 / 2, rel=1e-3)
    assert _box(got["reset"]) == [0, 0, w0, h0]


@pytest.mark.slow  # a 10^4-step report and two browser runs (8 s on 2 busy cores)
def test_a_report_of_1e4_steps_renders_in_a_browser(tmp_path):
    n = 10_000
    path = _many_steps_trace(tmp_path / "steps.json", n)
    t0 = time.perf_counter()
    res = tracekit.report(tracekit.load(path, cache=False))
    page_text = emit(res, "html")
    took = time.perf_counter() - t0
    assert res.summary["steps"] == n
    page = tmp_path / "many.html"
    page.write_text(page_text)
    assert len(page_text.encode()) < 5_000_000
    got = _check(
        page,
        tmp_path,
        [f"60 of {n:,} steps, sampled", "How these numbers were obtained", f"the first 500 of {n:,} rows"],
    )
    assert "zoom in" in got["text"]
    assert took < 120, f"report and page of {n:,} steps took {took:.0f} s"
