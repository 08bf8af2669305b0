"""Parts of the HTML page that moved to their own modules (issue 27), checked on their own, hand-worked: the memory
ledger's waterfall (shared by the page and `tracekit plot ledger`) and the page's paths made relative in one pass."""

from __future__ import annotations

import math
import re

from tracekit.render.html.paths import relative_paths
from tracekit.render.html.svg import ledger_waterfall_svg
from tracekit.render.ledger_layout import ledger_bars

LEDGER = {
    "usable_gib": 70.0,
    "weights_resident_gib": 30.0,
    "draft_weights_gib": math.nan,
    "cuda_graph_gib": 2.5,
    "nccl_init_gib": math.inf,
    "runtime_margin_gib": 1.5,
    "kv_gib": 20.0,
    "draft_kv_gib": 4.0,
    "unrelated_gib": 99.0,
}


def test_the_waterfall_falls_by_the_overhead_then_stacks_the_pools():
    bars, level = ledger_bars(LEDGER)
    # 70 - 30 - 2.5 - 1.5 = 36 left; NaN and inf rows, rows the ledger lacks and rows not in the layout left out
    assert bars == [
        ("usable", 0.0, 70.0),
        ("weights resident", 40.0, 30.0),
        ("CUDA graphs", 37.5, 2.5),
        ("runtime margin", 36.0, 1.5),
        ("KV cache", 0.0, 20.0),
        ("draft KV", 20.0, 4.0),
    ]
    assert level == 36.0


def test_the_page_draws_a_bar_per_ledger_bar_and_the_level_left():
    svg = ledger_waterfall_svg(LEDGER)
    titles = re.findall(r"<rect [^>]*><title>([^<]*)</title></rect>", svg)
    assert titles == [
        "usable: 70.00 GiB",
        "weights resident: 30.00 GiB",
        "CUDA graphs: 2.50 GiB",
        "runtime margin: 1.50 GiB",
        "KV cache: 20.00 GiB",
        "draft KV: 4.00 GiB",
    ]
    assert "36.0 GiB left for the state pools" in svg
    assert ledger_waterfall_svg({"kv_gib": 20.0}) == ""  # no usable memory: no picture


def test_paths_are_replaced_once_and_only_where_they_start():
    fixes = [("/home/me/run/a.json", "run/a.json"), ("/home/me/", "~/")]
    text = "see /home/me/run/a.json and /home/me/b.json, not x/home/me/c nor ./home/me/d"
    assert relative_paths(text, fixes) == "see run/a.json and ~/b.json, not x/home/me/c nor ./home/me/d"
    assert relative_paths("nothing here", fixes) == "nothing here"
