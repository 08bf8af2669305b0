"""The `tracekit` command line: parse arguments, call the Python API, render, exit.

Errors are caught in one place (:func:`run`): a TracekitError prints its one-sentence message and exits
with its code (2 usage, 3 bad input, 4 missing data); anything else prints one line and suggests
``--debug``, which shows the traceback; running out of memory is one sentence (exit 3 naming the input being read or
analysed), a number too large to compute with a usage error (exit 2), a file that cannot be read exit 3, stdout on a
full disk exit 3, a closed stdout pipe exit 0, SIGTERM/SIGHUP 128 + the signal after temporary files are removed and
workers stopped (docs/reliability.md, "Exit codes and signals"); 1 is tracekit's own bugs only. Command
modules in this package are imported automatically, and every command runs under the one output rule
(``guard.guarded``, ``tracekit.render.files.output_target``): its inputs come from its parsed parameters, and no
output replaces one of them.
"""

from __future__ import annotations

import errno
import os
import sys


def _out_of_memory(exc: BaseException) -> bool:
    """A MemoryError, or a library that could not be mapped into memory (``ulimit -v``) while imported."""
    text = str(exc)
    return isinstance(exc, MemoryError) or (
        isinstance(exc, ImportError) and ("failed to map segment" in text or "annot allocate memory" in text)
    )


def _startup_hook(typ, exc, tb, _previous=sys.excepthook) -> None:
    """Running out of memory while tracekit's libraries load (before :func:`run` can catch it) is one sentence."""
    if _out_of_memory(exc) and "--debug" not in sys.argv:
        sys.stderr.write(
            "error: ran out of memory while starting tracekit; free memory or raise the limit"
            " (ulimit -v) and run the command again\n"
        )
        sys.stderr.flush()
        os._exit(3)  # a limit of the world, not a tracekit bug: exit 3 as every memory error
    _previous(typ, exc, tb)


sys.excepthook = _startup_hook

import logging  # noqa: E402

from .._version import version_line  # noqa: E402
from ..errors import TracekitError  # noqa: E402

__all__ = ["app", "command", "run", "main", "bundled_sample", "SAMPLE_TRACE"]


def _app():
    """The typer app with the commands of every module of this package on it (imported on first use, so that
    ``tracekit --version`` imports no command and not even typer)."""
    import importlib
    import pkgutil

    from . import common

    for mod in pkgutil.iter_modules(__path__):
        if mod.name != "common":
            importlib.import_module(f"{__name__}.{mod.name}")
    return common.app


def __getattr__(name: str):
    if name == "app":
        return _app()
    if name in ("bundled_sample", "SAMPLE_TRACE"):
        from . import common

        return getattr(common, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


GLOBAL_FLAGS = ("--debug", "--quiet", "-q", "--verbose", "-v", "--all", "--wide")
GLOBAL_OPTIONS = ("--device",)  # global options that take a value


def hoist_global_flags(args: list[str]) -> list[str]:
    """``tracekit wall T -q --device 1`` is ``tracekit -q --device 1 wall T``: the global flags and options may stand
    anywhere before ``--``."""
    cut = args.index("--") if "--" in args else len(args)
    front, rest, i = [], [], 0
    while i < cut:
        a = args[i]
        if a in GLOBAL_FLAGS or a.split("=", 1)[0] in GLOBAL_OPTIONS and "=" in a:
            front.append(a)
        elif a in GLOBAL_OPTIONS and i + 1 < cut:
            front += [a, args[i + 1]]
            i += 1
        else:
            rest.append(a)
        i += 1
    return front + rest + args[cut:]


def _command_named(args: list[str]) -> str | None:
    """The command ``args`` run (the first word after the global options), or None."""
    i = 0
    while i < len(args):
        a = args[i]
        if a in GLOBAL_OPTIONS:
            i += 2
        elif a.startswith("-"):
            i += 1
        else:
            return a
    return None


def _narrowed(app, args: list[str] | None):
    """``app`` with only the command (or command group) ``args`` run: click then builds that one command's options
    instead of all forty (a tenth of a second at every start). The whole app when no command is named or the name is
    not one (``--help``, and a misspelt command's suggestions, need them all)."""
    name = _command_named(args) if args else None
    if name is None:
        return app
    import copy

    import typer.main

    cmds = [c for c in app.registered_commands if (c.name or typer.main.get_command_name(c.callback.__name__)) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not cmds and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = cmds, groups
    return one


class PastClick(BaseException):
    """Carries past click's own handling (which makes a closed pipe and Ctrl-C exit 1) the exception that
    :func:`run` turns into its exit code: 0 for a closed pipe, 130 for an interrupt."""


def _past_click(invoke):
    import functools

    @functools.wraps(invoke)
    def call(ctx):
        try:
            return invoke(ctx)
        except KeyboardInterrupt as exc:
            raise PastClick(exc) from None
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise PastClick(exc) from None
            raise

    return call


def command(args: list[str] | None = None):
    """The click command tree of ``app`` (only the command ``args`` name, when given) with the one output rule on
    every command (``guard.guarded``), and the parser's own readable check off: an unreadable input is one sentence
    and exit 3, not a usage error."""
    import typer.main

    from .guard import guarded

    root = typer.main.get_command(_narrowed(_app(), args))

    def walk(cmd) -> None:
        for param in getattr(cmd, "params", []):
            info = getattr(getattr(param, "type_descriptor", None), "parameter_info", None)
            if info is not None and getattr(info, "readable", False):
                info.readable = False
        subs = getattr(cmd, "commands", None)
        if subs is not None:
            for sub in subs.values():
                walk(sub)
        else:
            cmd.invoke = _past_click(guarded(cmd.invoke))  # with the parsed context, before the command's callback

    walk(root)
    return root


def _memory_error() -> tuple[str, int]:
    from .common import _state

    reading, analysing = _state.get("reading"), _state.get("analysing")
    if reading is not None:
        return (
            f"ran out of memory reading {reading}; free memory or raise the limit (ulimit -v), or pass a smaller trace",
            3,
        )
    if analysing is not None:
        return (
            f"ran out of memory analysing {analysing}; free memory or raise the limit (ulimit -v), or pass a"
            " smaller trace or fewer steps",
            3,
        )
    from ..render.files import guarded_inputs

    inputs = guarded_inputs()
    named = f" working on {', '.join(str(p) for p in inputs[:3])}" if inputs else ""
    return (
        f"ran out of memory{named}; free memory or raise the limit (ulimit -v), or pass a smaller input, and run the"
        " command again",
        3,
    )


def safe_text(text: str) -> str:
    """An error message made terminal-safe (``tracekit.render.human.safe_text``), imported only when an error is
    shown: ``--help``, ``--version`` and a usage error load no pandas."""
    from ..render.human import safe_text as safe

    return safe(text)


def _asks_version(args: list[str]) -> bool:
    """``--version`` among the global options before the command (where typer would answer it first)."""
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--version":
            return True
        if a in GLOBAL_OPTIONS:
            i += 2
        elif a in GLOBAL_FLAGS or a.split("=", 1)[0] in GLOBAL_OPTIONS:
            i += 1
        else:
            return False
    return False


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; never raises (tests call this)."""
    args = hoist_global_flags(list(sys.argv[1:] if argv is None else argv))
    if _asks_version(args):  # answered before the command tree is built
        sys.stdout.write(version_line() + "\n")
        return 0
    from ..cache.tempfiles import terminating

    if "tracekit.render.files" in sys.modules:  # a run before this one in this process: its inputs are not ours
        sys.modules["tracekit.render.files"].forget_inputs()
    debug = "--debug" in args
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")  # one look for every warning
    with terminating():  # SIGTERM/SIGHUP raise Terminated: temporary files removed, workers stopped, exit 128+N
        return _run_command(args, debug)


def _run_command(args: list[str], debug: bool) -> int:
    """The command, and every way it can end as an exit code (README's table; docs/reliability.md)."""
    import typer

    from ..cache.tempfiles import Terminated
    from .common import phase

    try:
        try:
            command(args)(args=args, prog_name="tracekit")  # standalone: usage errors print and exit 2
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except PastClick as exc:
            raise exc.args[0] from None
        if code == 0:
            sys.stdout.flush()  # a full disk or a closed pipe is said here, not lost at the exit
        return code
    except TracekitError as exc:
        phase.stop()
        if debug:
            raise
        typer.echo(f"error: {safe_text(str(exc))}", err=True)  # names in messages may hold terminal escapes
        return exc.exit_code
    except Terminated as exc:
        phase.stop()
        import signal

        name = signal.Signals(exc.signum).name
        typer.echo(
            f"terminated by {name}: nothing partial was written, and the worker processes were stopped", err=True
        )
        return 128 + exc.signum
    except BrokenPipeError:
        return _pipe_closed()
    except (MemoryError, ImportError) as exc:
        phase.stop()
        if not _out_of_memory(exc):
            if debug:
                raise
            typer.echo(
                f"error: unexpected {type(exc).__name__}: {safe_text(str(exc))} (a tracekit bug; rerun with"
                " --debug for the traceback and report it)",
                err=True,
            )
            return 1
        if debug:
            raise
        msg, code = _memory_error()
        typer.echo(f"error: {safe_text(msg)}", err=True)
        return code
    except OverflowError as exc:
        phase.stop()
        if debug:
            raise
        typer.echo(
            f"error: a number given is too large to compute with ({safe_text(str(exc))}); pass a smaller value",
            err=True,
        )
        return 2
    except OSError as exc:
        phase.stop()
        if exc.errno == errno.EPIPE:
            return _pipe_closed()
        if debug:
            raise
        if not getattr(exc, "filename", None) and exc.errno in (errno.ENOSPC, errno.EIO, getattr(errno, "EDQUOT", -1)):
            from ..render.files import stdout_error

            typer.echo(f"error: {safe_text(str(stdout_error(exc)))}", err=True)
            return 3
        if not getattr(exc, "filename", None):
            typer.echo(
                f"error: unexpected {type(exc).__name__}: {safe_text(str(exc))} (a tracekit bug; rerun with"
                " --debug for the traceback and report it)",
                err=True,
            )
            return 1
        typer.echo(
            f"error: {safe_text(str(exc.filename))} cannot be read or written ({safe_text(exc.strerror or str(exc))});"
            " check the path and its permissions",
            err=True,
        )
        return 3
    except KeyboardInterrupt:
        phase.stop()
        if debug:
            raise
        typer.echo("interrupted: nothing partial was written (outputs are renamed into place whole)", err=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place unexpected errors become one line
        phase.stop()
        if debug:
            raise
        typer.echo(
            f"error: unexpected {type(exc).__name__}: {safe_text(str(exc))} (a tracekit bug; rerun with"
            " --debug for the traceback and report it)",
            err=True,
        )
        return 1
    finally:
        phase.stop()  # the "analysing …" line never outlives the command


def _pipe_closed() -> int:
    """The reader of stdout went away (``tracekit kernels | head``): exit 0, as ``head`` users expect, and nothing
    more is written (stdout now goes nowhere, so no later flush fails)."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass
    return 0


def main() -> None:
    _leave(run())


def _leave(code: int) -> None:
    """Exit with ``code`` once stdout and stderr are flushed, without the interpreter's teardown: freeing a loaded
    trace's objects one by one and unloading pandas took 0.2 s after every command on a 300 MB trace (issue 30).
    Nothing is left to it: outputs are renamed into place whole, worker pools and the decode helper are joined and
    the cache's temporaries removed before ``run`` returns. Under a tool that saves its data at exit (coverage, a
    profiler or tracer) or with ``TRACEKIT_FULL_EXIT=1``, the normal exit."""
    if (
        sys.gettrace() is not None
        or sys.getprofile() is not None
        or "coverage" in sys.modules
        or os.environ.get("TRACEKIT_FULL_EXIT")
    ):
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (tracekit info | head -1): nothing more can be written
            pass
    logging.shutdown()
    os._exit(code if 0 <= code <= 255 else 1)
