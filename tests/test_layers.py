"""Architecture rules that keep the code honest: imports point one way, knowledge lives in data."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tracekit"
PYPROJECT = PKG.parent / "pyproject.toml"
# upward imports by module name given to import_module as a string (lint-imports cannot see them), each with its
# reason: (importing file, imported module) -> why. Upward import statements are ignore_imports of the contracts.
UPWARD_ALLOWED = {
    ("result.py", "render.html.page"): "a Result's notebook display (_repr_html_) is drawn by the HTML page's"
    " notebook renderer, imported only when a notebook shows one",
}
MODEL_STRINGS = [
    "memcpy128",
    "kda_",
    "ncclDevKernel",
    "deep_ep",
    "scheduler.run_batch",
    "Cijk_",
    "nvjet",
    "flash_fwd",
    "act_and_mul",
    "FusedAddRMSNorm",
    "deep_gemm",
    "flashinfer",
    "GemmType",
    "paged_attention",
    "fmha",
]


def _layer(path: Path) -> str:
    rel = path.relative_to(PKG).parts
    return rel[0].removesuffix(".py")


def _contracts() -> list[dict]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_hold():
    """The layers and the rooms of analyses/ (pyproject.toml's [tool.importlinter] contracts): lint-imports, the
    tool, checks every import statement, function-level ones included."""
    import subprocess
    import sys
    from pathlib import Path as P

    exe = P(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(exe)], cwd=PKG.parent, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def _ranks() -> dict[str, int]:
    """Each top-level module or package of tracekit -> its layer (0 the lowest), from the layers contract."""
    layers = next(c for c in _contracts() if c.get("containers") == ["tracekit"])["layers"]
    return {m.strip(): len(layers) - i for i, layer in enumerate(layers) for m in re.split(r"[:|]", layer)}


def _import_module_target(node: ast.AST, path: Path, pkg: Path) -> tuple[str, ...] | None:
    """``import_module("tracekit.x.y")`` or ``import_module(".x", __name__)``/``(".x", __package__)`` with a
    constant string: the module it imports, as path parts under the package (else None)."""
    if not (
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return None
    func = node.func
    if not (
        (isinstance(func, ast.Name) and func.id == "import_module")
        or (isinstance(func, ast.Attribute) and func.attr == "import_module")
    ):
        return None
    name = node.args[0].value
    if name.split(".")[0] == "tracekit":
        return tuple(name.split(".")[1:])
    level = len(name) - len(name.lstrip("."))
    if level == 0 or len(node.args) < 2 and not node.keywords:
        return None
    base = list(path.relative_to(pkg).parts[:-1])  # __name__ of a package's __init__ or __package__: its folder
    if path.name != "__init__.py" and isinstance(node.args[-1], ast.Name) and node.args[-1].id == "__name__":
        return None  # relative to a plain module's own name: not a package, import_module refuses it
    base = base[: len(base) - (level - 1)]
    return tuple(base + [p for p in name[level:].split(".") if p])


def _import_module_strings(pkg: Path = PKG) -> list[tuple[Path, tuple[str, ...]]]:
    return [
        (path, target)
        for path in pkg.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (target := _import_module_target(node, path, pkg)) is not None
    ]


def _string_violations(pkg: Path, ranks: dict[str, int], allowed: dict) -> list[str]:
    bad = []
    for path, target in _import_module_strings(pkg):
        me, dep = path.relative_to(pkg).parts[0].removesuffix(".py"), target[0].removesuffix(".py") if target else ""
        rel = path.relative_to(pkg).as_posix()
        if me in ranks and ranks.get(dep, 0) > ranks[me] and (rel, ".".join(target)) not in allowed:
            bad.append(f"{rel} imports {dep}")
    return sorted(bad)


def test_import_module_strings_point_one_way_too():
    """A module name in an ``import_module`` string is an import like any other (lint-imports does not read them)."""
    assert _string_violations(PKG, _ranks(), UPWARD_ALLOWED) == []
    made = {(p.relative_to(PKG).as_posix(), ".".join(t)) for p, t in _import_module_strings()}
    assert set(UPWARD_ALLOWED) <= made  # an allowance whose import is gone is removed


def test_the_string_check_catches_planted_upward_imports(tmp_path):
    pkg = tmp_path / "tracekit"
    (pkg / "analyses").mkdir(parents=True)
    (pkg / "render").mkdir()
    for f in ("__init__.py", "schema.py", "analyses/__init__.py", "render/__init__.py", "render/notebook.py"):
        (pkg / f).write_text("")
    (pkg / "analyses" / "fine.py").write_text("from importlib import import_module\nimport_module('tracekit.schema')\n")
    (pkg / "analyses" / "absolute.py").write_text(
        "import importlib\nimportlib.import_module('tracekit.render.notebook')\n"
    )
    (pkg / "analyses" / "__init__.py").write_text(
        "from importlib import import_module\nimport_module('..render', __name__)\n"
    )
    ranks = {"schema": 1, "analyses": 4, "render": 5}
    assert _string_violations(pkg, ranks, {}) == [
        "analyses/__init__.py imports render",
        "analyses/absolute.py imports render",
    ]


def test_no_two_modules_import_each_other():
    import grimp

    graph = grimp.build_graph("tracekit")
    contract = next(c for c in _contracts() if c.get("containers") == ["tracekit"])
    allowed = {tuple(sorted(i.split("#")[0].replace(" ", "").split("->"))) for i in contract["ignore_imports"]}
    pairs = sorted(
        {
            tuple(sorted((m, d)))
            for m in graph.modules
            for d in graph.find_modules_directly_imported_by(m)
            if m in graph.find_modules_directly_imported_by(d)
        }
        - allowed
    )
    assert not pairs, pairs


def test_no_print_outside_render_and_cli():
    offenders = [
        str(p)
        for p in PKG.rglob("*.py")
        if _layer(p) not in ("render", "cli") and re.search(r"^\s*print\(", p.read_text(), re.M)
    ]
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

    for name in tracekit.__all__:  # every public name but the version is a function or a class
        assert callable(getattr(tracekit, name)) or name == "__version__", name
    assert isinstance(tracekit.__version__, str)


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


def test_no_room_attribute_hides_one_of_its_modules():
    """A room's ``__init__`` that imported ``layers`` (the function) from ``layers.py`` would make
    ``tracekit.analyses.structure.layers`` the function once imported, not the module: rooms export no names. The
    same for a package inside a room (``structure/layers/``, whose ``__init__`` is its public entry): no name it
    exports hides one of its modules or subpackages."""
    import importlib

    for init in sorted((PKG / "analyses").glob("*/**/__init__.py")):
        name = ".".join(init.parent.relative_to(PKG.parent).parts)
        package = importlib.import_module(name)
        subs = [p.stem for p in init.parent.glob("*.py") if p.stem != "__init__"]
        subs += [p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()]
        for stem in subs:
            sub = importlib.import_module(f"{name}.{stem}")
            assert getattr(package, stem) is sub, (name, stem)


def test_every_package_is_installed():
    """Every folder of the package with an __init__.py is installed: setup.py finds them (no hand-kept list: the
    rooms of analyses/ were once moved without being added to one, and `pip install .` failed on a fresh machine)."""
    import setuptools

    found = {".".join(p.parent.relative_to(PKG.parent).parts) for p in PKG.rglob("__init__.py")}
    assert found == set(setuptools.find_packages(str(PKG.parent), include=["tracekit", "tracekit.*"]))
    assert "tracekit.annotations" in (PKG.parent / "setup.py").read_text(encoding="utf-8")


def _module_of(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _package_of(path: Path) -> str:
    return ".".join(path.parent.relative_to(PKG.parent).parts)


def _resolve(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative levels resolved against ``path``'s package)."""
    if not node.level:
        return node.module or ""
    base = _package_of(path).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_imports_across_packages() -> list[str]:
    """Every ``from M import _name`` of tracekit where ``M`` lies outside the importing module's package."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _resolve(path, node)
            if not target.startswith("tracekit"):
                continue
            target_pkg = target if (PKG.parent / target.replace(".", "/")).is_dir() else target.rpartition(".")[0]
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and target_pkg != _package_of(path):
                    bad.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {target}.{alias.name}")
    return bad


def test_no_module_imports_a_private_name_of_another_package():
    """A module is one job that its name says; what another package needs of it is public (no leading ``_``)."""
    assert private_imports_across_packages() == []


def test_no_fragments():
    """No module of tracekit under 40 lines but ``__init__`` files and ``_version``: a fragment belongs in its
    caller (this replaced the 500-line cap of issue 27: modules are cut by job, not by length)."""
    small = [
        f"{p.relative_to(PKG.parent)} ({n} lines)"
        for p in sorted(PKG.rglob("*.py"))
        if p.name not in ("__init__.py", "_version.py") and (n := len(p.read_text(encoding="utf-8").splitlines())) < 40
    ]
    assert small == []
