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


# ------------------------------------------------------------------ every public function, not only the commands


def _public() -> list[tuple[str, object]]:
    """(name, function) of every function in ``tracekit.__all__``, each function once (a command's two names)."""
    import tracekit

    out, seen = [], set()
    for name in tracekit.__all__:
        fn = getattr(tracekit, name)
        if inspect.isfunction(fn) and fn not in seen:
            seen.add(fn)
            out.append((name, fn))
    return out


PUBLIC = _public()
NO_POSITIONAL = {"capacity", "rank_map", "waves_calc"}  # keywords only: there is no first argument to check
# (function, value) pairs that are a meaning, not a mistake: a cache folder that is empty or not made yet, no
# annotation or profile (as_*: None in, None out; resolve_profile: the trace's own device)
ACCEPTED = {
    ("cache_info", "dir"),
    ("cache_info", "missing"),
    ("cache_clear", "dir"),
    ("cache_clear", "missing"),
    ("as_annotation", "None"),
    ("as_profile", "None"),
    ("resolve_profile", "None"),
}


def _call(fn, value):
    """``fn`` called with ``value`` for every positional argument it requires (a and b of compare) and None for
    every keyword it requires: the first is checked before any other is used."""
    ps = list(inspect.signature(fn).parameters.values())
    pos = [p for p in ps[1:] if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty]
    kw = {p.name: None for p in ps if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    return fn(value, *[value] * len(pos), **kw)


def test_every_public_function_is_checked():
    names = {n for n, _ in PUBLIC}
    assert len(PUBLIC) >= 60 and {"load", "read_log", "analyze", "imbalance", "emit", "save_figure"} <= names
    no_first = {n for n, fn in PUBLIC if not inspect.signature(fn).parameters} | {
        n
        for n, fn in PUBLIC
        if next(iter(inspect.signature(fn).parameters.values())).kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert no_first == NO_POSITIONAL  # a new public function with a first argument is checked below


@pytest.mark.parametrize(
    "name,fn", [p for p in PUBLIC if p[0] not in NO_POSITIONAL], ids=lambda x: getattr(x, "__name__", x)
)
def test_a_wrong_first_argument_is_one_sentence_naming_it(name, fn, tmp_path, monkeypatch):
    from tracekit.errors import MissingDataError, TracekitError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    first = next(iter(inspect.signature(fn).parameters.values()))
    values = {
        "None": None,
        "DataFrame": pd.DataFrame({"a": [1]}),
        "dir": tmp_path / "empty",
        "missing": tmp_path / "no.json",
    }
    for label, value in values.items():
        if (label == "None" and first.default is None) or (name, label) in ACCEPTED:
            continue  # None is the function's default: a meaning (the sample, every profile, the default cache)
        try:
            _call(fn, value)
        except TypeError as exc:
            text = _one_sentence(exc)
            got = type(value).__name__ if value is not None else "None"
            assert text.startswith(f"{first.name} must be ") and text.endswith(f"not {got}"), (name, label, text)
        except TracekitError as exc:
            text = _one_sentence(exc)
            if label in ("dir", "missing"):
                assert str(value) in text, (name, label, text)  # names the path
            else:  # a DataFrame given where a DataFrame is taken: it lacks the columns
                assert label == "DataFrame" and "DataFrame" in str(first.annotation), (name, text)
                assert isinstance(exc, MissingDataError), (name, text)
        else:
            pytest.fail(f"{name}({label}) returned without a word")
