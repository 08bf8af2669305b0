"""Regenerate the trace-derived rows of tests/data/kernel_names.tsv (the names corpus of the category rules).

Run from the repository root: ``python tests/data/collect_kernel_names.py [CORPUS_DIR]`` (default ../shared/corpus,
else /work/shared/corpus). It reads every trace in the corpus on its own (not through tracekit's ingest, so a bug
there cannot hide a name): the ``kernel`` events of Kineto JSON(.gz), the dispatched kernels of rocprofv3 JSON
(``kernel_dispatch`` → ``kernel_symbols``, the formatted name tracekit shows), the kernels of nsys SQLite exports
(``CUPTI_ACTIVITY_KIND_KERNEL.demangledName`` → ``StringIds``); and the kernel names of the generator's tables
(fixtures/synthlib).

The file's rows are ``name<TAB>category<TAB>source``. A row already in the file keeps its category (it was
reviewed by hand) and its source; a new name is appended with the category the shipped rules give it today and is
printed, so that a person checks it before committing. Rows of other sources (the public kernel families, with
their repository and path) are never touched.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TSV = Path(__file__).with_name("kernel_names.tsv")
HEADER = "name\tcategory\tsource"
GENERATOR_TABLES = {
    "fixtures.synthlib.kernels": ("COMMON", "K3", "DSV3", "GQA"),
    "fixtures.synthlib.multirank": ("DP_NAMES", "DENSE_NAMES", "TRAIN_NAMES"),
    "fixtures.synthlib.eager": ("HF_ROCM", "CNN"),
}
NOT_KERNELS = ("Memcpy", "Memset", "cuda", "hip")  # copies, memsets and API names in the generator's tables


def _open_json(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def kineto_names(doc: dict) -> set[str]:
    return {
        e["name"]
        for e in doc.get("traceEvents", [])
        if isinstance(e, dict) and str(e.get("cat", "")).lower() == "kernel" and e.get("name")
    }


def rocprof_names(doc: dict) -> set[str]:
    out = set()
    for tool in doc.get("rocprofiler-sdk-tool", []):
        symbols = {s["kernel_id"]: s for s in tool.get("kernel_symbols", [])}
        for rec in tool.get("buffer_records", {}).get("kernel_dispatch", []):
            s = symbols.get(rec.get("dispatch_info", {}).get("kernel_id"))
            if s is not None:
                out.add(s.get("formatted_kernel_name") or s.get("kernel_name"))
    return {n for n in out if n}


def nsys_names(path: Path) -> set[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        col = "demangledName" if "demangledName" in cols else "shortName"
        q = f"SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.{col}"
        return {r[0] for r in con.execute(q)}
    finally:
        con.close()


def corpus_names(corpus: Path) -> dict[str, str]:
    """name → the first corpus file (relative path, sorted order) where it runs."""
    out: dict[str, str] = {}
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
        rel = f"corpus:{path.relative_to(corpus)}"
        if path.suffix == ".sqlite":
            names = nsys_names(path)
        elif path.name.endswith((".json", ".json.gz")):
            doc = _open_json(path)
            if not isinstance(doc, dict):
                continue
            names = rocprof_names(doc) if "rocprofiler-sdk-tool" in doc else kineto_names(doc)
        else:
            continue
        for n in sorted(names):
            out.setdefault(n, rel)
    return out


def generator_names() -> dict[str, str]:
    import importlib

    sys.path.insert(0, str(ROOT))
    out: dict[str, str] = {}
    for module, tables in GENERATOR_TABLES.items():
        mod = importlib.import_module(module)
        for t in tables:
            for n in getattr(mod, t).values():
                if not n.startswith(NOT_KERNELS):
                    out.setdefault(n, f"generator:{module.replace('.', '/')}.py {t}")
    return out


def read_tsv(path: Path = TSV) -> list[tuple[str, str, str]]:
    """The corpus rows (name, category, source); comment lines (#) and the header are skipped."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#") or line == HEADER:
            continue
        name, cat, source = line.split("\t")
        rows.append((name, cat, source))
    return rows


def main(argv: list[str]) -> int:
    corpus = (
        Path(argv[0])
        if argv
        else next((p for p in (ROOT.parent / "shared" / "corpus", Path("/work/shared/corpus")) if p.is_dir()), None)
    )
    if corpus is None or not corpus.is_dir():
        print("collect_kernel_names.py: no corpus directory; give its path as the first argument", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    import pandas as pd

    from tracekit.analyses.categories import categorize

    text = TSV.read_text(encoding="utf-8") if TSV.exists() else HEADER + "\n"
    known = {name for name, _, _ in read_tsv(TSV)} if TSV.exists() else set()
    found = {**generator_names(), **corpus_names(corpus)}
    new = [n for n in found if n not in known]
    if new:
        ev = pd.DataFrame({"name": new, "kind": "kernel"})
        cats = categorize(ev.astype({"name": "category", "kind": "category"}))
        lines = [f"{n}\t{c}\t{found[n]}" for n, c in zip(new, cats)]
        if not text.endswith("\n"):
            text += "\n"
        TSV.write_text(text + "\n".join(lines) + "\n", encoding="utf-8")
        for line in lines:
            print("new (check its category):", line[:160])
    print(f"{len(found)} names in the traces and the generator, {len(new)} new; {TSV.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
