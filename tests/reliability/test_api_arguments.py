"""Every public command function that takes a trace or a launch log checks it (issue 41): `info(None)`,
`kernels(pd.DataFrame())` and 80 similar calls raised AttributeError from inside the analyses. Now None (where a
trace is needed) and a DataFrame are one TypeError sentence naming the function, the argument, what it takes and
what it got; a directory without a trace and a missing file are tracekit's InputError sentence (exit 3)."""

from __future__ import annotations

import importlib
import inspect

import pandas as pd
import pytest

from tracekit.errors import InputError
from tracekit.registry import COMMANDS


def _functions() -> list[tuple[str, object, str]]:
    """(command, function, its first parameter) of every command whose first argument is a trace or a log."""
    out = []
    for cmd, ref in COMMANDS.items():
        mod, name = ref.split(":")
        fn = getattr(importlib.import_module(f"tracekit.{mod}"), name)
        first, param = next(iter(inspect.signature(fn).parameters.items()))
        if first in ("trace", "log") and param.kind is not inspect.Parameter.KEYWORD_ONLY:
            out.append((cmd, fn, first, param.default is None))
    return out


FUNCTIONS = _functions()


def test_the_commands_that_take_a_trace_or_a_log_are_found():
    names = {c for c, *_ in FUNCTIONS}
    assert {"info", "kernels", "steps", "report", "annotate", "export", "log", "ledger", "whatif"} <= names
    assert len(FUNCTIONS) >= 24
    assert all(hasattr(fn, "__wrapped__") for _, fn, *_ in FUNCTIONS)  # each goes through options_as_objects


def _one_sentence(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text.count(". ") == 0, text
    return text


@pytest.mark.parametrize("cmd,fn,param,optional", FUNCTIONS, ids=[c for c, *_ in FUNCTIONS])
def test_none_and_a_dataframe_are_one_type_error_sentence(cmd, fn, param, optional):
    for value, got in ((pd.DataFrame({"a": [1]}), "DataFrame"), (None, "None")):
        if value is None and optional:
            continue  # the function has a meaning for no trace (the sample, --compare)
        with pytest.raises(TypeError) as exc:
            fn(value)
        text = _one_sentence(exc.value)
        assert text.startswith(f"{param} must be ") and text.endswith(f"not {got}"), text


@pytest.mark.parametrize("cmd,fn,param,optional", FUNCTIONS, ids=[c for c, *_ in FUNCTIONS])
def test_a_directory_and_a_missing_file_are_tracekits_input_error(cmd, fn, param, optional, tmp_path):
    for value in (tmp_path, tmp_path / "no_such_trace.json"):
        with pytest.raises(InputError) as exc:
            fn(value)
        assert str(tmp_path) in str(exc.value) and "\n" not in str(exc.value)
