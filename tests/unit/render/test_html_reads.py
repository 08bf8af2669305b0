"""A page that reads (issue 29): the headline and the one-step picture before everything else, the minor findings
behind one closed <details>, names that wrap inside their cards, and a per-layer picture and tables that agree
with the report's own tables."""

from __future__ import annotations

import functools
import html
import re
from pathlib import Path

import pandas as pd

import tracekit
from tracekit.render import emit
from tracekit.render.html.page import CSS, sections
from tracekit.render.html.layers import layer_section

SYN = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic"


@functools.lru_cache(maxsize=None)
def _report(name="dsv3_bs32.trace.json.gz", ann=None):  # one report per trace for the module (rendering reads it)
    return tracekit.report(tracekit.load(SYN / name, cache=False), ann)


def test_headline_and_one_step_picture_come_first_then_findings():
    res = _report("dp16_bs4.trace.json.gz", "k3_dp16")
    page = emit(res, "html")
    h2 = re.findall(r"<h2>(.*?)</h2>", page)
    assert h2[0].startswith("Where step ") and h2[1] == "Findings", h2[:3]
    head = page.index('class="lead headline"')
    assert head < page.index("<h2>") and "Median step" in page[head : head + 300]
    assert page.index("<h2>Findings") < page.index("<h2>Summary")


def test_minor_findings_are_collapsed_and_major_ones_are_not():
    res = _report("dp16_bs4.trace.json.gz", "k3_dp16")
    f = res.tables["findings"]
    minor, major = f[f["minor"].astype(bool)], f[~f["minor"].astype(bool)]
    assert len(minor) and len(major)
    page = emit(res, "html")
    fold = re.search(r'<details class="minor-findings"><summary>(\d+) minor finding', page)
    assert fold and int(fold.group(1)) == len(minor)
    closed = page[fold.start() : page.index("</details>", fold.start())]
    for t in minor["title"]:
        assert html.escape(t) in closed
    before = page[: fold.start()]
    for t in major["title"]:
        assert html.escape(t) in before
    assert before.count('class="finding"') == len(major)


def test_a_long_kernel_name_wraps_inside_its_card_with_the_full_name_on_hover():
    long = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<" + "X" * 300 + ">>"
    f = pd.DataFrame(
        {
            "rank": [1],
            "kind": ["k"],
            "title": [f"Tail wave of {long}"],
            "gain_ms_per_step": [1.0],
            "gain_pct": [5.0],
            "basis": ["measured"],
            "evidence": [long],
            "command": ["tracekit kernels t"],
            "suggestion": ["s"],
            "how": ["h"],
            "minor": [False],
        }
    )
    page = emit(
        tracekit.result.Result(command="findings", inputs=[], params={}, summary={}, tables={"findings": f}), "html"
    )
    assert 'title="Tail wave of void at::native::elementwise_kernel&lt;128' in page
    assert re.search(r"\.finding h3,\.finding p\{overflow-wrap:anywhere", CSS)


def test_the_layers_of_the_median_step_match_the_layers_table():
    res = _report()  # no annotation: the automatic layers
    title, body, note = layer_section(res)
    step = res.summary["timeline_step"]
    assert title == f"Layers of step {step} (the median step)"
    lay = res.tables["layers"]
    lay = lay[lay["step"] == step].sort_values("start_ns")
    assert body.count("<rect x=") == len(lay)  # a column per layer
    walls = [float(m) for m in re.findall(r"· wall ([\d,.]+) ms", body)]
    assert len(walls) == len(lay)
    assert abs(sum(walls) - float((lay["end_ns"] - lay["start_ns"]).sum()) / 1e6) < 0.001 * len(lay)
    for t, n in lay["layer_type"].value_counts().items():  # the layer types by cost: how many of each
        assert re.search(
            rf"<td data-v=\"{re.escape(str(t))}\">{re.escape(str(t))}</td><td class=n data-v=\"{n}\">", body
        ), (t, n)
    assert "every layer of step" in body
    assert any(s.startswith("<h2>Layers of step") for s in sections(res))


def test_an_annotation_shows_its_blocks():
    res = _report("dp16_bs4.trace.json.gz", "k3_dp16")
    title, body, _ = layer_section(res)
    assert title.startswith("Blocks of step")
    tl = res.tables["timeline"]
    assert body.count("<rect x=") == int((tl["lane"] == "blocks").sum())
    assert "block_type" in body


def test_the_block_types_carry_the_annotation_s_kernel_time():
    res = _report("dp16_bs4.trace.json.gz", "k3_dp16")
    _, body, _ = layer_section(res)
    bt = res.tables["block_types"]
    bt = bt[bt["step"] == res.summary["timeline_step"]]
    for t, ns in zip(bt["block_type"], bt["kernel_ns"]):
        assert re.search(
            rf'<td data-v="{re.escape(str(t))}">{re.escape(str(t))}</td>(?:(?!</tr>).)*<td class=n data-v="'
            rf'{re.escape(repr(ns / 1e6))}">',
            body,
        ), t
