"""One list of commands (tracekit/registry.py): the CLI has exactly those commands, each function is public,
and every command gives the same JSON through the CLI as through its Python function with the same options."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import typer.main

import tracekit
from tracekit.analyses.options import AllGatherOptions
from tracekit.analyses.steps.resolve import step_options
from tracekit.annotation import load_annotation
from tracekit.cli import app
from tracekit.cli.common import bundled_sample
from tracekit.registry import COMMANDS, api_function
from tracekit.gpu_specs import resolve_profile, with_hbm
from tracekit.result import table_rows, to_json_obj

ROOT = Path(__file__).resolve().parents[2]
SYN = ROOT / "fixtures" / "synthetic"
sys.path.insert(0, str(ROOT))


def _cli_commands() -> list[str]:
    def walk(group, prefix=""):
        out = []
        for name, sub in group.commands.items():
            out += walk(sub, f"{prefix}{name} ") if hasattr(sub, "commands") else [f"{prefix}{name}"]
        return out

    return sorted(walk(typer.main.get_command(app)))


def test_the_registry_is_the_cli():
    assert sorted(COMMANDS) == _cli_commands()


def test_every_function_is_public():
    for cmd in COMMANDS:
        fn = api_function(cmd)
        assert getattr(tracekit, fn.__name__) is fn, cmd


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from fixtures.synth import build, write_trace

    d = tmp_path_factory.mktemp("parity")
    out = {
        "sample": bundled_sample(),
        "dp16": SYN / "dp16_bs4.trace.json.gz",
        "log": SYN / "dp16.launch.log",
        "log2": SYN / "dp2dcp8.launch.log",
    }
    for side, preset, bss in (("a", "dp16", (4, 8)), ("b", "dp2dcp8", (64,))):
        for bs in bss:
            tr, _ = build(preset, bs, steps=2)
            write_trace(d / side / f"d_bs{bs}_100k" / "1758612345.12-TP-0.trace.json.gz", tr)
    for rank in (0, 1):
        tr, _ = build("dsv3", 4, steps=2, seed=rank, step_marker="decode")
        tr["distributedInfo"] = {**tr.get("distributedInfo", {}), "rank": rank}  # each its own rank of the run
        write_trace(d / "ranks" / f"1758612345.12-TP-{rank}.trace.json.gz", tr)
    (d / "bench.csv").write_text("deployment,context,concurrency,generation_time_ms\ndp16,100000,64,83.5\n")
    sys.path.insert(0, str(ROOT / "tests" / "unit" / "hardware"))
    from test_replay_attribution import write_pair  # a replay trace with its capture_traces/ beside it

    out["replay"] = write_pair(d / "replay")
    out["dir"] = d
    return out


def _load(p):
    return tracekit.load(p, cache=False)


def _k3():
    return load_annotation("k3_dp16")


def _cases(d):
    """(command, CLI arguments, the same through the API)."""
    k3 = _k3()
    dp16, log = d["dp16"], d["log"]
    k3_steps = step_options(k3)
    return [
        ("info", [dp16], lambda: tracekit.trace_info(_load(dp16))),
        ("kernels", [dp16, "--top", "5"], lambda: tracekit.kernel_stats(_load(dp16), top=5)),
        (
            "steps",
            [dp16, "-a", "k3_dp16", "--phase", "all"],
            lambda: tracekit.step_windows(_load(dp16), steps=step_options(k3, phase="all")),
        ),
        ("wall", [dp16, "--ag", "ptop+local"], lambda: tracekit.decompose(_load(dp16), ag="ptop+local")),
        ("temporal", [dp16, "--per-stream"], lambda: tracekit.temporal(_load(dp16), per_stream=True)),
        (
            "overlap",
            [dp16, "--a", "copy:PtoP", "--b", "kind:kernel"],
            lambda: tracekit.overlap(_load(dp16), a="copy:PtoP", b="kind:kernel"),
        ),
        ("replay", [d["replay"]], lambda: tracekit.replay_summary(_load(d["replay"]))),
        ("allgather", [dp16, "-a", "k3_dp16"], lambda: tracekit.allgathers(_load(dp16), k3, steps=k3_steps)),
        (
            "exposure",
            [dp16, "-a", "k3_dp16", "--ag-size", "X=1"],
            lambda: tracekit.exposure(_load(dp16), k3, ag=AllGatherOptions(sizes=["X=1"]), steps=k3_steps),
        ),
        ("comm", [dp16, "-a", "k3_dp16"], lambda: tracekit.communication(_load(dp16), k3, steps=k3_steps)),
        ("blocks", [dp16, "-a", "k3_dp16"], lambda: tracekit.block_stats(_load(dp16), k3, steps=k3_steps)),
        (
            "stats",
            [dp16, "-a", "k3_dp16", "--by", "op_tag"],
            lambda: tracekit.kernel_selection_stats(
                _load(dp16), select="kind:kernel", by="op_tag", ann=k3, steps=k3_steps
            ),
        ),
        (
            "report",
            [dp16, "-a", "k3_dp16", "-g", "8", "--ag-size", "X=1"],
            lambda: tracekit.report(_load(dp16), k3, steps=k3_steps, ag=AllGatherOptions(group_size=8, sizes={"X": 1})),
        ),
        (
            "roofline",
            [dp16, "-a", "k3_dp16", "--hw", "b200", "--bs", "4"],
            lambda: tracekit.roofline(
                _load(dp16), k3, with_hbm(resolve_profile("b200", {}, what="roofline"), None), bs=4, steps=k3_steps
            ),
        ),
        (
            "hbm",
            [dp16, "-a", "k3_dp16", "--hw", "b200", "--hbm-gbps", "7000", "--bs", "4", "--var", "context=100000"],
            lambda: tracekit.hbm_bytes(
                _load(dp16),
                k3,
                with_hbm(resolve_profile("b200", {}, what="hbm"), "7000"),
                bs=4,
                variables={"context": 100000.0},
                steps=k3_steps,
            ),
        ),
        ("hw", ["b200"], lambda: tracekit.hw_profiles("b200")),
        ("waves trace", [dp16, "--top", "3"], lambda: tracekit.kernel_waves(_load(dp16), top=3)),
        (
            "waves calc",
            ["--sms", "148", "--grid", "2,64,4"],
            lambda: tracekit.waves_calc(
                sms=148,
                grid=(2, 64, 4),
                batch=None,
                q_len=None,
                split="mla-simplified",
                ctas_per_sm=1,
                time_ns=None,
                layers=None,
            ),
        ),
        ("log", [log], lambda: tracekit.log_records(tracekit.read_log(log))),
        ("ledger", [log, d["log2"]], lambda: tracekit.ledger(tracekit.read_log(log), tracekit.read_log(d["log2"]))),
        ("capacity", ["--log", log], lambda: tracekit.capacity(log=tracekit.read_log(log), dims=_dims(), context=None)),
        ("ranks", ["--tp", "16", "--dp", "16"], lambda: tracekit.rank_map(tp=16, dp=16, attn_cp=1, dp_attention=True)),
        ("imbalance", [d["dir"] / "ranks"], lambda: tracekit.imbalance(d["dir"] / "ranks")),
        (  # --world-size (issue 40), and a tracekit.load_run Run in place of the path
            "imbalance",
            [d["dir"] / "ranks", "--world-size", "3"],
            lambda: tracekit.imbalance(tracekit.load_run(d["dir"] / "ranks", world_size=3)),
        ),
        (
            "analyze",
            [d["dir"] / "a", "-a", "k3_dp16", "-j", "1"],
            lambda: tracekit.analyze(d["dir"] / "a", annotation="k3_dp16", jobs=1, steps=k3_steps),
        ),
        (
            "compare",
            [d["dir"] / "a", d["dir"] / "b", "--dp-a", "16", "--dp-b", "2", "-j", "1"],
            lambda: tracekit.compare_deployments(d["dir"] / "a", d["dir"] / "b", dp_a=16, dp_b=2, jobs=1),
        ),
        ("bench", [d["dir"] / "bench.csv"], lambda: tracekit.benchmark_table([d["dir"] / "bench.csv"])),
        ("layers", [dp16], lambda: tracekit.layers(_load(dp16))),
        ("cache info", [], lambda: tracekit.cache_info()),
        ("suggest", [dp16], lambda: tracekit.suggested_annotation(_load(dp16))),
        ("annotations", [dp16], lambda: tracekit.annotation_fit(_load(dp16))),
        (
            "whatif",
            [log, "--set", "disaggregation_decode_extra_slots=2", "--set", "mem_fraction_static=0.9"],
            lambda: tracekit.whatif(
                tracekit.read_log(log), settings=["disaggregation_decode_extra_slots=2", "mem_fraction_static=0.9"]
            ),
        ),
        (
            "findings",
            [dp16, "-a", "k3_dp16", "--log", log],
            lambda: tracekit.findings(_load(dp16), k3, log=tracekit.read_log(log), steps=k3_steps),
        ),
        (
            "findings",
            [
                "--compare",
                dp16,
                SYN / "dp2dcp8_bs64.trace.json.gz",
                "-a",
                "k3_dp16",
                "--annotation-b",
                "k3_dp2_dcp8",
                "--log",
                log,
                "--log-b",
                d["log2"],
            ],
            lambda: tracekit.findings(
                compare=(_load(dp16), _load(SYN / "dp2dcp8_bs64.trace.json.gz")),
                ann=k3,
                ann_b=load_annotation("k3_dp2_dcp8"),
                config=tracekit.launch_config(log),
                config_b=tracekit.launch_config(d["log2"]),
                steps=k3_steps,
            ),
        ),
    ]


def _dims():
    from tracekit.analyses.memory.capacity import ModelDims

    return ModelDims(layers=None, kv_lora_rank=None, rope_dim=None, kv_heads=None, head_dim=None)


def _same(doc: dict, res) -> None:
    _same_docs(doc, json.loads(json.dumps(to_json_obj(res))))


def _same_docs(doc: dict, api: dict) -> None:
    for x in (doc, api):
        for inp in x["inputs"]:
            inp.pop("from_cache", None)
    assert doc == api


@pytest.mark.slow
def test_cli_and_api_give_the_same_json(data, cli):
    cases = _cases(data)
    covered = {c for c, _, _ in cases} | {
        "export",
        "annotate",
        "plot decomposition",
        "plot blocks",
        "plot exposure",
        "plot timeline",
        "plot ledger",
        "cache clear",
    }
    assert covered == set(COMMANDS)  # the file-writing commands are checked below
    for command, args, api in cases:
        code, out, err = (
            cli(*command.split(), *args, "--no-cache", "--format", "json")
            if _takes_cache(command)
            else cli(*command.split(), *args, "--format", "json")
        )
        assert code == 0, (command, err)
        _same(json.loads(out), api())


def _takes_cache(command: str) -> bool:
    return command not in (
        "hw",
        "waves calc",
        "log",
        "ledger",
        "capacity",
        "ranks",
        "imbalance",
        "compare",
        "bench",
        "cache info",
        "whatif",
    )


@pytest.mark.slow
def test_file_writing_commands_match_their_functions(data, cli, tmp_path):
    dp16, k3 = data["dp16"], _k3()
    for command, fn, target in (
        ("export", tracekit.export_parquet, "x"),
        ("annotate", tracekit.annotate_trace, "x.json.gz"),
    ):
        code, out, err = cli(
            command, dp16, "-a", "k3_dp16", "-o", tmp_path / "cli" / target, "--no-cache", "--format", "json"
        )
        assert code == 0, err
        res = fn(_load(dp16), k3, tmp_path / "api" / target, allgather=AllGatherOptions(), steps=step_options(k3))
        text = json.dumps(to_json_obj(res)).replace(str(tmp_path / "api"), str(tmp_path / "cli"))
        _same_docs(json.loads(out), json.loads(text))


@pytest.mark.slow
def test_plot_points_match_their_functions(data, cli, tmp_path):
    from tracekit.analyses.fleet import plot_data as plots

    dp16, k3 = data["dp16"], _k3()
    inp = [plots.PlotInput(trace=_load(dp16), deployment="all", bs=4, annotation=k3)]
    for kind, fn, extra in (
        ("decomposition", lambda: plots.decomposition_points(inp, ag="ptop"), []),
        ("blocks", lambda: plots.blocks_points(inp), []),
        ("exposure", lambda: plots.exposure_points(inp, ag=AllGatherOptions()), []),
    ):
        code, out, err = cli(
            "plot",
            kind,
            dp16,
            "-a",
            "k3_dp16",
            "-o",
            tmp_path / f"{kind}.png",
            "--no-cache",
            "--format",
            "json",
            *extra,
        )
        assert code == 0, err
        assert json.loads(out)["tables"]["points"] == json.loads(json.dumps(table_rows(fn())))
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["table", "csv", "md", "html"])
def test_every_command_in_every_format(data, cli, fmt, tmp_path):
    for command, args, _ in _cases(data):
        extra = ["--no-cache"] if _takes_cache(command) else []
        code, out, err = cli(*command.split(), *args, *extra, "--format", fmt)
        assert code == 0 and out.strip(), (command, fmt, err)
        if fmt == "csv":
            assert "," in out.splitlines()[0], (command, out[:200])
        if fmt == "html":
            assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>"), (command, out[:200])
    for command, target in (("export", "x"), ("annotate", "x.json.gz")):
        code, out, err = cli(command, data["dp16"], "-o", tmp_path / fmt / target, "--no-cache", "--format", fmt)
        assert code == 0 and out.strip(), (command, fmt, err)
    code, out, err = cli("plot", "ledger", data["log"], "-o", tmp_path / f"l{fmt}.png", "--format", fmt)
    assert code == 0 and out.strip(), err


def test_cache_info_and_clear(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "c"))
    tracekit.load(SYN / "dp16_bs4.trace.json.gz")  # cached
    code, out, _ = cli("cache", "info", "--format", "json")
    doc = json.loads(out)
    assert (
        code == 0
        and doc["summary"]["entries"] == 1
        and doc["tables"]["entries"][0]["source"].endswith("dp16_bs4.trace.json.gz")
    )
    (tmp_path / "c" / "notes.txt").write_text("mine")
    code, out, _ = cli("cache", "clear", "--format", "json")
    assert code == 0 and json.loads(out)["summary"]["removed"] == 1 and (tmp_path / "c" / "notes.txt").exists()
    assert json.loads(cli("cache", "info", "--format", "json")[1])["summary"]["entries"] == 0
    assert tracekit.load(SYN / "dp16_bs4.trace.json.gz").report.from_cache is False
