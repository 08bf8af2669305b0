"""Generic overlap of two event selections: how much of A is hidden under B."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...errors import MissingDataError
from ...result import Result, trace_input
from ...trace import Trace
from ..select import select
from ..steps.keywords import options_as_objects
from ..steps.resolve import find_steps
from ...result import merge_warnings

OVERLAP_KEYS = ["a_ns", "b_ns", "a_and_b_ns", "a_minus_b_ns", "a_hidden_pct"]


def _measures(a, b, ws=None, we=None) -> dict:
    both = iv.intersect(a, b)
    only_a = iv.subtract(a, b)
    if ws is None:
        vals = [iv.total(a), iv.total(b), iv.total(both), iv.total(only_a)]
    else:
        vals = [iv.measure_in_windows(x, ws, we) for x in (a, b, both, only_a)]
    return dict(zip(OVERLAP_KEYS[:4], vals))


@options_as_objects
def overlap(trace: Trace, *, a: str, b: str, steps=None, per_step: bool = True) -> Result:
    """|A|, |B|, |A∩B|, |A−B| and the share of A hidden under B (unions of the selected events).

    With ``per_step`` (default), the same per step window (``steps``: Steps, StepOptions or a table;
    default: found from the step options). ``steps=False`` is the old spelling of ``per_step=False``.
    """
    if isinstance(steps, bool):
        per_step, steps = steps, None
    ev = trace.events
    ma, mb = select(ev, a), select(ev, b)
    if not ma.any():
        raise MissingDataError(f"{trace.path}: selection A ({a!r}) matches no event")
    s, e = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    set_a = iv.normalize(s[ma], e[ma])
    set_b = iv.normalize(s[mb], e[mb])
    summary = {"a_events": int(ma.sum()), "b_events": int(mb.sum()), **_measures(set_a, set_b)}
    summary["a_hidden_pct"] = summary["a_and_b_ns"] / summary["a_ns"] * 100.0 if summary["a_ns"] else None
    tables = {}
    warnings = list(trace.report.warnings)
    params = {"a": a, "b": b}
    if per_step:
        st = find_steps(trace, steps)
        warnings = merge_warnings(warnings, st.warnings)
        params.update(st.options.as_params())
        per = _measures(set_a, set_b, st.starts, st.ends)
        df = pd.DataFrame({"step": st.table["step"].to_numpy(), "start_ns": st.starts, **per})
        with np.errstate(invalid="ignore", divide="ignore"):
            df["a_hidden_pct"] = np.where(df["a_ns"] > 0, df["a_and_b_ns"] / df["a_ns"] * 100.0, np.nan)
        tables["per_step"] = df
        summary["steps"] = int(len(df))
    return Result(
        command="overlap", inputs=[trace_input(trace)], params=params, summary=summary, tables=tables, warnings=warnings
    )
