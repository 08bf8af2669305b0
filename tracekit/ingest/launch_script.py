"""Launch scripts and the server-argument line of launch logs: the SGLANG_* / NCCL_* / CUDA_* environment
and the ``--flag value`` server arguments, as one flat dict (``tracekit compare --config-a``)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ..errors import InputError
from ..errors import check_argument

_EXPORT = re.compile(r"^\s*(?:export\s+)?(SGLANG_[A-Z0-9_]+|NCCL_[A-Z0-9_]+|CUDA_[A-Z0-9_]+)=(\S*)")
# sglang logs its non-default environment as one line: "... Non-default environment: SGLANG_A=1 SGLANG_B=2"
_ENV_LINE = re.compile(r"Non-default environment:(.*)$")
_ENV_PAIR = re.compile(r"\b((?:SGLANG|NCCL|CUDA)_[A-Z0-9_]+)=(\S*)")


def launch_config(path: str | Path) -> dict[str, str]:
    """SGLANG_* (and NCCL_*, CUDA_*) environment and ``--flag value`` server arguments of a launch script
    (``start_*.sh``) or the ``server_args=ServerArgs(...)`` line of a launch log."""
    check_argument(path, "path", "a path (str or Path) of a launch script or log", paths=True)
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"{p} could not be read ({exc.strerror or exc}); check the path") from exc
    conf: dict[str, str] = {}
    m = re.search(r"server_args=ServerArgs\((.*)\)\s*$", text, re.M)
    if m:
        for k, v in re.findall(r"(\w+)=('[^']*'|\"[^\"]*\"|\[[^\]]*\]|\{[^}]*\}|[^,]+)", m.group(1)):
            conf[f"--{k.replace('_', '-')}"] = v.strip().strip("'\"")
    joined = text.replace("\\\n", " ")
    for line in joined.splitlines():
        em = _EXPORT.match(line)
        if em:
            conf[em.group(1)] = em.group(2).strip("'\"")
        env = _ENV_LINE.search(line)
        if env:
            for k, v in _ENV_PAIR.findall(env.group(1)):
                conf[k] = v.strip("'\"")
        if "--" in line and not line.lstrip().startswith("#"):
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError:
                tokens = line.split()
            for i, t in enumerate(tokens):
                if t.startswith("--"):
                    key, eq, val = t.partition("=")
                    if not eq:
                        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
                        val = nxt if nxt and not nxt.startswith("--") else "true"
                    conf[key] = val
                elif "=" in t and t.split("=")[0].startswith(("SGLANG_", "NCCL_", "CUDA_")):
                    k, _, v = t.partition("=")
                    conf[k] = v
    return conf
