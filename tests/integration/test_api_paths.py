"""The Python API a user can guess: every command's function takes what its command takes, spelled as the CLI
spells it — a trace as a path, ``annotation=`` a name, the long options as keywords — and gives the CLI's JSON."""

from __future__ import annotations

import json

import pytest

import tracekit
from tests.integration.test_parity import SYN, _same, _same_docs, _takes_cache, data  # noqa: F401 - data: a fixture
from tracekit.registry import COMMANDS
from tracekit.result import table_rows, to_json_obj

# the figure commands draw a picture; their functions give its points (the bar plots, from paths: below) or the figure
# of a table already made (timeline, ledger: test_parity.py)
FIGURES = {"plot decomposition", "plot blocks", "plot exposure", "plot timeline", "plot ledger"}


def _cases(d, tmp):
    """(command, CLI arguments, the same through the API with paths and the CLI's spellings)."""
    dp16, log, log2, k3 = str(d["dp16"]), str(d["log"]), str(d["log2"]), "k3_dp16"
    dp2 = SYN / "dp2dcp8_bs64.trace.json.gz"
    rep = SYN / "graph" / "reordered" / "replay.trace.json.gz"  # a PIECEWISE replay; its captures given by path
    cap = rep.parent / "capture_traces"
    return [
        ("info", [dp16], lambda: tracekit.info(dp16, no_cache=True)),
        ("kernels", [dp16, "--top", "5"], lambda: tracekit.kernels(dp16, top=5, no_cache=True)),
        ("steps", [dp16, "-a", k3, "--phase", "all"], lambda: tracekit.steps(dp16, annotation=k3, phase="all")),
        (
            "wall",
            [dp16, "--ag", "ptop+local", "-a", k3, "--min-step-ms", "0"],
            lambda: tracekit.wall(dp16, ag="ptop+local", annotation=k3, min_step_ms=0),
        ),
        ("temporal", [dp16, "--per-stream"], lambda: tracekit.temporal(dp16, per_stream=True)),
        (
            "overlap",
            [dp16, "--a", "copy:PtoP", "--b", "kind:kernel", "--step-source", "gpu"],
            lambda: tracekit.overlap(dp16, a="copy:PtoP", b="kind:kernel", step_source="gpu"),
        ),
        ("allgather", [dp16, "-a", k3, "-g", "8"], lambda: tracekit.allgather(dp16, annotation=k3, group_size=8)),
        (
            "exposure",
            [dp16, "-a", k3, "--ag-size", "X=1"],
            lambda: tracekit.exposure(dp16, k3, ag_size=["X=1"]),
        ),
        ("comm", [dp16, "-a", k3], lambda: tracekit.comm(dp16, annotation=k3)),
        ("blocks", [dp16, "-a", k3], lambda: tracekit.blocks(dp16, annotation=k3)),
        ("stats", [dp16, "-a", k3, "--by", "op_tag"], lambda: tracekit.stats(dp16, annotation=k3, by="op_tag")),
        (
            "report",
            [dp16, "-a", k3, "-g", "8", "--ag-size", "X=1", "--log", log],
            lambda: tracekit.report(dp16, annotation=k3, group_size=8, ag_size=["X=1"], log=log),
        ),
        (
            "roofline",
            [dp16, "-a", k3, "--hw", "b200", "--bs", "4"],
            lambda: tracekit.roofline(dp16, annotation=k3, hw="b200", bs=4),
        ),
        (
            "hbm",
            [dp16, "-a", k3, "--hw", "b200", "--hbm-gbps", "7000", "--bs", "4", "--var", "context=100000"],
            lambda: tracekit.hbm(dp16, annotation=k3, hw="b200", hbm_gbps="7000", bs=4, var=["context=100000"]),
        ),
        ("hw", ["b200"], lambda: tracekit.hw("b200")),
        ("waves trace", [dp16, "--top", "3"], lambda: tracekit.waves_trace(dp16, top=3)),
        (
            "waves calc",
            ["--sms", "148", "--batch", "4", "--qlen", "2", "--time-us", "10"],
            lambda: tracekit.waves_calc(sms=148, batch=4, qlen=2, time_us=10),
        ),
        ("log", [log], lambda: tracekit.log(log)),
        ("ledger", [log, log2], lambda: tracekit.ledger(log, log2)),
        (
            "capacity",
            ["--log", log, "--layers", "61", "--kv-lora-rank", "512", "--rope-dim", "64"],
            lambda: tracekit.capacity(log=log, layers=61, kv_lora_rank=512, rope_dim=64),
        ),
        (
            "analyze",
            [d["dir"] / "a", "-a", k3, "-j", "1"],
            lambda: tracekit.analyze(d["dir"] / "a", annotation=k3, jobs=1, no_cache=True),
        ),
        (
            "compare",
            [d["dir"] / "a", d["dir"] / "b", "--dp-a", "16", "--dp-b", "2", "-j", "1"],
            lambda: tracekit.compare(d["dir"] / "a", d["dir"] / "b", dp_a=16, dp_b=2, jobs=1),
        ),
        ("bench", [d["dir"] / "bench.csv"], lambda: tracekit.bench([d["dir"] / "bench.csv"])),
        ("ranks", ["--tp", "16", "--dp", "16"], lambda: tracekit.ranks(tp=16, dp=16)),
        ("imbalance", [d["dir"] / "ranks"], lambda: tracekit.imbalance(str(d["dir"] / "ranks"))),
        ("cache info", [], lambda: tracekit.cache_info()),
        ("layers", [dp16], lambda: tracekit.layers(dp16)),
        ("suggest", [dp16, "-a", k3], lambda: tracekit.suggest(dp16, annotation=k3)),
        ("annotations", [dp16, "-a", k3], lambda: tracekit.annotations(dp16, annotation=[k3])),
        (
            "whatif",
            [log, "--set", "mem_fraction_static=0.9"],
            lambda: tracekit.whatif(log, set=["mem_fraction_static=0.9"]),
        ),
        (
            "replay",
            [str(rep), "--capture", str(cap)],
            lambda: tracekit.replay(str(rep), capture=[str(cap)]),
        ),
        ("findings", [dp16, "-a", k3, "--log", log], lambda: tracekit.findings(dp16, annotation=k3, log=log)),
        (
            "findings",
            ["--compare", dp16, dp2, "-a", k3, "--annotation-b", "k3_dp2_dcp8"],
            lambda: tracekit.findings(compare=(dp16, str(dp2)), annotation=k3, annotation_b="k3_dp2_dcp8"),
        ),
    ]


@pytest.mark.slow
def test_every_command_takes_paths_names_and_the_clis_spellings(data, cli, tmp_path):  # noqa: F811
    cases = _cases(data, tmp_path)
    covered = {c for c, _, _ in cases} | {"export", "annotate", "cache clear"} | FIGURES
    assert covered == set(COMMANDS)  # every command: the file writers and cache clear are checked below
    for command, args, api in cases:
        extra = ["--no-cache"] if _takes_cache(command) else []
        code, out, err = cli(*command.split(), *args, *extra, "--format", "json")
        assert code == 0, (command, err)
        _same(json.loads(out), api())


@pytest.mark.slow
def test_the_file_writers_take_a_path_and_an_annotation_name(data, cli, tmp_path):  # noqa: F811
    dp16 = str(data["dp16"])
    for command, fn, target in (("export", tracekit.export, "x"), ("annotate", tracekit.annotate, "x.json.gz")):
        code, out, err = cli(command, dp16, "-a", "k3_dp16", "-o", tmp_path / "cli" / target, "--format", "json")
        assert code == 0, err
        res = fn(dp16, tmp_path / "api" / target, annotation="k3_dp16")  # the README's call
        text = json.dumps(to_json_obj(res)).replace(str(tmp_path / "api"), str(tmp_path / "cli"))
        _same_docs(json.loads(out), json.loads(text))


def test_cache_clear_takes_the_clis_cache_dir(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "c"))
    tracekit.load(SYN / "dp16_bs4.trace.json.gz")
    api = tracekit.cache_clear(cache_dir=tmp_path / "c")
    code, out, _ = cli("cache", "clear", "--format", "json")
    assert code == 0 and api.summary["removed"] == 1 and json.loads(out)["summary"]["removed"] == 0


@pytest.mark.slow
def test_the_readmes_calls(data, tmp_path):  # noqa: F811
    path = str(data["dp16"])
    trace = tracekit.load(path)
    assert tracekit.report(trace, annotation="k3_dp16").command == "report"
    _same_docs(tracekit.report(path, annotation="k3_dp16").to_dict(), tracekit.report(trace, "k3_dp16").to_dict())
    wall = tracekit.wall(path, ag="ptop+local", step_name="scheduler.run_batch")
    assert wall.params["step_name"] == "scheduler.run_batch"
    assert len(tracekit.kernels(trace, top=10).tables["kernels"]) == 10
    assert tracekit.imbalance(str(data["dir"] / "ranks") + "/").command == "imbalance"
    assert tracekit.export(path, tmp_path / "out_dir", annotation="k3_dp16").command == "export"
    points = tracekit.plot_blocks([tracekit.PlotInput(trace=trace, deployment="all", bs=4, annotation="k3_dp16")])
    assert table_rows(points)


def test_a_wrong_argument_is_one_type_error():
    with pytest.raises(TypeError, match=r"^trace must be a path \(str or Path\) or a loaded Trace"):
        tracekit.report(42)
    with pytest.raises(TypeError, match=r"^ann must be an annotation name"):
        tracekit.blocks(SYN / "dp16_bs4.trace.json.gz", annotation=4.5)
    with pytest.raises(TypeError):
        tracekit.wall(SYN / "dp16_bs4.trace.json.gz", nonsense=1)


@pytest.mark.slow
def test_the_bar_plots_take_paths_annotations_and_labels_as_the_cli_does(data, cli, tmp_path):  # noqa: F811
    a = sorted(str(p) for p in (data["dir"] / "a").rglob("*.trace.json.gz"))
    labels = ["A=d_bs"]
    for kind, fn, extra in (
        ("decomposition", tracekit.plot_decomposition, {"ag": "ptop"}),
        ("blocks", tracekit.plot_blocks, {}),
        ("exposure", tracekit.plot_exposure, {}),
    ):
        code, out, err = cli(
            "plot", kind, *a, "-a", "k3_dp16", "--label", *labels, "-o", tmp_path / f"{kind}.png", "--format", "json"
        )
        assert code == 0, err
        api = fn(a, annotation="k3_dp16", label=labels, **extra)
        assert json.loads(out)["tables"]["points"] == json.loads(json.dumps(table_rows(api)))
        assert set(api["deployment"]) == {"A"} and sorted(api["bs"].unique()) == [4, 8]
