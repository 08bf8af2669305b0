"""Architecture rules that keep the code honest: imports point one way, knowledge lives in data."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tracekit"
# layer rank: a module may import only from its own rank or lower ones
RANKS = {
    "errors": 0,
    "_version": 0,
    "events": 1,
    "names": 1,
    "regexes": 1,
    "schema": 1,
    "intervals": 1,
    "gpu_specs": 1,
    "result": 1,
    "trace": 1,
    "data": 1,
    "ingest": 2,
    # the cache (trace and result entries, their keys, `cache info|clear`, the temporary files every writer uses)
    # sits beside ingest, which loads through it: it imports the core alone (rank 0-1), never ingest (checked
    # below), so imports point one way. The CLI's reuse key needs no higher rank: it keys the option objects and
    # the annotation it is given (no import of annotation/), and the CLI passes --device in; what reads the CLI's
    # state (the trace as given, --verbose, the timing) stays in cli/reuse.py.
    "cache": 2,
    "annotation": 3,
    "analyses": 4,
    "render": 5,
    "exporters": 5,
    "fan_out": 5,
    "cli": 6,
    "__init__": 6,
    "__main__": 6,
    "registry": 6,
}
# the one upward import allowed, each with its reason: (importing file, imported module) -> why
UPWARD_ALLOWED = {
    ("result.py", "render.html.page"): "a Result's notebook display (_repr_html_) is drawn by the HTML page's"
    " notebook renderer, imported only when a notebook shows one",
    ("result.py", "render.formats"): "Result.save writes a file as the CLI's -o does, with the renderer of its"
    " format (which owns that format's file writing), imported only when a result is saved",
    ("render/html/command.py", "cli"): "the page's 'how these numbers were obtained' command is spelled with the"
    " CLI's own options (its click command), imported only when a page is drawn,"
    " so that the printed command is one the CLI accepts",
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


def _targets(path: Path, pkg: Path = PKG) -> set[tuple[str, ...]]:
    """The tracekit modules a file imports, as path parts under the package (``()`` is the package root): its
    import statements and its ``import_module`` calls with a constant name."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        target = _import_module_target(node, path, pkg)
        if target is not None:
            out.add(target)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            base = list(path.relative_to(pkg).parts[:-1])
            base = base[: len(base) - (node.level - 1)]
            mod = base + (node.module.split(".") if node.module else [])
            for a in node.names:  # `from .. import x`: x is a module or subpackage, or a name of the package
                sub = [*mod, a.name]
                is_mod = pkg.joinpath(*sub).with_suffix(".py").exists() or pkg.joinpath(*sub).is_dir()
                out.add(tuple(sub) if is_mod else tuple(mod))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tracekit":
            out.add(tuple(node.module.split(".")[1:]))
    return out


def _imports(path: Path, pkg: Path = PKG, allowed: dict = UPWARD_ALLOWED) -> set[str]:
    """The layers a file imports (less its allowed upward imports); the package root itself is layer ``__init__``."""
    rel = path.relative_to(pkg).as_posix()
    return {
        t[0].removesuffix(".py") if t else "__init__" for t in _targets(path, pkg) if (rel, ".".join(t)) not in allowed
    }


def _violations(pkg: Path, allowed: dict = UPWARD_ALLOWED) -> list[str]:
    bad = []
    for path in pkg.rglob("*.py"):
        me = path.relative_to(pkg).parts[0].removesuffix(".py")
        if me not in RANKS:
            continue
        for dep in _imports(path, pkg, allowed):
            if dep in RANKS and RANKS[dep] > RANKS[me]:
                bad.append(f"{path.relative_to(pkg)} imports {dep}")
    return bad


def test_imports_point_one_way():
    bad = _violations(PKG)
    assert not bad, bad


def test_the_cache_imports_the_core_alone():
    """cache/ and ingest/ share a rank; ingest loads through the cache, so the cache never imports ingest."""
    bad = [
        f"{p.relative_to(PKG)} imports {dep}"
        for p in (PKG / "cache").rglob("*.py")
        for dep in _imports(p)
        if dep in RANKS and dep != "cache" and RANKS[dep] >= RANKS["cache"]
    ]
    assert not bad, bad


def test_every_allowed_upward_import_is_still_made():
    """An allowance whose import is gone is removed, so that the list says only what is true."""
    made = {(f, m) for f, m in UPWARD_ALLOWED if tuple(m.split(".")) in _targets(PKG / f)}
    assert made == set(UPWARD_ALLOWED)
    unallowed = _violations(PKG, allowed={})
    assert all(f"{f} imports {m.split('.')[0]}" in unallowed for f, m in UPWARD_ALLOWED), unallowed


def test_the_layer_check_reads_import_module_strings(tmp_path):
    """A module name in an ``import_module`` string is an import like any other: planted upward ones are caught."""
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
    assert sorted(_violations(pkg, allowed={})) == [
        "analyses/__init__.py imports render",
        "analyses/absolute.py imports render",
    ]


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
    allowed = {(tuple(Path(f).with_suffix("").parts), tuple(m.split("."))) for f, m in UPWARD_ALLOWED}
    edges = {m: {t for t in _targets(p) if t in mods and t != m and (m, t) not in allowed} for m, p in mods.items()}
    pairs = sorted(
        {
            tuple(sorted((".".join(a), ".".join(b))))
            for a, deps in edges.items()
            for b in deps
            if a in edges.get(b, set())
        }
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


# Rooms of tracekit/analyses by theme (docs/architecture.md): a room imports the core modules (the files directly in
# analyses/), its own modules and rooms of a lower rank, never a room of its own rank or above. Rooms of one rank are
# siblings: they never import each other.
ROOM_RANKS = {
    "steps": 1,
    "time": 2,
    "comm": 2,
    "memory": 2,
    "structure": 3,
    "hardware": 3,
    "fleet": 4,
    "findings": 5,
    "report": 6,
}


def _room_violations(pkg: Path) -> list[str]:
    an = pkg / "analyses"
    rooms = {p.name for p in an.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    bad = [f"analyses/{r}/ is a room without a rank" for r in sorted(rooms - set(ROOM_RANKS))]
    for path in an.rglob("*.py"):
        rel = path.relative_to(an).parts
        if rel == ("__init__.py",):
            continue  # the analyses package's own exports
        mine = rel[0] if len(rel) > 1 else None  # None: a core module
        for t in _targets(path, pkg):
            if len(t) < 2 or t[0] != "analyses" or t[1].removesuffix(".py") not in rooms:
                continue
            other = t[1]
            if other == mine:
                continue
            if mine is None:
                bad.append(f"core module analyses/{rel[0]} imports the room {other}")
            elif ROOM_RANKS.get(other, 99) >= ROOM_RANKS.get(mine, 0):
                bad.append(f"analyses/{'/'.join(rel)} ({mine}) imports the room {other}")
    return sorted(set(bad))


def test_rooms_import_only_lower_rooms_and_the_core():
    assert _room_violations(PKG) == []


def test_the_room_check_catches_siblings_upward_rooms_and_core_imports(tmp_path):
    pkg = tmp_path / "tracekit"
    for room in ("time", "comm", "findings"):
        (pkg / "analyses" / room).mkdir(parents=True)
        (pkg / "analyses" / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "analyses" / "__init__.py").write_text("from .time import a\n")
    (pkg / "analyses" / "core.py").write_text("from .comm import b\n")
    (pkg / "analyses" / "time" / "a.py").write_text("from ..comm import b\nfrom .. import core\n")
    (pkg / "analyses" / "comm" / "b.py").write_text(
        "from importlib import import_module\nimport_module('tracekit.analyses.findings.c')\n"
    )
    (pkg / "analyses" / "findings" / "c.py").write_text("from ..time.a import x\nfrom ..comm import b\n")
    assert _room_violations(pkg) == [
        "analyses/comm/b.py (comm) imports the room findings",
        "analyses/time/a.py (time) imports the room comm",
        "core module analyses/core.py imports the room comm",
    ]


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
