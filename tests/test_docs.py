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
