"""The quick tier's share of the commands whose other tests are all slow (issue 27): `hw`, `ranks`, `suggest`,
`analyze`, `compare` and the five `plot` commands, each run once through the CLI on the smallest inputs (the bundled
sample, one committed launch log) and compared with its Python function, as tests/integration/test_parity.py does
for every command on the synthetic deployments in the slow tier. Every other command has a quick test of its own
(tests/integration/test_cli.py, test_ledger.py, the unit and reliability tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import tracekit
from tests.integration.test_parity import _same, _takes_cache
from tracekit.annotation import load_annotation
from tracekit.cli.common import DEFAULT_ANNOTATION, bundled_sample
from tracekit.result import table_rows

SAMPLE = bundled_sample()
LOG = Path(__file__).resolve().parents[1] / "fixtures" / "synthetic" / "dp16.launch.log"


def _load(p):
    return tracekit.load(p, cache=False)


@pytest.fixture
def sweep(tmp_path):
    """Two deployments of one point each, both the bundled sample, laid out as `analyze` expects."""
    for side in ("a", "b"):
        point = tmp_path / side / "d_bs4_100k"
        point.mkdir(parents=True)
        shutil.copyfile(SAMPLE, point / f"1758612345.12-TP-0{''.join(SAMPLE.suffixes)}")
    return tmp_path


def _cases(d: Path):
    return [
        ("hw", ["b200"], lambda: tracekit.hw_profiles("b200")),
        ("ranks", ["--tp", "16", "--dp", "16"], lambda: tracekit.rank_map(tp=16, dp=16, attn_cp=1, dp_attention=True)),
        ("suggest", [SAMPLE], lambda: tracekit.suggested_annotation(_load(SAMPLE))),
        (
            "analyze",
            [d / "a", "-a", DEFAULT_ANNOTATION, "-j", "1"],
            lambda: tracekit.analyze(
                d / "a", annotation=DEFAULT_ANNOTATION, jobs=1, steps=tracekit.step_options(DEFAULT_ANNOTATION)
            ),
        ),
        (
            "compare",
            [d / "a", d / "b", "--dp-a", "16", "--dp-b", "2", "-j", "1"],
            lambda: tracekit.compare_deployments(d / "a", d / "b", dp_a=16, dp_b=2, jobs=1),
        ),
    ]


@pytest.mark.parametrize("command", ["hw", "ranks", "suggest", "analyze", "compare"])
def test_the_cli_gives_the_api_s_json(command, sweep, cli):
    ((args, api),) = [(a, f) for c, a, f in _cases(sweep) if c == command]
    extra = ["--no-cache"] if _takes_cache(command) else []
    code, out, err = cli(*command.split(), *args, *extra, "--format", "json")
    assert code == 0, err
    _same(json.loads(out), api())


def test_the_plot_points_are_their_functions_and_every_plot_is_a_picture(cli, tmp_path):
    from tracekit.analyses.fleet import plot_data as plots

    ann = load_annotation(DEFAULT_ANNOTATION)
    inp = [plots.PlotInput(trace=_load(SAMPLE), deployment="all", bs=None, annotation=ann)]
    for kind, fn in (
        ("decomposition", lambda: plots.decomposition_points(inp, ag="ptop")),
        ("blocks", lambda: plots.blocks_points(inp)),
        ("exposure", lambda: plots.exposure_points(inp)),
    ):
        code, out, err = cli(
            "plot",
            kind,
            SAMPLE,
            "-a",
            DEFAULT_ANNOTATION,
            "-o",
            tmp_path / f"{kind}.png",
            "--no-cache",
            "--format",
            "json",
        )
        assert code == 0, (kind, err)
        assert json.loads(out)["tables"]["points"] == json.loads(json.dumps(table_rows(fn()))), kind
    for kind, args in (("timeline", [SAMPLE, "--no-cache"]), ("ledger", [LOG])):
        code, out, err = cli("plot", kind, *args, "-o", tmp_path / f"{kind}.png")
        assert code == 0, (kind, err)
    for kind in ("decomposition", "blocks", "exposure", "timeline", "ledger"):
        assert (tmp_path / f"{kind}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", kind


def test_compare_records_the_annotations_it_was_given(sweep):
    """The compare page's "how these numbers were obtained" command lacked --annotation-a/-b: the result did not
    record them. Now they are parameters, and the printed command carries them."""
    from tracekit.render.html.command import command_args

    res = tracekit.compare_deployments(
        sweep / "a",
        sweep / "b",
        dp_a=16,
        dp_b=2,
        jobs=1,
        annotation_a=DEFAULT_ANNOTATION,
        annotation_b=DEFAULT_ANNOTATION,
    )
    assert res.params["annotation_a"] == res.params["annotation_b"] == DEFAULT_ANNOTATION
    args = command_args(res)
    assert args[:2] == ["tracekit", "compare"]
    assert args[args.index("--annotation-a") + 1] == DEFAULT_ANNOTATION
    assert args[args.index("--annotation-b") + 1] == DEFAULT_ANNOTATION
    plain = tracekit.compare_deployments(sweep / "a", sweep / "b", dp_a=16, dp_b=2, jobs=1)
    assert "annotation_a" not in plain.params and "--annotation-a" not in command_args(plain)
