"""The CLI reference is generated from --help and must be current; every command has help and every format."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", DOCS / "gen_cli_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cli_reference_is_current():
    gen = _gen()
    assert (DOCS / "cli.md").read_text() == gen.render(), "run: python docs/gen_cli_reference.py > docs/cli.md"


def test_every_command_has_help_and_every_format():
    gen = _gen()
    names = gen.command_names()
    assert len(names) >= 10
    for name in names:
        text = gen.help_text([name])
        assert "Usage:" in text, name
        lines = [ln for ln in text.splitlines() if ln.strip()]
        assert len(lines) > 3, name
        if name not in ("plot", "cache"):  # groups: their sub-commands render a Result in every format
            assert "--format" in text, f"{name} lacks --format"


def test_the_step_dialect_example_in_docs_steps_md_works(tmp_path):
    """The user dialect of docs/steps.md, as written there, finds the steps it describes."""
    import json
    import re

    import tracekit
    from tests.conftest import kernel, write_trace
    from tracekit.analyses.steps.resolve import find_steps, step_options

    block = re.search(r"```json\n(\{\"dialects\".*?)\n```", (DOCS / "steps.md").read_text(), re.S).group(1)
    f = tmp_path / "mine.json"
    f.write_text(block)
    assert json.loads(block)["dialects"][0]["name"] == "my_engine"
    evs = [
        {"ph": "X", "cat": "user_annotation", "name": "iter 7 bs=12", "pid": 1, "tid": 1, "ts": 0.0, "dur": 50.0},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10.0,
            "dur": 1.0,
            "args": {"correlation": 1},
        },
        kernel("k", 100.0, 100.0, corr=1),
    ]
    st = find_steps(tracekit.load(write_trace(tmp_path / "t.json", evs), cache=False), step_options(steps_file=f))
    assert st.match == "my_engine" and st.table[["phase", "bs"]].values.tolist() == [["decode", 12]]


def test_architecture_md_names_only_what_exists():
    """Every `tracekit/...` path and `tracekit.x.y` name that docs/architecture.md mentions exists."""
    import importlib
    import re

    text = (DOCS / "architecture.md").read_text()
    root = DOCS.parent
    paths = set(re.findall(r"`(tracekit/[\w/.]+)`", text)) | set(re.findall(r"`(tests/[\w/.]+)`", text))
    assert paths and [p for p in paths if not (root / p).exists()] == []
    for dotted in set(re.findall(r"`(tracekit(?:\.\w+)+)`", text)):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr)
            break
        else:
            raise AssertionError(dotted)


def test_the_pattern_file_example_in_docs_ledger_md_works(tmp_path):
    """The pattern set of docs/ledger.md, as written there, reads its own example line as an allocation."""
    import json
    import re

    from tracekit.ingest.sglang_log import read_log

    block = re.search(r"## Pattern files.*?```json\n(.*?)\n```", (DOCS / "ledger.md").read_text(), re.S).group(1)
    (tmp_path / "mine.json").write_text(block)
    example = json.loads(block)["patterns"][0]["example"]
    (tmp_path / "x.log").write_text(f"[2026-05-01 10:00:00 TP0] {example}\n")
    log = read_log(tmp_path / "x.log", patterns=[tmp_path / "mine.json"])
    rec = [r for r in log.records if r.kind == "my_pool"]
    assert len(rec) == 1 and rec[0].fields["slots"] == 33 and rec[0].fields["size_gib"] == 4.96


def test_annotations_md_documents_every_field():
    """docs/annotations.md calls itself the format: every field of the annotation spec is in its table."""
    import msgspec

    from tracekit.annotation import spec

    text = (DOCS / "annotations.md").read_text()

    def fields(struct, prefix=""):
        for f in msgspec.structs.fields(struct):
            name = f.encode_name
            if name == "source":
                continue
            yield prefix + name

    top = list(fields(spec.Annotation))
    missing = [f for f in top if f"`{f}" not in text]
    missing += [f"step.{f}" for f in fields(spec.StepSpec) if f"`step.{f}`" not in text]
    missing += [f for f in fields(spec.OpShape) if f not in text]
    assert missing == []
