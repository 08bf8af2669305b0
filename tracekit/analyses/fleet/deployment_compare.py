"""A13 — two deployments side by side: step time per instance concurrency, throughput, and where it differs.

Each side is a :class:`Side`: a sweep's tables (``tracekit.fan_out.load_side`` reads an ``analyze`` output or
analyses a trace directory).
Instance concurrency = per-rank (per-DP) bs × dp; est_throughput = bs × dp × accept_len ÷ step time.
A batch size that was not captured as a CUDA graph runs the next captured one (``cuda_graph_bs``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...data import DEFAULT_ACCEPT_LEN  # noqa: F401 - re-exported
from ...result import Result
from ..memory.ledger_engine import global_record

__all__ = [
    "DEFAULT_ACCEPT_LEN",
    "Side",
    "graph_bucket",
    "compare",
    "config_diff",
    "bench_table",
    "accept_len_of",
    "same_point",
]


def accept_len_of(log, label: str) -> tuple[float, str, str | None]:
    """(accept_len, where it came from, a warning or None) for one deployment's launch log (an SglangLog or None):
    the median ``accept len`` of its decode-batch lines; else the study's 3.5 when speculative decoding is on; else 1
    (no speculative decoding); with no log the study's 3.5, said."""
    if log is None:
        return (
            DEFAULT_ACCEPT_LEN,
            "default (no launch log)",
            (
                f"{label}: no launch log, so accept_len is the study's {DEFAULT_ACCEPT_LEN} (speculative decoding assumed);"
                " pass --accept-len, or the logs with --log-a/--log-b"
            ),
        )
    vals = [
        float(r.fields["accept_len"])
        for r in log.records
        if r.kind == "decode_stats" and r.fields.get("accept_len") is not None
    ]
    if vals:
        v = float(pd.Series(vals).median())
        return v, f"log: median accept len of {len(vals)} decode-batch line(s)", None
    rec = global_record(log, "server_args", {})
    args = dict(rec.fields.get("args") or {}) if rec is not None else {}
    algo = args.get("speculative_algorithm")
    if algo not in (None, "", "None", False):
        return (
            DEFAULT_ACCEPT_LEN,
            f"default for speculative decoding ({algo})",
            (
                f"{label}: {log.path} runs speculative decoding ({algo}, {args.get('speculative_num_draft_tokens')} draft"
                f" tokens) but logs no accept length; accept_len is the study's {DEFAULT_ACCEPT_LEN}, pass --accept-len with"
                " the measured value"
            ),
        )
    return (
        1.0,
        "no speculative decoding (log)",
        (f"{label}: {log.path} runs no speculative decoding, so accept_len is 1 (one token per request per step)"),
    )


@dataclass(frozen=True)
class Side:
    label: str
    sweep: pd.DataFrame
    block_types: pd.DataFrame
    exposure_types: pd.DataFrame
    dp: int
    graph_bs: tuple[int, ...] = ()
    accept_len: float | None = None  # this side's own (from its log); None: the comparison's
    accept_len_source: str = "option"


def graph_bucket(bs: int, captured: tuple[int, ...]) -> int | None:
    """The captured CUDA-graph batch size a bs runs (the smallest captured ≥ bs); None if none is."""
    if not captured:
        return bs
    bigger = [c for c in captured if c >= bs]
    return min(bigger) if bigger else None


def _steps(side: Side, accept_len: float) -> pd.DataFrame:
    # one row per operating point: a point analysed twice (two traces of one bs) counts once, the first
    accept_len = side.accept_len if side.accept_len is not None else accept_len
    s = side.sweep.drop_duplicates(["bs", "context"], keep="first")
    wall_ms = s["median_wall_ns"].astype(float) / 1e6
    out = pd.DataFrame(
        {
            "deployment": side.label,
            "bs": s["bs"],
            "context": s["context"],
            "dp": side.dp,
            "concurrency": s["bs"] * side.dp,
            "graph_bs": [graph_bucket(int(b), side.graph_bs) if pd.notna(b) else None for b in s["bs"]],
            "median_wall_ns": s["median_wall_ns"],
            "median_busy_ns": s["median_busy_ns"],
            "median_ag_only_ns": s["median_ag_only_ns"],
            "median_idle_ns": s["median_idle_ns"],
            "median_exposed_ns": s["median_exposed_ns"],
            "accept_len": accept_len,
            "est_throughput_tok_s": s["bs"] * side.dp * accept_len / (wall_ms / 1000.0),
        }
    )
    return out


def compare(
    a: Side,
    b: Side,
    *,
    accept_len: float = DEFAULT_ACCEPT_LEN,
    bench: pd.DataFrame | None = None,
    config: pd.DataFrame | None = None,
    ledger: pd.DataFrame | None = None,
) -> Result:
    """`tracekit compare`: per instance concurrency, B against A."""
    sa, sb = _steps(a, accept_len), _steps(b, accept_len)
    steps = pd.concat([sa, sb], ignore_index=True)
    keys = ["concurrency", "context"]
    # a point with no batch size has no instance concurrency: a row of its side, matched with nothing (said below);
    # a point with no context matches the other side's point with none (a merge pairs missing keys)
    m = sa[sa["concurrency"].notna()].merge(sb[sb["concurrency"].notna()], on=keys, suffixes=("_a", "_b"))
    matched = pd.DataFrame(
        {
            "concurrency": m["concurrency"],
            "context": m["context"],
            "bs_a": m["bs_a"],
            "bs_b": m["bs_b"],
            "wall_ns_a": m["median_wall_ns_a"],
            "wall_ns_b": m["median_wall_ns_b"],
            "wall_ratio_b_over_a": m["median_wall_ns_b"] / m["median_wall_ns_a"],
            "throughput_ratio_b_over_a": m["est_throughput_tok_s_b"] / m["est_throughput_tok_s_a"],
        }
    )
    parts = []
    for part in ("wall", "busy", "ag_only", "idle", "exposed"):
        col = f"median_{part}_ns"
        parts.append(
            pd.DataFrame(
                {
                    "concurrency": m["concurrency"],
                    "context": m["context"],
                    "part": part,
                    "a_ns": m[f"{col}_a"],
                    "b_ns": m[f"{col}_b"],
                    "diff_ns": m[f"{col}_b"] - m[f"{col}_a"],
                }
            )
        )
    parts_df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    blocks = _block_diff(a, b, m)
    tables = {"steps": steps, "matched": matched, "parts": parts_df, "block_types": blocks}
    if bench is not None and not bench.empty:
        bt = bench.copy()
        bt["est_throughput_tok_s"] = bt["concurrency"].astype(float) * accept_len / (bt["step_time_ms"] / 1000.0)
        tables["bench"] = bt
    if config is not None:
        tables["config"] = config
    if ledger is not None:
        tables["ledger"] = ledger
    summary = {
        "a": a.label,
        "b": b.label,
        "accept_len": accept_len,
        "accept_len_a": a.accept_len if a.accept_len is not None else accept_len,
        "accept_len_b": b.accept_len if b.accept_len is not None else accept_len,
        "accept_len_source_a": a.accept_len_source,
        "accept_len_source_b": b.accept_len_source,
        "matched_concurrencies": [int(c) for c in matched["concurrency"]],
        "throughput_ratio_b_over_a": {
            str(int(c)): float(r) for c, r in zip(matched["concurrency"], matched["throughput_ratio_b_over_a"])
        },
    }
    warnings = [w for w in map(_unplaced, (a, b)) if w]
    if matched.empty:
        warnings.append(
            f"no instance concurrency is shared by {a.label} ({_known(sa['concurrency'])}) and"
            f" {b.label} ({_known(sb['concurrency'])}); only per-side tables are shown"
        )
    return Result(
        command="compare",
        inputs=[{"label": a.label}, {"label": b.label}],
        params={
            "accept_len": accept_len,
            "dp_a": a.dp,
            "dp_b": b.dp,
            "cuda_graph_bs_a": list(a.graph_bs),
            "cuda_graph_bs_b": list(b.graph_bs),
        },
        summary=summary,
        tables=tables,
        warnings=warnings,
    )


def _known(concurrency: pd.Series) -> list[int]:
    return sorted(int(c) for c in concurrency.dropna())


def _unplaced(side: Side) -> str | None:
    """The warning for a side's points with no batch size (their folder name gave none), or None."""
    gone = side.sweep[side.sweep["bs"].isna()]
    if gone.empty:
        return None
    col = "path" if "path" in gone else "point"
    names = ", ".join(map(str, gone[col].head(5))) + (", …" if len(gone) > 5 else "")
    return (
        f"{side.label}: {len(gone)} point(s) with no batch size ({names}) are left out of the matching (no instance"
        " concurrency); name each point's folder bs<N>_<context>, or pass --point-pattern to analyze"
    )


def same_point(values: pd.Series, value) -> pd.Series:
    """``values == value`` where a missing value (a point with no context) equals a missing one: the rule by which
    compare's merge pairs the points, for looking a matched point up again."""
    return values.isna() if pd.isna(value) else values == value


def _block_diff(a: Side, b: Side, matched: pd.DataFrame) -> pd.DataFrame:
    cols = ["concurrency", "block_type", "a_ns", "b_ns", "diff_ns"]
    if a.block_types.empty or b.block_types.empty or matched.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for _, r in matched.iterrows():  # one row per shared concurrency: a handful
        ta = a.block_types[a.block_types["bs"] == r["bs_a"]].set_index("block_type")["median_kernel_ns"]
        tb = b.block_types[b.block_types["bs"] == r["bs_b"]].set_index("block_type")["median_kernel_ns"]
        for t in sorted(set(ta.index) | set(tb.index)):
            va, vb = ta.get(t, 0), tb.get(t, 0)
            rows.append(
                {"concurrency": int(r["concurrency"]), "block_type": t, "a_ns": va, "b_ns": vb, "diff_ns": vb - va}
            )
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------------------- launch configuration


def config_diff(a: dict[str, str], b: dict[str, str]) -> pd.DataFrame:
    keys = sorted(set(a) | set(b))
    rows = [{"key": k, "a": a.get(k), "b": b.get(k)} for k in keys if a.get(k) != b.get(k)]
    return pd.DataFrame(rows, columns=["key", "a", "b"])


def bench_table(df: pd.DataFrame, *, accept_len: float = DEFAULT_ACCEPT_LEN) -> tuple[pd.DataFrame, list[str]]:
    """Benchmark records (``tracekit.ingest.bench.read_bench``) with est_throughput, sorted for people, and the
    warnings: a record with a step time or a concurrency that is not positive is flagged (``valid`` false, no
    throughput), never turned into a number."""
    df = df.copy()
    conc = pd.to_numeric(df["concurrency"], errors="coerce").astype(float)
    step = pd.to_numeric(df["step_time_ms"], errors="coerce").astype(float)
    bad = ((conc <= 0) | (step <= 0)).fillna(False).to_numpy(dtype=bool)
    df["valid"] = ~bad
    df["est_throughput_tok_s"] = (conc * accept_len / (step / 1000.0)).where(~bad)
    warnings = list(df.attrs.get("warnings", []))  # read_bench's: text in number columns, named by line
    if bad.any():
        where = ", ".join(
            f"{s} ({d})" for s, d in df.loc[bad, ["source", "deployment"]].head(5).itertuples(index=False)
        )
        warnings.append(
            f"{int(bad.sum())} benchmark record(s) have a step time or concurrency that is not positive"
            f" ({where}); they are flagged valid=false and get no throughput"
        )
    return df.sort_values(["deployment", "context", "concurrency"], kind="stable"), warnings
