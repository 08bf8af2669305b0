"""Architecture rules that keep the code honest: imports point one way, knowledge lives in data."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tracekit"
# layer rank: a module may import only from its own rank or lower ones
RANKS = {"errors": 0, "_version": 0, "events": 1, "regexes": 1, "schema": 1, "intervals": 1, "result": 1, "trace": 1, "data": 1, "ingest": 2,
         "annotation": 3, "analyses": 4, "render": 5, "exporters": 5, "sweeps": 5, "cli": 6, "__init__": 6, "__main__": 6}
MODEL_STRINGS = ["memcpy128", "kda_", "ncclDevKernel", "deep_ep", "scheduler.run_batch", "Cijk_", "nvjet",
                 "flash_fwd", "act_and_mul", "FusedAddRMSNorm", "deep_gemm", "flashinfer", "GemmType",
                 "paged_attention", "fmha"]


def _layer(path: Path) -> str:
    rel = path.relative_to(PKG).parts
    return rel[0].removesuffix(".py")


def _targets(path: Path, pkg: Path = PKG) -> set[tuple[str, ...]]:
    """The tracekit modules a file imports, as path parts under the package (``()`` is the package root)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = list(path.relative_to(pkg).parts[:-1])
            base = base[: len(base) - (node.level - 1)]
            mod = base + (node.module.split(".") if node.module else [])
            for a in node.names:  # `from .. import x`: x is a module or subpackage, or a name of the package
                sub = [*mod, a.name]
                is_mod = (pkg.joinpath(*sub).with_suffix(".py").exists() or pkg.joinpath(*sub).is_dir())
                out.add(tuple(sub) if is_mod else tuple(mod))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tracekit":
            out.add(tuple(node.module.split(".")[1:]))
    return out


def _imports(path: Path, pkg: Path = PKG) -> set[str]:
    """The layers a file imports; the package root itself is layer ``__init__``."""
    return {t[0].removesuffix(".py") if t else "__init__" for t in _targets(path, pkg)}


def _violations(pkg: Path) -> list[str]:
    bad = []
    for path in pkg.rglob("*.py"):
        me = path.relative_to(pkg).parts[0].removesuffix(".py")
        if me not in RANKS:
            continue
        for dep in _imports(path, pkg):
            if dep in RANKS and RANKS[dep] > RANKS[me]:
                bad.append(f"{path.relative_to(pkg)} imports {dep}")
    return bad


def test_imports_point_one_way():
    bad = _violations(PKG)
    assert not bad, bad


def test_the_layer_check_sees_relative_imports_of_the_package_root(tmp_path):
    """`from .. import __version__` in an analysis reaches up to the package root (the top layer)."""
    pkg = tmp_path / "tracekit"
    (pkg / "analyses").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0'\n")
    (pkg / "schema.py").write_text("")
    (pkg / "analyses" / "__init__.py").write_text("")
    (pkg / "analyses" / "fine.py").write_text("from .. import schema\nfrom ..schema import x\n")
    (pkg / "analyses" / "planted.py").write_text("from .. import __version__\n")
    assert _violations(pkg) == ["analyses/planted.py imports __init__"]


def test_no_two_modules_import_each_other():
    mods = {p.relative_to(PKG).with_suffix("").parts: p for p in PKG.rglob("*.py")}
    edges = {m: {t for t in _targets(p) if t in mods and t != m} for m, p in mods.items()}
    pairs = sorted({tuple(sorted((".".join(a), ".".join(b)))) for a, deps in edges.items() for b in deps
                    if a in edges.get(b, set())})
    assert not pairs, pairs


def test_no_print_outside_render_and_cli():
    offenders = [str(p) for p in PKG.rglob("*.py") if _layer(p) not in ("render", "cli")
                 and re.search(r"^\s*print\(", p.read_text(), re.M)]
    assert not offenders


def test_model_knowledge_lives_in_data_files():
    hits = [f"{p.relative_to(PKG)}: {s}" for p in PKG.rglob("*.py") for s in MODEL_STRINGS if s in p.read_text()]
    assert not hits, hits


def test_every_event_column_is_documented():
    from tracekit.schema import EVENT_COLUMNS

    doc = (PKG.parent / "docs" / "events-schema.md").read_text()
    assert [c for c in EVENT_COLUMNS if f"`{c}`" not in doc] == []


def test_public_api_names_resolve():
    import tracekit

    for name in tracekit.__all__:
        assert getattr(tracekit, name) is not None, name


def test_no_import_of_packages_we_do_not_depend_on():
    """click came in through dask in the dev venv once; a fresh `pip install .` has only the declared deps."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((PKG.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].strip().replace("-", "_") for d in project["dependencies"]}
    assert {"numpy", "pandas", "msgspec", "orjson", "isal"} <= declared, declared
    stdlib = set(__import__("sys").stdlib_module_names)
    optional = {"dask", "duckdb"}  # imported inside functions, behind a clear error
    bad = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            for m in mods:
                top = m.split(".")[0]
                if top not in stdlib and top not in declared and top not in optional and top != "tracekit":
                    bad.append(f"{path.relative_to(PKG)}: {m}")
    assert not bad, bad
