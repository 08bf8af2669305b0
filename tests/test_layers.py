"""Architecture rules that keep the code honest: imports point one way, knowledge lives in data."""
from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "tracekit"
# layer rank: a module may import only from its own rank or lower ones
RANKS = {"errors": 0, "schema": 1, "intervals": 1, "result": 1, "trace": 1, "data": 1, "ingest": 2,
         "annotate": 3, "analyses": 4, "render": 5, "export": 5, "cli": 6, "__init__": 6, "__main__": 6}
MODEL_STRINGS = ["memcpy128", "kda_", "ncclDevKernel", "deep_ep", "scheduler.run_batch"]


def _layer(path: Path) -> str:
    rel = path.relative_to(PKG).parts
    return rel[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = list(path.relative_to(PKG).parts[:-1])
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            mod = (base + (node.module.split(".") if node.module else []))
            if mod:
                out.add(mod[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tracekit."):
            out.add(node.module.split(".")[1])
    return out


def test_imports_point_one_way():
    bad = []
    for path in PKG.rglob("*.py"):
        me = _layer(path)
        if me not in RANKS:
            continue
        for dep in _imports(path):
            if dep in RANKS and RANKS[dep] > RANKS[me]:
                bad.append(f"{path.relative_to(PKG)} imports {dep}")
    assert not bad, bad


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
    declared = {"numpy", "pandas", "pyarrow", "msgspec", "typer", "rich", "zstandard", "matplotlib"}
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
