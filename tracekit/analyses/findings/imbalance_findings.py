"""Findings of a run's ranks (issue 28): what DP imbalance costs per step and which rank makes the others wait,
read from a ``tracekit imbalance`` result (contract ``tracekit.imbalance/2``). The words are data
(``rank_imbalance``, ``rank_straggler`` and ``rank_advice`` in tracekit/data/findings.json)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...result import Result, shown_ranks, shown_text
from ..fleet.multirank.per_step import complete_steps, steps_text
from ..fleet.multirank.processes import device_of_part, export_of, is_part
from .rules import finding, finding_rules, ms_text, rank_findings, words


def _lower_median(values) -> float | None:
    v = np.sort(np.asarray(pd.Series(values).dropna(), dtype=float))
    return float(v[(len(v) - 1) // 2]) if v.size else None


def _mean_step_ns(steps: pd.DataFrame, by: pd.DataFrame) -> float:
    """The step wall a rank finding's share is of: per step recorded whole, the lower median of its ranks' walls;
    the mean over those steps (the gain is a mean over the same steps). 0.0 where no step has a wall."""
    st = steps[steps["step"].isin(by["step"])] if len(by) else steps
    if not len(st):
        return 0.0
    per = st.groupby("step")["wall_ns"].agg(lambda v: _lower_median(v))
    return float(per.mean())


def _num(v) -> str:
    return "–" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:g}"


def _done(imb: Result) -> pd.DataFrame:
    """The per-step rows of the steps recorded whole on every rank (``by_step.partial`` false): what every claim
    about a straggler is made from."""
    by = imb.tables["by_step"]
    return complete_steps(by) if "partial" in by else by


def straggler_batch(imb: Result, rank: int | None = None) -> tuple[float | None, float | None]:
    """(the straggler's bs, the median rank's bs) of an imbalance result: lower medians over the steps recorded whole
    that it led and over all steps recorded whole (``tables.by_step``); (None, None) with no straggler. ``rank``:
    another rank than the summary's straggler."""
    straggler = imb.summary.get("straggler")
    by = _done(imb)
    if straggler is None:
        return None, None
    led = by[by["straggler"].astype("Float64") == int(straggler["rank"] if rank is None else rank)]
    return (_lower_median(led["straggler_bs"]) if len(led) else None), _lower_median(by["median_bs"])


def _steps_words(steps: list[int]) -> str:
    return ("step " if len(steps) == 1 else "steps ") + steps_text(steps)


def _worst(s: dict, phrases: dict) -> str:
    """``; steps 1–2 lost 12.3 ms each`` where the worst steps lost ``worst_factor`` × the mean or more (an
    intermittent straggler that a per-step mean spreads thin); else nothing."""
    mean = s.get("imbalance_ns_mean_per_step")
    worst = [w for w in s.get("worst_steps") or [] if mean and w["imbalance_ns"] >= phrases["worst_factor"] * mean]
    if not worst:
        return ""
    v = [w["imbalance_ns"] for w in worst]
    last = sorted({w["straggler"] for w in worst if w["straggler"] is not None})
    if len(worst) > 1 and max(v) <= 1.1 * min(v):
        return phrases["worst_each"].format(
            steps=_steps_words([w["step"] for w in worst]), ms=ms_text(sum(v) / len(v)), last=_last_words(last)
        )
    return "; " + ", ".join(
        phrases["worst_step"].format(
            step=w["step"], ms=ms_text(w["imbalance_ns"]), last=_last_words([w["straggler"]] if w["straggler"] else [])
        )
        for w in worst
    )


def _last_words(ranks: list) -> str:
    if not ranks:
        return "no rank clearly last"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(int(r)) for r in ranks) + " last"


def _led_phase(imb: Result, rank: int, led_steps: list[int]) -> str | None:
    """The phase the rank ran in most of the steps it led (``tables.steps``), None where unknown."""
    st = imb.tables["steps"]
    mine = st[(st["rank"] == rank) & st["step"].isin(led_steps)]["phase"].dropna().astype(str)
    return mine.mode().iloc[0] if len(mine) else None


def _who(imb: Result, rank: int, last: tuple[int, int], phrases: dict, cause: str) -> tuple[str, str | None]:
    """(how the title names the straggler, the phase it ran where it led): a rotating one by the ranks and their
    steps; else by the steps it led (never its one heavy step as if typical), with its bs there or the prefill.
    ``last``: (instances it was last at, instances that are no tie) over the steps recorded whole."""
    s, by = imb.summary, _done(imb)
    if s.get("straggler_rotates"):
        groups = []
        for g in (s.get("stragglers") or [])[:4]:
            mine = by[by["step"].isin(g["steps"]) & (by["straggler"].astype("Float64") == g["rank"])]
            bs = _lower_median(mine["straggler_bs"]) if "straggler_bs" in mine else None
            groups.append(
                phrases["group"].format(
                    rank=g["rank"], steps=_steps_words(g["steps"]), bs="" if bs is None else f" (bs {_num(bs)})"
                )
            )
        more = len(s.get("stragglers") or []) - len(groups)
        return phrases["rotating"].format(groups="; ".join(groups) + (f"; {more} more" if more > 0 else "")), None
    bs, median_bs = straggler_batch(imb, rank)
    led = by[by["straggler"].astype("Float64") == rank]["step"].astype(int).tolist()
    phase = _led_phase(imb, rank, led)
    if bs is None and median_bs is None:
        return phrases["last_at"].format(rank=rank, times_last=last[0], of=last[1], cause=cause), phase
    key = "led_prefill" if phase == "prefill" else "led_bs"
    text = phrases[key].format(rank=rank, led=len(led), steps=len(by), bs=_num(bs), median_bs=_num(median_bs))
    return text + _also(imb, rank, phrases), phase


def _also(imb: Result, rank: int, phrases: dict) -> str:
    """The rank last most often (``summary.straggler``) where it is not the one named and led at least half of the
    steps recorded whole: a persistent straggler is not left unsaid behind one costly step."""
    other = (imb.summary.get("straggler") or {}).get("rank")
    by = _done(imb)
    if other is None or int(other) == rank:
        return ""
    led = int((by["straggler"].astype("Float64") == int(other)).sum())
    if 2 * led < len(by):
        return ""
    bs, _ = straggler_batch(imb, int(other))
    return phrases["also"].format(
        rank=other, led=led, steps=len(by), bs="" if bs is None else f" (bs {_num(bs)} there)"
    )


def _missing(s: dict) -> tuple[str, str]:
    """(what a rank finding's title adds, what its data begins with) where ranks of the world have no trace
    (``summary.missing_ranks``): the imbalance is then a lower bound; ("", "") otherwise."""
    miss = [int(x) for x in (s.get("missing_ranks") or [])]
    if not miss:
        return "", ""
    many = len(miss) > 1
    ranks = ("ranks " if many else "rank ") + shown_ranks(miss)
    title = finding_rules()["rank_phrases"]["missing"].format(
        ranks=ranks, world=s.get("world_size"), verb="have" if many else "has"
    )
    data = (
        f"a lower bound: {ranks} of the world of {s.get('world_size')} ({s.get('world_size_from') or 'unknown'})"
        f" {'have' if many else 'has'} no trace, and a missing rank may be the one the others waited for; "
    )
    return title, data


def _last_data(clear: pd.DataFrame, rank: int, named: list[int], straggler: dict) -> tuple[str, str]:
    """(the data's count of who was last, from the same rows as ``summary.straggler`` (the instances that are no tie
    in the steps recorded whole): the rank the title names (each rank of a rotating straggler), and the summary's
    straggler — the rank last most often — where it is not that one, so that the two never read as a contradiction
    (that second, after what is said of the named rank's batch)."""
    last = clear["last_rank"].astype("Float64")
    n = int(len(clear))
    if len(named) > 1:
        text = (
            "; last at instances that are no tie (of "
            + f"{n}): "
            + ", ".join(f"rank {r} {int((last == r).sum())}" for r in named)
        )
    else:
        text = f"; rank {rank} last at {int((last == rank).sum())} of {n} instances that are no tie"
    s_rank, other = int(straggler["rank"]), ""
    if s_rank not in named or len(named) > 1:
        other = (
            f"; straggler rank {s_rank} (the rank last most often, the summary's): last at"
            f" {straggler['times_last']} of {straggler['of']}"
        )
    return text, other


def _advice_key(cause: str, phase: str | None, bs, median_bs) -> str:
    """The advice that matches the evidence: a prefill where the straggler led is the prefill's advice whatever the
    instances' causes say; a batch cause needs a batch larger than the median rank's."""
    if phase == "prefill":
        return "prefill"
    if cause == "batch" and (bs is None or median_bs is None or bs <= median_bs):
        return "unknown"
    return cause


def rank_findings_of(imb: Result, *, min_ms: float | None = None, min_pct: float | None = None) -> Result:
    """`tracekit findings RUN_DIR`: the imbalance findings of every rank of one run. ``imb`` is what
    ``tracekit.imbalance(RUN_DIR)`` returned. The gain is the mean imbalance per step over the steps recorded whole
    (``summary.imbalance_ns_mean_per_step``); severity is :func:`~.rules.is_major` against the median step wall."""
    if getattr(imb, "command", None) != "imbalance":
        raise UsageError("findings(ranks=…) takes the result of tracekit.imbalance(RUN_DIR)")
    rules = finding_rules()
    min_ms = float(rules["min_ms"]) if min_ms is None else float(min_ms)
    min_pct = float(rules["min_pct"]) if min_pct is None else float(min_pct)
    phrases = rules["rank_phrases"]
    s, t = imb.summary, imb.tables
    paths = sorted({str(export_of(i["path"])) for i in imb.inputs})  # the ranks of one nsys export: that file
    run = shown_text(os.path.commonpath(paths)) if len(paths) > 1 else (shown_text(paths[0]) if paths else "RUN_DIR")
    steps, by, per = t["steps"], _done(imb), t["per_collective"]
    step_ns = _mean_step_ns(steps, by)
    rows, why = [], None
    straggler = s.get("straggler")
    if straggler is None:
        why = (
            "every collective instance ties within the clock alignment's residual: no rank makes the others wait"
            if len(per)
            else "no collective ran on two ranks"
        )
    else:
        # the rank the finding names: the one last in the steps that cost (summary.stragglers, by the imbalance of
        # each step), not the one last most often over every instance (summary.straggler), which may be last by
        # jitter in cheap steps while another's one heavy step cost most
        costly = s.get("stragglers") or []
        rank = int(costly[0]["rank"]) if costly else int(straggler["rank"])
        whole = per[per["step"].isin(by["step"])]
        clear = whole[~whole["tie"].astype(bool)]
        last = (int((clear["last_rank"].astype("Float64") == rank).sum()), int(len(clear)))
        rotating = bool(s.get("straggler_rotates"))
        last_of = set(g["rank"] for g in s.get("stragglers") or []) if rotating else {rank}
        mine = whole[whole["last_rank"].astype("Float64").isin(last_of)]
        causes = mine["cause"].dropna().astype(str).str.split(":").str[0].str.strip()
        cause = causes.mode().iloc[0] if len(causes) else "unknown"
        bs, median_bs = straggler_batch(imb, rank)
        who, phase = _who(imb, rank, last, phrases, cause)
        advice_of = rules["rank_advice"]
        advice = advice_of.get(_advice_key(cause, phase, bs, median_bs), advice_of["unknown"])
        gain = s.get("imbalance_ns_mean_per_step", s.get("imbalance_ns_per_step"))
        pct = f"{100.0 * gain / step_ns:.1f} %" if gain is not None and step_ns else "–"
        left_out = sorted(set(t["by_step"]["step"].astype(int)) - set(by["step"].astype(int)))
        worst = ", ".join(
            f"step {w['step']} {ms_text(w['imbalance_ns'])} (rank {_num(w['straggler'])})"
            for w in s.get("worst_steps") or []
        )
        miss_title, miss_data = _missing(s)
        ev = (
            miss_data
            + f"per step over the {len(by)} step(s) recorded whole, Σ (last − median arrival): mean {ms_text(gain)},"
            f" median {ms_text(s.get('imbalance_ns_per_step'))}; worst {worst or '–'}; mean step {ms_text(step_ns)}"
            + (f"; partial step(s) {steps_text(left_out)} left out" if left_out else "")
            + _last_data(clear, rank, sorted(last_of) if rotating else [rank], straggler)[0]
            + (
                ""
                if bs is None and median_bs is None
                else f", its batch {_num(bs)} against a median of {_num(median_bs)}"
            )
            + (f" ({phase} where it was last)" if phase and phase != "unknown" else "")
            + _last_data(clear, rank, sorted(last_of) if rotating else [rank], straggler)[1]
            + "; causes of the lateness: "
            + (", ".join(f"{c} {n}" for c, n in causes.value_counts().items()) or "none named")
        )
        if gain:  # DP imbalance where the steps say each rank's batch; else (a training run) the ranks' imbalance
            kind = "rank_imbalance" if bs is not None or median_bs is not None else "rank_imbalance_unbatched"
            rows.append(
                finding(
                    None,
                    kind,
                    "ranks",
                    gain_ns=float(gain),
                    step_ns=step_ns,
                    evidence=ev,
                    words=words(
                        kind,
                        gain=(
                            phrases["at_least"].format(gain=f"{ms_text(gain)} per step")
                            if miss_title
                            else f"{ms_text(gain)} per step"
                        ),
                        pct=pct,
                        worst=_worst(s, phrases),
                        who=who + miss_title,
                        rank=rank,
                        bs=_num(bs),
                        median_bs=_num(median_bs),
                        run=run,
                        advice=advice,
                        times_last=last[0],
                        of=last[1],
                        cause=cause,
                    ),
                )
            )
        else:  # no time to give: who is last, and why
            rows.append(
                finding(
                    None,
                    "rank_straggler",
                    "ranks",
                    step_ns=step_ns,
                    evidence=ev,
                    words=words(
                        "rank_straggler",
                        rank=rank,
                        times_last=straggler["times_last"],
                        of=straggler["of"],
                        cause=cause + miss_title.replace(";", ",", 1) if miss_title else cause,
                        run=run,
                        advice=advice,
                    ),
                )
            )
    table = rank_findings(rows, min_ms=min_ms, min_gib=float(rules["min_gib"]), min_pct=min_pct)
    major = table[~table["minor"]]
    summary = {
        "step_ms": step_ns / 1e6,
        "findings": int(len(table)),
        "major": int(len(major)),
        "minor": int(table["minor"].sum()),
        "total_gain_ms": float(np.nansum(table["gain_ms_per_step"].to_numpy(dtype=float, na_value=np.nan))),
        "top": str(table["title"].iloc[0]) if len(table) else None,
        "ranks": s.get("ranks"),
        "steps": s.get("steps"),
        "clock": s.get("clock"),
        **{k: s[k] for k in ("world_size", "missing_ranks", "imbalance_is_lower_bound") if k in s},  # issue 40
    }
    status = pd.DataFrame([{"source": "ranks", "ran": True, "findings": len(rows), "reason": why}])
    return Result(
        command="findings",
        inputs=list(imb.inputs),
        params={**imb.params, "min_ms": min_ms, "min_pct": min_pct, "ranks": True},
        summary=summary,
        tables={"findings": table, "sources": status},
        warnings=list(imb.warnings) + ([why] if why else []),
    )


def run_inputs(run, ranks: Result | None, steps):
    """(the trace a run's ``report`` and ``findings`` analyse — its reference rank's, the lowest rank id, loaded; on
    its GPU where it is one process of an export of several —, the run's imbalance: ``ranks`` when given, else
    computed here, the files one after another) of a ``tracekit.load_run`` Run."""
    from ...ingest import load
    from ..fleet.multirank.api import imbalance_in_process, reference_files

    imb = ranks if ranks is not None else imbalance_in_process(run, steps=steps)
    dev, ref = run.reference_device(), load(reference_files(run, imb)[0])
    return (ref if dev is None else ref.on_device(dev)), imb


def _same_file(a, b) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return str(a) == str(b)


def analysed_rank(trace, imb: Result) -> int | None:
    """The rank of the run ``imb`` whose trace ``trace`` is: where ``trace`` is one GPU of an export of several
    processes (``--device N``, ``Trace.on_device``), the rank that ran on that GPU of that export; else the
    reference rank (the lowest rank id), whose trace a run's report and findings analyse."""
    ref = imb.summary.get("reference_rank")
    dev = trace.meta.get("device") if trace is not None else None
    if dev is None:
        return ref
    for i in imb.inputs:
        p = str(i.get("path"))
        if i.get("rank") is not None and is_part(p) and _same_file(export_of(p), trace.path):
            if device_of_part(p) == int(dev):
                return int(i["rank"])
    return ref


def merge_findings(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Two findings tables (tracekit.findings/1 rows) as one, in the findings' order — time findings by gain, then
    memory by GiB, then those without a number, minor ones last — ranks renumbered from 1."""
    if not len(b):
        return a
    if not len(a):
        return b
    df = pd.concat([a, b], ignore_index=True)
    ms = df["gain_ms_per_step"].astype("Float64")
    gib = df["gain_gib"].astype("Float64")
    group = np.where(ms.notna() & gib.isna(), 0, np.where(gib.notna(), 1, 2))
    value = np.where(group == 0, ms.fillna(0).to_numpy(float), np.where(group == 1, gib.fillna(0).to_numpy(float), 0.0))
    key = pd.DataFrame(
        {
            "minor": df["minor"].astype(bool).to_numpy(),
            "group": group,
            "neg": -value,
            "kind": df["kind"].astype(str).to_numpy(),
            "title": df["title"].astype(str).to_numpy(),
        }
    )
    order = key.sort_values(["minor", "group", "neg", "kind", "title"], kind="stable").index
    df = df.loc[order].reset_index(drop=True)
    df["rank"] = np.arange(1, len(df) + 1, dtype=np.int64)
    return df


def run_findings(
    trace_fnd: Result,
    imb: Result,
    *,
    rank: int | None = None,
    min_ms: float | None = None,
    min_pct: float | None = None,
) -> Result:
    """The findings of a run (issue 40): the analysed rank's own findings (``trace_fnd``, ``findings`` of its trace)
    and the rank findings of ``imb`` (:func:`rank_findings_of`), ranked together (:func:`merge_findings`) — what
    `tracekit findings RUN` prints and what `tracekit report RUN` lists, one function for both. ``rank``: the rank
    whose trace ``trace_fnd`` is of (:func:`analysed_rank`; default the reference rank). The summary is the rank
    findings' (the run's steps, clock, world) with the counts, the top finding and the total gain of the merged
    list, and ``rank``, the analysed rank."""
    rf = rank_findings_of(imb, min_ms=min_ms, min_pct=min_pct)
    table = merge_findings(trace_fnd.tables["findings"], rf.tables["findings"])
    ts, s = trace_fnd.summary, dict(rf.summary)
    major = table[~table["minor"].astype(bool)]
    gains = table["gain_ms_per_step"].to_numpy(dtype=float, na_value=np.nan)
    total = float(np.nansum(gains)) if (~np.isnan(gains)).any() else None
    step_ms = max([v for v in (ts.get("step_ms"), s.get("step_ms")) if v], default=None)
    s.update(
        {
            "findings": int(len(table)),
            "major": int(len(major)),
            "minor": int(len(table) - len(major)),
            # the gains overlap: their sum is an upper bound, capped at the step (docs/findings.md)
            "total_gain_ms": total if total is None or step_ms is None else min(total, step_ms),
            "top": str(table["title"].iloc[0]) if len(table) else None,
            "rank": imb.summary.get("reference_rank") if rank is None else int(rank),
            "reference_rank": imb.summary.get("reference_rank"),
        }
    )
    for k in ("total_gain_gib", "findings_without_gain", "marker", "trustworthy", "hw"):  # the trace's, added
        if k in ts and k not in s:
            s[k] = ts[k]
    sources = pd.concat([trace_fnd.tables["sources"], rf.tables["sources"]], ignore_index=True)
    inputs = list(imb.inputs) + list(trace_fnd.inputs[1:])  # every rank's file, then the launch log
    params = {**trace_fnd.params, **rf.params}
    warnings = list(dict.fromkeys(list(trace_fnd.warnings) + list(rf.warnings)))
    return Result(
        command="findings",
        inputs=inputs,
        params=params,
        summary=s,
        tables={"findings": table, "sources": sources},
        warnings=warnings,
    )
