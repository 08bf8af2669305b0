"""The public names are generated from the one list of commands (tracekit/registry.py), each is the function its
command calls whatever has been imported before, and start-up (``--version``, ``--help``, a usage error, ``import
tracekit``) loads neither pandas, pyarrow, numpy nor matplotlib."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "pyarrow", "numpy", "matplotlib")


def _python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (nothing imported before it) and return its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_all_is_the_registry_and_the_one_api_list_and_dir_shows_only_it():
    import tracekit
    from tracekit.registry import COMMANDS, public_name

    commands = {public_name(c) for c in COMMANDS} | {t.partition(":")[2] for t in COMMANDS.values()}
    assert set(tracekit.__all__) == commands | set(tracekit._API) | {
        "__version__",
        "TracekitError",
        "InputError",
        "MissingDataError",
    }
    assert {"info", "wall", "waves_trace", "plot_ledger", "cache_clear", "decompose", "load"} <= set(tracekit.__all__)
    assert [n for n in dir(tracekit) if not (n.startswith("__") and n.endswith("__"))] == sorted(
        n for n in tracekit.__all__ if n != "__version__"
    )
    assert "Any" not in dir(tracekit) and "import_module" not in dir(tracekit)


def test_no_module_of_the_package_shares_a_public_name():
    """A submodule, once imported, is set on its package under its name and would replace the function."""
    import pkgutil

    import tracekit

    modules = {m.name for m in pkgutil.iter_modules(tracekit.__path__)}
    assert not modules & set(tracekit.__all__), modules & set(tracekit.__all__)


def test_every_public_name_is_its_commands_function_after_everything_is_imported():
    """In a fresh interpreter: an analysis runs (which imports the block engine, the exporters, …), every module of
    the package is imported, and still each public name is the registry's function for its command."""
    code = """
import importlib, json, pkgutil, sys
import tracekit
from tracekit.registry import COMMANDS, api_function, public_name
before = {n: id(getattr(tracekit, n)) for n in tracekit.__all__}
from tracekit.cli.common import bundled_sample
tracekit.info(tracekit.load(bundled_sample(), cache=False))
for m in pkgutil.walk_packages(tracekit.__path__, "tracekit."):
    importlib.import_module(m.name)
out = {"bad": [], "same": before == {n: id(getattr(tracekit, n)) for n in tracekit.__all__}}
for cmd in COMMANDS:
    fn = api_function(cmd)
    for name in (public_name(cmd), fn.__name__):
        if getattr(tracekit, name) is not fn or not callable(getattr(tracekit, name)):
            out["bad"].append([cmd, name, repr(getattr(tracekit, name))])
out["modules"] = [m for m in sys.modules if m.startswith("tracekit.") and m.split(".")[1] in tracekit.__all__]
out["annotate"] = tracekit.annotate.__module__ + "." + tracekit.annotate.__name__
out["export"] = tracekit.export.__module__ + "." + tracekit.export.__name__
print(json.dumps(out))
"""
    out = json.loads(_python(code))
    assert out["bad"] == []
    assert out["modules"] == []  # e.g. the shipped annotations' folder is read as a folder, not imported
    assert out["same"]
    assert out["annotate"] == "tracekit.exporters.perfetto.annotate_trace"  # the `annotate` command's function
    assert out["export"] == "tracekit.exporters.parquet.export_parquet"


@pytest.fixture(scope="module")
def sample():
    import tracekit
    from tracekit.cli.common import bundled_sample

    return tracekit.load(bundled_sample(), cache=False)


def test_a_handful_of_public_functions_run_by_their_public_names(sample, tmp_path):
    import tracekit

    for name, args, kwargs in [
        ("info", (sample,), {}),
        ("kernels", (sample,), {"top": 3}),
        ("wall", (sample,), {}),
        ("steps", (sample, tracekit.load_annotation("decode_sample")), {}),
        ("blocks", (sample, tracekit.load_annotation("decode_sample")), {}),
        ("annotate", (sample, tracekit.load_annotation("decode_sample"), tmp_path / "annotated.json"), {}),
        ("waves_calc", (), {"sms": 132, "grid": (264, 1, 1)}),
    ]:
        res = getattr(tracekit, name)(*args, **kwargs)
        assert res.command in (name, name.replace("_", " "), name.split("_")[-1]), (name, res.command)
        assert res.summary, name
    assert (tmp_path / "annotated.json").stat().st_size > 0
    assert tracekit.wall is tracekit.decompose and tracekit.info is tracekit.trace_info


START_UP = """
import contextlib, io, json, sys
from tracekit.cli import command, run
from tracekit.registry import COMMANDS
codes = {}
for argv in [["--version"], ["--help"], ["wall", "--nope"], ["ranks", "--tp", "x"], ["waves", "calc", "--sms", "-3"]]:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        codes[" ".join(argv)] = [run(argv), len(out.getvalue())]
root = command()  # every command's --help on one command tree (run() builds it anew each time)
for c in COMMANDS:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            root.main([*c.split(), "--help"], prog_name="tracekit")
        except SystemExit as exc:
            codes[c + " --help"] = [exc.code, len(out.getvalue())]
print(json.dumps({"codes": codes, "heavy": [m for m in %r if m in sys.modules]}))
"""


def test_start_up_help_and_usage_errors_load_no_pandas_numpy_pyarrow_or_matplotlib():
    """``--version``, ``--help``, every command's ``--help`` and argument errors, through the CLI's entry point in a
    fresh interpreter: the right exit codes, and none of the heavy libraries imported (commands import what they
    run inside the command)."""
    out = json.loads(_python(START_UP % (HEAVY,)))
    codes = out["codes"]
    assert out["heavy"] == []
    assert codes["--version"][0] == 0 and codes["--help"][0] == 0 and codes["--help"][1] > 0
    assert codes["wall --nope"][0] == 2 and codes["ranks --tp x"][0] == 2 and codes["waves calc --sms -3"][0] == 2
    helps = {k: v for k, v in codes.items() if k.endswith(" --help") and k != "--help"}
    assert len(helps) >= 30 and all(rc == 0 and n > 0 for rc, n in helps.values()), helps


def test_import_tracekit_loads_no_pandas_until_a_function_is_used():
    out = _python(f"""
import sys, tracekit
light = [m for m in {HEAVY!r} if m in sys.modules]
tracekit.load
print(light, 'pandas' in sys.modules or 'numpy' in sys.modules)
""")
    assert out.split() == ["[]", "True"]


def test_the_version_entry_point_prints_the_version():
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from tracekit.cli import main; main()", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    import tracekit

    assert done.returncode == 0 and done.stdout == f"tracekit {tracekit.__version__}\n"
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert imported and not {m for m in imported if m.split(".")[0] in HEAVY}


def test_version_is_answered_before_the_command_tree_is_built():
    """``--version`` (also after other global options) prints the version without importing typer or a command."""
    out = _python("""
import contextlib, io, json, sys
from tracekit.cli import run
with contextlib.redirect_stdout(io.StringIO()) as o:
    codes = [run(["--version"]), run(["-q", "--device", "1", "--version"]), run(["--device=0", "--version"])]
print(json.dumps({"codes": codes, "out": o.getvalue(), "typer": "typer" in sys.modules,
                  "commands": sorted(m for m in sys.modules if m.startswith("tracekit.cli."))}))
""")
    import tracekit

    got = json.loads(out)
    assert got["codes"] == [0, 0, 0] and got["out"] == f"tracekit {tracekit.__version__}\n" * 3
    assert not got["typer"] and got["commands"] == []
