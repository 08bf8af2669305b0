"""The two test tiers (issue 27): `pytest -m "not slow"` is the quick loop, `pytest -m slow` the rest. `.ci/run` runs
the quick tier first and prints its wall time, then the slow tier; README's test command says the same two tiers
with the same install; pyproject registers the marker (an unregistered mark would only warn)."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO

QUICK = 'python -m pytest -m "not slow"'
SLOW = "python -m pytest -m slow"
INSTALL = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]'"


def test_pyproject_registers_the_slow_marker():
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(m.split(":")[0].strip() == "slow" for m in ini["markers"])
    assert "-m" not in ini.get("addopts", "").split(), "a default -m would hide one tier from `python -m pytest`"


def test_ci_runs_the_quick_tier_first_prints_its_time_then_the_slow_tier():
    lines = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines() if not ln.lstrip().startswith("#")]
    text = "\n".join(lines)
    assert INSTALL in text
    quick = next(i for i, ln in enumerate(lines) if ln.startswith(QUICK))
    said = next(i for i, ln in enumerate(lines) if re.search(r'echo "quick tier: \$\(\(', ln))
    slow = next(i for i, ln in enumerate(lines) if ln.startswith(SLOW))
    assert lines.index(next(ln for ln in lines if ln.startswith(INSTALL))) < quick < said < slow
    assert sum(ln.startswith("python -m pytest") for ln in lines) == 2  # the two tiers, nothing run twice


def test_readme_test_command_is_the_two_tiers_ci_runs():
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    command = next(b.strip() for b in blocks if "pytest" in b)
    assert command == f"{INSTALL} && {QUICK} && {SLOW}"
    assert f"`{QUICK}`" in readme and f"`{SLOW}`" in readme
