"""Plots on hand-built tables: files are written, not blank, of sane size; bs and median-step rules."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
import sys

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from tracekit.errors import TracekitError
from tracekit.analyses.fleet import plot_data
from tracekit.render import plots


def _png_pixels(path):
    from matplotlib.image import imread

    return imread(path)


def assert_picture(path, *, min_bytes=3_000, max_bytes=3_000_000):
    """Produced, of sane size, and not blank: a PNG has many non-white pixels and several colours."""
    assert path.exists()
    size = path.stat().st_size
    assert min_bytes < size < max_bytes, size
    if path.suffix == ".png":
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        px = _png_pixels(path)[..., :3]
        non_white = (px < 0.95).any(axis=-1).mean()
        assert 0.02 < non_white < 0.98, non_white
        colours = np.unique((px.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
        assert len(colours) > 8
    else:
        text = path.read_text()
        assert text.lstrip().startswith("<?xml") and "<svg" in text and text.count("<path") > 10


def decomposition_points():
    return pd.DataFrame(
        [
            {
                "deployment": "A",
                "bs": 4,
                "trace": "a_bs4.json",
                "step": 1,
                "wall_ns": 10_000_000,
                "busy_ns": 7_000_000,
                "ag_only_ns": 2_000_000,
                "idle_ns": 1_000_000,
            },
            {
                "deployment": "A",
                "bs": 8,
                "trace": "a_bs8.json",
                "step": 0,
                "wall_ns": 12_000_000,
                "busy_ns": 10_000_000,
                "ag_only_ns": 1_000_000,
                "idle_ns": 1_000_000,
            },
            {
                "deployment": "B",
                "bs": 8,
                "trace": "b_bs8.json",
                "step": 2,
                "wall_ns": 11_000_000,
                "busy_ns": 10_500_000,
                "ag_only_ns": 0,
                "idle_ns": 500_000,
            },
        ]
    )


@pytest.mark.slow
@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_decomposition_figure_two_deployments(tmp_path, suffix):
    fig = plots.decomposition_figure(decomposition_points())
    info = plots.save_figure(fig, tmp_path / f"d.{suffix}")
    assert info["format"] == suffix and info["bytes"] == (tmp_path / f"d.{suffix}").stat().st_size
    assert info["width_px"] >= 1000 and info["height_px"] == 750
    assert_picture(tmp_path / f"d.{suffix}")


@pytest.mark.slow
def test_blocks_and_exposure_figures(tmp_path):
    rows = []
    for bs, scale in ((1, 1.0), (16, 2.0)):
        for k, (t, ns) in enumerate({"head": 50_000, "attn": 4_000_000, "mlp": 6_000_000, "tail": 90_000}.items()):
            rows.append(
                {
                    "deployment": "all",
                    "bs": bs,
                    "trace": f"x_bs{bs}",
                    "step": 0,
                    "block_type": t,
                    "blocks": 1,
                    "first_block": k,
                    "kernel_ns": int(ns * scale),
                }
            )
    plots.save_figure(plots.blocks_figure(pd.DataFrame(rows)), tmp_path / "b.png")
    assert_picture(tmp_path / "b.png")
    exp = pd.DataFrame(
        [
            {"deployment": "all", "bs": bs, "trace": f"x_bs{bs}", "step": 0, "type": t, "exposed_ns": v}
            for bs in (1, 16)
            for t, v in (("MoE", 300_000 * bs), ("attn", 100_000))
        ]
    )
    plots.save_figure(plots.exposure_figure(exp, title="exposed"), tmp_path / "e.png")
    assert_picture(tmp_path / "e.png")


@pytest.mark.slow
def test_bars_without_bs_are_named_by_trace(tmp_path):
    pts = decomposition_points().assign(bs=[4, None, 8])
    _, order = plots._x_keys(pts)
    assert order == ["a_bs4", "a_bs8", "b_bs8"]
    plots.save_figure(plots.decomposition_figure(pts), tmp_path / "n.png")
    assert_picture(tmp_path / "n.png")


def timeline_tables():
    ev = pd.DataFrame(
        {
            "start_ns": [0, 100, 300, 500, 120, 250, 900],
            "dur_ns": [90, 190, 180, 400, 100, 100, 50],
            "kind": ["kernel", "kernel", "kernel", "kernel", "kernel", "memcpy", "kernel"],
            "device": [0] * 7,
            "stream": [7, 7, 7, 7, 20, 20, 7],
            "block_type": pd.Categorical(["head", "attn", "attn", "mlp", "attn", "attn", None]),
        }
    )
    U = 10_000  # the step is 10 ms
    ev[["start_ns", "dur_ns"]] *= U
    ev["end_ns"] = ev["start_ns"] + ev["dur_ns"]
    tables = {
        "events": ev,
        "steps": pd.DataFrame({"step": [0], "start_ns": [0], "end_ns": [1000], "dur_ns": [1000]}),
        "blocks": pd.DataFrame(
            {
                "step": [0, 0, 0],
                "block": [0, 1, 2],
                "block_type": ["head", "attn", "mlp"],
                "start_ns": [0, 100, 500],
                "end_ns": [100, 500, 1000],
            }
        ),
        "allgathers": pd.DataFrame(
            {"ag": [0], "step": [0], "device": [0], "stream": [20], "start_ns": [120], "end_ns": [350]}
        ),
        "exposed": pd.DataFrame({"ag": [0], "step": [0], "type": ["attn"], "start_ns": [290], "end_ns": [300]}),
    }
    for name in ("steps", "blocks", "allgathers", "exposed"):
        for col in ("start_ns", "end_ns", "dur_ns"):
            if col in tables[name]:
                tables[name][col] *= U
    return tables


@pytest.mark.slow
@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_timeline_figure(tmp_path, suffix):
    fig = plots.timeline_figure(timeline_tables(), step=0, main_stream=(0, 7))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["blocks", "dev 0 stream 7 (main)", "dev 0 stream 20", "exposed AllGather"]
    assert "10.00 ms wall, 0.10 ms exposed" in ax.get_title()
    plots.save_figure(fig, tmp_path / f"t.{suffix}")
    assert_picture(tmp_path / f"t.{suffix}")


def test_timeline_unknown_step_is_usage_error():
    with pytest.raises(TracekitError) as exc:
        plots.timeline_figure(timeline_tables(), step=5)
    assert exc.value.exit_code == 2 and "no step 5" in str(exc.value)


def test_save_figure_needs_png_or_svg(tmp_path):
    with pytest.raises(TracekitError) as exc:
        plots.save_figure(plots.decomposition_figure(decomposition_points()), tmp_path / "x.jpg")
    assert exc.value.exit_code == 2 and ".png or .svg" in str(exc.value)
    assert not (tmp_path / "x.jpg").exists()


@pytest.mark.parametrize(
    "path, bs",
    [
        ("runs/dp16_bs4.trace.json.gz", 4),
        ("d_bs16_100k/x-TP-0.trace.json.gz", 16),
        ("bs_32/rank0.json", 32),
        ("BS=8.json", 8),
        ("abs12/trace.json", None),
        ("dp16/trace.json", None),
        ("bs4/bs24.trace.json", 24),
    ],
)
def test_bs_from_path(path, bs):
    assert plot_data.bs_from_path(path) == bs


def test_median_step_is_the_lower_middle_wall():
    steps = pd.DataFrame({"step": [0, 1, 2, 3], "dur_ns": [40, 10, 30, 20]})
    assert plot_data.median_step(steps) == 3  # walls sorted 10 (1), 20 (3), 30 (2), 40 (0): lower middle = step 3
    assert plot_data.median_step(steps.iloc[:3]) == 2


def test_type_colors_are_stable_and_avoid_red_and_grey():
    a = plots.type_colors(["mlp", "attn", "head"])
    b = plots.type_colors(["head", "attn", "mlp", plots.NO_BLOCK])
    assert a["attn"] == b["attn"] and a["mlp"] == b["mlp"]
    from matplotlib.colors import to_rgb

    for t in ("attn", "mlp", "head"):
        r, g, bl = to_rgb(b[t])
        assert not (r > 0.7 and g < 0.3 and bl < 0.3)  # no red: exposed time is red
        assert not (abs(r - g) < 0.02 and abs(g - bl) < 0.02)  # no grey: events outside blocks are grey


@pytest.mark.slow
def test_import_tracekit_does_not_import_matplotlib():
    code = (
        "import sys, tracekit, tracekit.render.plots, tracekit.exporters, tracekit.cli; "
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.slow
def test_ledger_waterfall(cli, tmp_path):
    syn = Path(__file__).resolve().parents[3] / "fixtures" / "synthetic"
    out = tmp_path / "ledger.png"
    code, stdout, err = cli(
        "plot", "ledger", syn / "dp16.launch.log", syn / "dp2dcp8.launch.log", "-o", out, "--format", "json"
    )
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["summary"]["logs"] == 2 and out.stat().st_size > 20_000
    rows = {(r["log"], r["row"]): r["gib"] for r in doc["tables"]["points"]}
    assert rows[("dp16.launch.log", "kv_gib")] == pytest.approx(41.1)
    code, _, err = cli(
        "plot", "ledger", syn / "dp16.launch.log", syn / "dp16.launch.log", syn / "dp16.launch.log", "-o", out
    )
    assert code == 2


def test_dollar_signs_in_names_are_drawn_as_written(tmp_path):
    from matplotlib.text import Text

    from tracekit.render.plots import save_figure, stacked_bars_figure

    pts = pd.DataFrame(
        {
            "deployment": ["a", "a"],
            "bs": [1, 1],
            "trace": ["t", "t"],
            "step": [0, 0],
            "block_type": ["$x_1$", "cost $5"],
            "kernel_ns": [1e6, 2e6],
        }
    )
    fig = stacked_bars_figure(pts, stack="block_type", value="kernel_ns", title="unbalanced $")
    texts = fig.findobj(Text) + [t for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert texts and not any(t.get_parse_math() for t in texts)
    assert save_figure(fig, tmp_path / "d.png")["bytes"] > 0  # an unbalanced $ would fail in mathtext
