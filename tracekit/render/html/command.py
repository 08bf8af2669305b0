"""How the page's numbers were obtained: the ``tracekit`` command line that computes a result again, spelled with
the CLI's own options (the one upward import of the renderers, ``tests/test_layers.py``), and the page's section
that shows it with the version, the inputs and the parameters."""

from __future__ import annotations

import json

from ..._version import __version__
from ...result import Result, shown_obj
from .paths import PathView
from .tables import esc, num

# a result's parameter (the Python function's name) -> the CLI option that sets it, where the two names differ
PARAM_OPTIONS = {"sizes": "ag_size", "ann": "annotation"}
NS_UNITS = (("ms", 1e6), ("us", 1e3), ("s", 1e9))  # an ``*_ns`` parameter given to the CLI in these units


def _click_command(result: Result):
    """The words and the click command of the ``tracekit`` command that made ``result`` ("waves_calc" is
    ``waves calc``; a group's sub-command is the one its ``kind`` or ``action`` parameter names, else the only one
    that takes the result's inputs as arguments), or (the command's words, None)."""
    words = result.command.replace("_", " ").split()
    try:
        import typer.main

        from ...cli import app
    except ImportError:  # pragma: no cover - the CLI's dependencies are part of tracekit
        return words, None
    cmd = typer.main.get_command(app)
    for part in words:
        cmd = getattr(cmd, "commands", {}).get(part)
        if cmd is None:
            return words, None
    subs = getattr(cmd, "commands", None)
    if subs:
        named = [result.params.get(k) for k in ("kind", "action") if result.params.get(k) in subs]
        takes = [
            n
            for n, c in subs.items()
            if any(getattr(p, "param_type_name", "") == "argument" for p in c.params) == bool(result.inputs)
        ]
        pick = named[0] if named else takes[0] if len(takes) == 1 else None
        if pick is None:
            return words, None
        words, cmd = [*words, pick], subs[pick]
    return words, cmd


def _option_args(opt, value) -> list[str]:
    """``value`` written as the CLI option ``opt`` takes it (repeated for a list or a TYPE=VALUE mapping)."""
    flag = min(opt.opts, key=len) if any(not o.startswith("--") for o in opt.opts) else opt.opts[0]
    if opt.is_flag:
        return [flag] if value else []
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in (flag, f"{k}={v}")]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in (flag, str(v))] if opt.multiple else [flag, ",".join(map(str, value))]
    return [flag, str(value)]


def command_args(result: Result, rel=None) -> list[str]:
    """The command line that computes this result again, from the CLI's own options: each parameter the command has
    an option for (by its name, ``PARAM_OPTIONS``, or an ``*_ns`` parameter given in ms by ``--*-ms``), those left at
    the option's default left out; the inputs that no option took are the arguments. ``rel`` shows a path."""
    rel = rel or (lambda x: x)
    words, cmd = _click_command(result)
    names = [str(i.get("path") or i.get("label")) for i in result.inputs if i.get("path") or i.get("label")]
    if cmd is None:
        return ["tracekit", *words, *map(rel, names)]
    # typer carries its own copy of click: options and arguments told apart by what they say they are
    opts = {p.name: p for p in cmd.params if getattr(p, "param_type_name", "") == "option"}
    args, used = [], set()
    for k, v in result.params.items():
        name = PARAM_OPTIONS.get(k, k)
        if name not in opts and name.replace("_", "") in opts:  # q_len -> --qlen
            name = name.replace("_", "")
        unit = next((u for u, _ in NS_UNITS if f"{k[:-3]}_{u}" in opts), None) if k.endswith("_ns") else None
        if name not in opts and unit is not None and num(v) is not None:  # min_step_ns -> --min-step-ms
            name, v = f"{k[:-3]}_{unit}", float(v) / dict(NS_UNITS)[unit]
            v = int(v) if float(v).is_integer() else v
            if v == 0:
                continue
        opt = opts.get(name)
        if opt is None:
            continue
        default = getattr(opt.default, "value", opt.default)  # an enum choice's default by its value
        if v in (None, "", [], {}) or v == default or (opt.is_flag and not v):
            continue
        if isinstance(v, str) and v in names:
            used.add(v)
            v = rel(v)
        args += _option_args(opt, v)
    positional = [n for n in names if n not in used]
    n_args = sum(
        p.nargs if p.nargs > 0 else len(positional)
        for p in cmd.params
        if getattr(p, "param_type_name", "") == "argument"
    )
    return ["tracekit", *words, *map(rel, positional[:n_args]), *args]


def command_line(result: Result, rel=None) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in command_args(result, rel))


def provenance_html(result: Result, view: PathView | None = None) -> str:
    """The page's last section: the command that computes the result again (paths as ``view`` shows them: relative
    to the page's folder, where the command runs), the tracekit version and result schema, every input and the
    parameters."""
    view = view or PathView()
    params = json.dumps(result.params, ensure_ascii=False, default=str, indent=1)
    return (
        '<h2>How these numbers were obtained</h2><div class="prov">'
        f'<p>Command (run from the folder of this page: the paths are relative to it): <code class="cmd">'
        f"{esc(command_line(result, view.shown))}</code></p>"
        f"<p>tracekit {esc(__version__)}, result schema <code>{esc(result.schema)}</code>; "
        "every number above is in the JSON sidecar (the <code>-f json</code> document).</p>"
        f"<p>Inputs:</p><ul>{''.join(f'<li><code>{esc(json.dumps(shown_obj(i), default=str, ensure_ascii=False))}</code></li>' for i in view.inputs(result))}</ul>"
        f"<details><summary>Parameters</summary><pre>{esc(params)}</pre></details></div>"
    )
