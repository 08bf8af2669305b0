"""The what-if rules and what a user asks of them: ``tracekit/data/whatif.json`` loaded and checked, ``--set``
settings and ``--dim`` model dimensions parsed into typed, range-checked values, and a rule's formula evaluated.

The replay engine (:mod:`.replay`) and ``tracekit whatif`` (:mod:`.whatif`) read the rules through this module only.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from ...errors import DataFileError
from .ledger_engine import OptionError
from ..formulas import eval_formula

RULES_FILE = "tracekit/data/whatif.json"
DIM_NAMES = ("hidden_size", "num_experts", "num_max_dispatch_tokens_per_rank")


@lru_cache(maxsize=1)
def load_rules() -> dict[str, Any]:
    """The replay's rules (tracekit/data/whatif.json)."""
    text = resources.files("tracekit.data").joinpath("whatif.json").read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{RULES_FILE} is not valid JSON ({exc}); fix the file") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("parameters"), dict):
        raise DataFileError(f"{RULES_FILE}: the top level must be an object with 'parameters'")
    return doc


def _canon(name: str) -> str:
    return name.strip().lstrip("-").strip().replace("-", "_").lower()


def _aliases(rules: dict[str, Any]) -> dict[str, str]:
    out = {}
    for name, spec in rules["parameters"].items():
        for a in [name, *spec.get("aliases", [])]:
            out[_canon(a)] = name
    return out


def _modelled(rules: dict[str, Any]) -> str:
    return ", ".join(rules["parameters"])


def _value(name: str, text: Any, spec: dict[str, Any]) -> Any:
    """One setting's value, typed and range-checked by its spec."""
    typ = spec["type"]
    raw = str(text).strip()
    try:
        if typ == "intlist":
            if isinstance(text, (list, tuple)):
                items = [int(x) for x in text]
            else:
                body = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
                items = [int(x) for x in re.split(r"[,\s]+", body.strip()) if x]
            if not items:
                raise ValueError
            value: Any = sorted(set(items))
        elif typ == "int":
            if isinstance(text, bool) or not re.fullmatch(r"[+-]?\d+", raw):
                raise ValueError
            value = int(raw)
        else:
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError
    except ValueError:
        kind = {"int": "an integer", "float": "a number", "intlist": "a list of batch sizes such as 1,2,4 or [1, 2, 4]"}
        raise OptionError(f"--set {name}={raw!r}: the value must be {kind[typ]}") from None
    values = value if isinstance(value, list) else [value]
    if "min" in spec and min(values) < spec["min"]:
        raise OptionError(f"--set {name}={raw}: must be at least {spec['min']} ({spec['what']})")
    if "max" in spec and max(values) > spec["max"]:
        raise OptionError(f"--set {name}={raw}: must be at most {spec['max']} ({spec['what']})")
    if "above" in spec and not value > spec["above"] or "below" in spec and not value < spec["below"]:
        raise OptionError(
            f"--set {name}={raw}: must lie strictly between {spec['above']} and {spec['below']} ({spec['what']})"
        )
    return value


def parse_settings(settings: list[str] | dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """``["mem_fraction_static=0.9", "--cuda-graph-bs=[1, 2]"]`` or a dict → ({canonical name: value}, {name: as
    given}); an unknown name or a bad value is an OptionError naming what the replay can model."""
    rules = load_rules()
    names = _aliases(rules)
    if isinstance(settings, dict):
        items = list(settings.items())
    else:
        items = []
        for item in settings or []:
            key, eq, val = str(item).partition("=")
            if not eq or not key.strip():
                raise OptionError(f"--set takes NAME=VALUE, not {item!r}; the replay can model: {_modelled(rules)}")
            items.append((key, val))
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, val in items:
        name = names.get(_canon(str(key)))
        if name is None:
            raise OptionError(
                f"--set {str(key).strip()}: the memory replay cannot model this parameter; it can model "
                f"{_modelled(rules)}"
            )
        if name in out:
            raise OptionError(f"--set {name} is given twice; give each parameter once")
        out[name] = _value(name, val, rules["parameters"][name])
        given[name] = str(key).strip()
    if not out:
        raise OptionError(f"give at least one --set NAME=VALUE; the replay can model: {_modelled(rules)}")
    return out, given


def parse_dims(dims: list[str] | dict[str, Any] | None) -> dict[str, int]:
    """``["hidden_size=7168", "num_experts=448"]`` or a dict → {name: int}."""
    items = list(dims.items()) if isinstance(dims, dict) else [str(d).partition("=")[::2] for d in dims or []]
    out = {}
    for key, val in items:
        k = _canon(str(key))
        if k not in DIM_NAMES:
            raise OptionError(f"--dim {key}: unknown model dimension; the replay uses {', '.join(DIM_NAMES)}")
        try:
            v = int(str(val).strip())
        except ValueError:
            raise OptionError(f"--dim {key}={val!r}: the value must be a positive integer") from None
        if v < 1:
            raise OptionError(f"--dim {key}={val}: the value must be a positive integer")
        out[k] = v
    return out


def eval_rule(spec: dict[str, Any], key: str, env: dict[str, float], where: str) -> float:
    """The rule ``spec``'s formula ``key`` evaluated over ``env``; an error names the rule's place in the file."""
    return float(eval_formula(spec[key], {k: float(v) for k, v in env.items()}, f"{RULES_FILE}: {where}.{key}"))


__all__ = ["DIM_NAMES", "RULES_FILE", "eval_rule", "load_rules", "parse_dims", "parse_settings"]
