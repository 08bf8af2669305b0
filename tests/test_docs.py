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
        if name != "plot":  # plot writes pictures; every other command renders a Result in every format
            assert "--format" in text, f"{name} lacks --format"


def test_the_step_dialect_example_in_docs_steps_md_works(tmp_path):
    """The user dialect of docs/steps.md, as written there, finds the steps it describes."""
    import json
    import re

    import tracekit
    from tests.conftest import kernel, write_trace
    from tracekit.analyses.steps import find_steps, step_options

    block = re.search(r"```json\n(\{\"dialects\".*?)\n```", (DOCS / "steps.md").read_text(), re.S).group(1)
    f = tmp_path / "mine.json"
    f.write_text(block)
    assert json.loads(block)["dialects"][0]["name"] == "my_engine"
    evs = [{"ph": "X", "cat": "user_annotation", "name": "iter 7 bs=12", "pid": 1, "tid": 1, "ts": 0.0, "dur": 50.0},
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10.0, "dur": 1.0,
            "args": {"correlation": 1}}, kernel("k", 100.0, 100.0, corr=1)]
    st = find_steps(tracekit.load(write_trace(tmp_path / "t.json", evs), cache=False), step_options(steps_file=f))
    assert st.match == "my_engine" and st.table[["phase", "bs"]].values.tolist() == [["decode", 12]]
