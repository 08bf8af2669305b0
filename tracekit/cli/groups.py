"""Option groups: options declared once that a command takes as one object (``tracekit/cli/options.py`` declares
the groups). A command names a group as the default of one parameter, ``step_flags: StepFlags = STEP_FLAGS``;
:class:`App` (the typer app of every command) spreads the group's options into the command's signature in that
place, so ``--help`` lists them there and the parser parses them as the command's own, and calls the command with
the object the group makes of them."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import typer


class OptionGroup:
    """Options declared once, taken by a command as one object: ``members`` are (name, declaration, default) in the
    order ``--help`` lists them, ``make`` turns their parsed values (keywords) into the object."""

    def __init__(self, make: Callable[..., Any], *members: tuple[str, Any, Any]):
        self.make, self.members = make, members

    def with_option(self, name: str, declaration: Any, default: Any = None) -> OptionGroup:
        """The group with member ``name`` declared otherwise (its own help, say)."""
        return OptionGroup(self.make, *((n, declaration, default) if n == name else (n, d, v) for n, d, v in self))

    def __iter__(self):
        return iter(self.members)

    def parameters(self) -> list[inspect.Parameter]:
        return [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=d, default=v) for n, d, v in self]


def with_groups(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as typer sees it: each parameter whose default is an :class:`OptionGroup` replaced by the group's
    options, in its place; called with them parsed, it calls ``fn`` with the group's object instead."""
    sig = inspect.signature(fn, eval_str=True)
    groups = {n: p.default for n, p in sig.parameters.items() if isinstance(p.default, OptionGroup)}
    if not groups:
        return fn
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        params += groups[p.name].parameters() if p.name in groups else [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)]

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        for name, group in groups.items():
            kwargs[name] = group.make(**{n: kwargs.pop(n) for n, _, _ in group})
        return fn(**kwargs)

    command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    del command.__wrapped__  # (set by functools.wraps) what typer calls is this signature, not fn's
    return command


class App(typer.Typer):
    """A typer app whose commands may take option groups (:func:`with_groups`); the command functions stay as
    written (callable with the groups' objects)."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        register = super().command(*args, **kwargs)

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            register(with_groups(fn))
            return fn

        return decorator
