"""The keywords of earlier releases, accepted for one more release: the one place they become objects.

Public analyses take ``steps=`` (``StepOptions`` or ``Steps``) and ``ag=`` (``AllGatherOptions``) where they used to
take a flat keyword per option (``step_name=``, ``min_step_ns=``, ``phase=``, ``step_source=``, ``steps_file=``;
``group_size=``, ``ag_size=``/``sizes=``, ``local_copy=``/``local_copy_pattern=``), and one name per option where
they took two (``qlen=`` → ``q_len=``, ``var=`` → ``variables=``, ``main=`` → ``main_stream=``). A call with an
old keyword still works, says so with a DeprecationWarning, and gets exactly what it got before: the step keywords
merge with the annotation's ``step`` section as they did (``step_options``).
"""

from __future__ import annotations

import functools
import inspect
import warnings

from ...errors import UsageError
from ..options import AllGatherOptions
from .model import step_options

__all__ = ["options_as_objects", "STEP_KEYWORDS", "AG_KEYWORDS", "RENAMED"]

# old keyword -> step_options' keyword
STEP_KEYWORDS = {
    "step_name": "step_name",
    "min_step_ns": "min_step_ns",
    "phase": "phase",
    "step_source": "source",
    "steps_file": "steps_file",
}
# old keyword -> AllGatherOptions' field
AG_KEYWORDS = {
    "group_size": "group_size",
    "ag_size": "sizes",
    "sizes": "sizes",
    "local_copy": "local_copy",
    "local_copy_pattern": "local_copy",
}
# old alias -> the one name kept
RENAMED = {"qlen": "q_len", "var": "variables", "main": "main_stream"}


def options_as_objects(fn):
    """Decorate a public analysis whose signature takes ``steps=`` / ``ag=``: the old flat keywords it no longer
    names are turned into those objects, with a DeprecationWarning. Its signature (``help()``, the CLI parity
    test) is the new one."""
    sig = inspect.signature(fn)
    takes = sig.parameters

    @functools.wraps(fn)
    def call(*args, **kw):
        old = [k for k in kw if k not in takes and (k in STEP_KEYWORDS or k in AG_KEYWORDS or k in RENAMED)]
        if old:
            warnings.warn(
                f"{fn.__name__}(): {', '.join(f'{k}=' for k in old)} {'is a keyword' if len(old) == 1 else 'are keywords'}"
                f" of earlier releases, removed in the next; {_instead(old)}",
                DeprecationWarning,
                stacklevel=2,
            )
            kw = _as_objects(fn.__name__, sig, args, kw, old)
        return fn(*args, **kw)

    call.__signature__ = sig
    return call


def _instead(old: list[str]) -> str:
    parts = []
    if any(k in STEP_KEYWORDS for k in old):
        parts.append("pass steps=tracekit.step_options(ann, step_name=..., min_step_ns=...)")
    if any(k in AG_KEYWORDS for k in old):
        parts.append("pass ag=tracekit.AllGatherOptions(group_size=..., sizes=..., local_copy=...)")
    parts += [f"pass {RENAMED[k]}=" for k in old if k in RENAMED]
    return "; ".join(parts)


def _as_objects(name: str, sig: inspect.Signature, args: tuple, kw: dict, old: list[str]) -> dict:
    kw = dict(kw)
    step_kw = {STEP_KEYWORDS[k]: kw.pop(k) for k in old if k in STEP_KEYWORDS}
    ag_kw: dict = {}
    for k in [k for k in old if k in AG_KEYWORDS]:
        field, value = AG_KEYWORDS[k], kw.pop(k)
        if value is not None and ag_kw.get(field) is not None and ag_kw[field] != value:
            raise UsageError(f"{name}(): {k}= repeats an option given under another keyword; pass one of them")
        ag_kw[field] = value if value is not None else ag_kw.get(field)
    for k in [k for k in old if k in RENAMED]:
        new, value = RENAMED[k], kw.pop(k)
        if new not in sig.parameters:
            raise TypeError(f"{name}() got an unexpected keyword argument {k!r}")
        if kw.get(new) is not None and value is not None and kw[new] != value:
            raise UsageError(f"{name}(): {new}= and {k}= are the same option; pass {new}=")
        kw[new] = kw.get(new) if value is None else value
    if step_kw:
        if "steps" not in sig.parameters:
            raise TypeError(f"{name}() got an unexpected keyword argument {next(iter(step_kw))!r}")
        if kw.get("steps") is not None:
            raise UsageError(f"{name}(): steps= and the step keywords are the same options; pass steps= only")
        bound = sig.bind_partial(*args, **{k: v for k, v in kw.items() if k in sig.parameters}).arguments
        ann = bound.get("ann", bound.get("annotation"))  # a sweep names it annotation=
        kw["steps"] = step_options(ann, **step_kw)
    if ag_kw:
        target = _ag_parameter(sig)
        if target is None:
            raise TypeError(f"{name}() got an unexpected keyword argument {next(k for k in old if k in AG_KEYWORDS)!r}")
        if kw.get(target) is not None:
            raise UsageError(
                f"{name}(): {target}= and the AllGather keywords are the same options; pass {target}= only"
            )
        kw[target] = AllGatherOptions(
            group_size=ag_kw.get("group_size"), sizes=ag_kw.get("sizes") or (), local_copy=ag_kw.get("local_copy")
        )
    return kw


def _ag_parameter(sig: inspect.Signature) -> str | None:
    """Where a function takes its AllGatherOptions: ``ag=``, or ``allgather=`` where ``ag=`` is the other option of
    that name (which copies count as AllGather: wall, export, annotate)."""
    if "ag" in sig.parameters and sig.parameters["ag"].default is None:
        return "ag"
    return "allgather" if "allgather" in sig.parameters else None
