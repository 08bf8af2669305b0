"""Formulas of annotations and op models — shapes, byte counts, what-if rules — evaluated safely: arithmetic
over named variables only, bounded in size and range, every error one sentence naming the file and JSON path."""

from __future__ import annotations

import ast
import math
import operator

import numpy as np

from ..errors import DataFileError, InputError

_FUNCS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor}
FORMULA_LIMIT = 1e30  # no byte count, FLOP count or size of a decode step comes near this: beyond it is a mistake


def _pow(a: float, b: float) -> float:
    """``**`` that cannot hang: evaluated in floats, and only when the result stays in range (``9**9**9`` is an
    error, not a minutes-long big-integer power)."""
    a, b = float(a), float(b)
    if a != 0 and abs(b) * math.log10(abs(a)) > 30:
        raise OverflowError
    return a**b


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _pow,
}


def eval_formula(expr: str | int | float, env: dict[str, float], where: str) -> float:
    """Evaluate an arithmetic formula (+ - * / // % **, parentheses, min/max/ceil/floor) over ``env``.

    ``where`` names the file and JSON path for the error a bad formula raises."""
    if isinstance(expr, (int, float)):
        return _checked(expr, expr, where)
    if len(str(expr)) > 1000:
        raise DataFileError(f"{where}: a formula of {len(str(expr))} characters is longer than any shape needs")
    try:
        tree = ast.parse(str(expr), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        raise DataFileError(f"{where}: {expr!r} is not a formula ({getattr(exc, 'msg', exc)})") from exc
    try:
        return _checked(_eval(tree, expr, env, where), expr, where)
    except (OverflowError, ZeroDivisionError, RecursionError) as exc:
        what = "divides by zero" if isinstance(exc, ZeroDivisionError) else "is out of range"
        raise DataFileError(f"{where}: {expr!r} {what} with {_env_text(expr, env)}") from None


def _env_text(expr, env: dict[str, float]) -> str:
    used = [k for k in sorted(env) if k in str(expr)]
    return ", ".join(f"{k}={env[k]:g}" for k in used) or "no variables"


def _checked(v, expr, where: str) -> float:
    f = float(v)
    if not math.isfinite(f) or abs(f) > FORMULA_LIMIT:
        raise DataFileError(
            f"{where}: {expr!r} gives {f:g}, outside ±{FORMULA_LIMIT:g}; check the formula and its variables"
        )
    return v


def _eval(tree, expr, env: dict[str, float], where: str) -> float:

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise DataFileError(
                    f"{where}: {expr!r} uses {node.id!r}, which is not defined (known: "
                    f"{', '.join(sorted(env))}); add it to the annotation's constants or pass"
                    f" --var {node.id}=VALUE"
                )
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCS
            and not node.keywords
            and node.args
        ):
            return _FUNCS[node.func.id](*(ev(a) for a in node.args))
        raise DataFileError(
            f"{where}: {expr!r} may use only numbers, names, + - * / // % **, parentheses and {', '.join(_FUNCS)}"
        )

    try:
        return ev(tree)
    except ZeroDivisionError as exc:
        raise DataFileError(f"{where}: {expr!r} divides by zero with {env}") from exc


def as_number(v):
    """An integral float as an int (for shapes, batch sizes and byte counts); anything else unchanged."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, np.floating) and float(v).is_integer():
        return int(v)
    return v


def parse_vars(items: list[str] | None) -> dict[str, float]:
    """``["context=100000", ...]`` → {"context": 100000.0}; a bad item is an InputError."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        try:
            if not sep or not name.strip().isidentifier():
                raise ValueError
            v = float(value)
            if not math.isfinite(v):
                raise ValueError
            out[name.strip()] = v
        except ValueError:
            raise InputError(f"--var takes NAME=NUMBER with a finite number, not {item!r}") from None
    return out
