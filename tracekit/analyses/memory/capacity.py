"""A12 — KV capacity: bytes per token, tokens per rank, per DP group (× dcp) and per instance, and the maximum
concurrency at a context length; from a launch log or from model dimensions (docs/ledger.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


from ...errors import InputError, MissingDataError
from ...gpu_specs import dtype_bytes as hw_dtype_bytes
from ...ingest.sglang_log import Grammar, Record, SglangLog, grammar_default, rank_label
from ...result import Result
from .ledger_engine import (
    GIB,
    OptionError,
    frame,
    global_record,
    one_launch,
    rank_view,
    resolve_rank,
    round_gib,
    server_arg,
)
from .ledger_rows import rank_ledger
from ..steps.keywords import options_as_objects


@dataclass(frozen=True)
class ModelDims:
    """Per-rank KV geometry: MLA (kv_lora_rank + rope_dim) or MHA/GQA (kv_heads × head_dim × 2)."""

    layers: int | None = None
    kv_lora_rank: int | None = None
    rope_dim: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None

    def given(self) -> bool:
        return any(v is not None for v in (self.layers, self.kv_lora_rank, self.rope_dim, self.kv_heads, self.head_dim))


def dtype_bytes(name: str, g: Grammar | None = None) -> float:
    """Bytes per KV element (the one dtype table, tracekit/data/dtypes.json)."""
    return hw_dtype_bytes(name, "KV ", error=OptionError)


def bytes_per_token(dims: ModelDims, nbytes: float) -> tuple[float, str]:
    """MLA: layers × (kv_lora_rank + rope_dim) × bytes; MHA/GQA: layers × kv_heads × head_dim × 2 × bytes."""
    if dims.layers is None:
        raise OptionError("--layers is needed to compute bytes per token from the model's dimensions")
    if dims.kv_lora_rank is not None or dims.rope_dim is not None:
        if dims.kv_lora_rank is None or dims.rope_dim is None:
            raise OptionError("an MLA model needs both --kv-lora-rank and --rope-dim")
        return dims.layers * (dims.kv_lora_rank + dims.rope_dim) * nbytes, "mla"
    if dims.kv_heads is None or dims.head_dim is None:
        raise OptionError("pass --kv-lora-rank and --rope-dim (MLA) or --kv-heads and --head-dim (MHA/GQA)")
    return dims.layers * dims.kv_heads * dims.head_dim * 2 * nbytes, "mha"


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


@options_as_objects
def capacity(
    *,
    log: SglangLog | None = None,
    rank: str | None = None,
    dims: ModelDims = ModelDims(),
    kv_dtype: str | None = None,
    pool_gib: float | None = None,
    ranks: int | None = None,
    dp: int | None = None,
    dcp: int | None = None,
    context: int | None = None,
    launch: int | None = None,
) -> Result:
    """``tracekit capacity``: KV bytes per token, tokens per rank, per DP group (× dcp) and per instance (× dp),
    and the maximum concurrency at ``context`` tokens per request.

    From a log, tokens per rank is the target ``KV Cache is allocated`` #tokens of the rank (sglang's
    max_total_num_tokens is per rank), and ranks / dp / dcp come from server_args; options override. Without a
    log, tokens per rank = ⌊pool × 2^30 ÷ bytes per token⌋ and dp defaults to ranks ÷ dcp (DP attention with
    attention TP 1)."""
    launch_warnings: list[str] = []
    if log is not None:
        log, launch_warnings = one_launch(log, launch)
    g = (log.grammar if log is not None else None) or grammar_default()
    sa_names = g.common.get("server_args", {})
    info, args, kv_rec, warnings = _from_log(log, rank, pool_gib)
    warnings = launch_warnings + warnings
    dtype_name = _kv_dtype(kv_dtype, kv_rec, log, args, sa_names)
    pool, log_pool = _checked_pool(log, kv_rec, pool_gib)
    bpt, bpt_source, nbytes = _token_bytes(dims, kv_rec, log_pool, dtype_name, g)
    if not bpt >= 1:
        raise InputError(
            f"{bpt:g} bytes per token: more tokens than the pool's bytes allow; check the log's KV line"
            " or the model's dimensions"
        )
    if pool_gib is None and kv_rec is not None:
        tokens_rank, tokens_source = int(kv_rec.fields["tokens"]), f"log line {kv_rec.line}: #tokens"
    else:
        tokens_rank, tokens_source = math.floor(pool * GIB / bpt), "pool ÷ bytes per token"
    n_ranks, n_dp, n_dcp = _parallelism(args, sa_names, ranks, dp, dcp)
    attn_tp = n_ranks // (n_dp * n_dcp)
    tokens_dp = tokens_rank * n_dcp
    tokens_inst = tokens_dp * n_dp
    pool_inst = pool * n_ranks
    per_dp: list[tuple[int, float]] | None = None  # each DP group's own (tokens per rank, pool), when the log has all
    if log is not None and pool_gib is None:
        per_dp, more = _dp_readings(log, n_ranks, n_dp)
        warnings += more
        if per_dp is not None:
            tokens_inst = sum(t for t, _ in per_dp) * n_dcp
            pool_inst = sum(p for _, p in per_dp) * attn_tp * n_dcp
    summary: dict[str, Any] = {
        "bytes_per_token": _num(bpt),
        "bytes_per_token_source": bpt_source,
        "kv_dtype": dtype_name,
        "dtype_bytes": _num(nbytes) if nbytes is not None else None,
        "pool_gib": round_gib(pool),
        "tokens_per_rank": tokens_rank,
        "tokens_per_rank_source": tokens_source,
        "ranks": n_ranks,
        "dp": n_dp,
        "dcp": n_dcp,
        "attn_tp": attn_tp,
        "tokens_per_dp": tokens_dp,
        "tokens_per_instance": tokens_inst,
        "context": context,
        "max_concurrency_per_dp": None,
        "max_concurrency": None,
        "tokens_per_instance_source": (
            "each DP rank's own #tokens" if per_dp is not None else "tokens per DP group × dp"
        ),
        **info,
    }
    if context is not None:
        summary["max_concurrency_per_dp"], summary["max_concurrency"] = _concurrency(
            context, tokens_dp, per_dp, n_dp, n_dcp
        )
    per_request = None if context is None else tokens_rank // context
    levels = [
        {
            "level": "rank",
            "gpus": 1,
            "kv_gib": round_gib(pool),
            "tokens": tokens_rank,
            "max_concurrency": per_request if n_dcp == 1 else None,
        },  # under DCP a request spans the group's ranks
        {
            "level": "dp_group",
            "gpus": attn_tp * n_dcp,
            "kv_gib": round_gib(pool * attn_tp * n_dcp),
            "tokens": tokens_dp,
            "max_concurrency": summary["max_concurrency_per_dp"],
        },
        {
            "level": "instance",
            "gpus": n_ranks,
            "kv_gib": round_gib(pool_inst),
            "tokens": tokens_inst,
            "max_concurrency": summary["max_concurrency"],
        },
    ]
    params = {
        "layers": dims.layers,
        "kv_lora_rank": dims.kv_lora_rank,
        "rope_dim": dims.rope_dim,
        "kv_heads": dims.kv_heads,
        "head_dim": dims.head_dim,
        "kv_dtype": kv_dtype,
        "pool_gib": pool_gib,
        "ranks": ranks,
        "dp": dp,
        "dcp": dcp,
        "context": context,
        "rank": rank,
        "launch": launch,
    }
    return Result(
        command="capacity",
        inputs=[{"path": log.path}] if log is not None else [],
        params=params,
        summary=summary,
        tables={"levels": frame(levels, ["level", "gpus", "kv_gib", "tokens", "max_concurrency"])},
        warnings=warnings + (list(log.warnings) if log is not None else []),
    )


def _checked_pool(log: SglangLog | None, kv_rec: Record | None, pool_gib: float | None) -> tuple[float, float | None]:
    """(the KV pool per rank in GiB — ``pool_gib``, else the log's KV line —, the log's own pool): a damaged KV line
    or a pool no GPU has is refused with one sentence."""
    log_pool = None
    if kv_rec is not None:
        log_pool = _pool_of(kv_rec)
        if kv_rec.fields.get("rejected") and pool_gib is None:
            bad = "; ".join(f"{k} = {v:g} is {why}" for k, (v, why) in kv_rec.fields["rejected"].items())
            raise InputError(
                f"{log.path} line {kv_rec.line}: the KV size is not one a GPU can have ({bad}); the line is"
                " damaged: pass --pool-gib with the model's dimensions instead"
            )
    pool = pool_gib if pool_gib is not None else log_pool
    if pool is None:
        raise OptionError(
            "pass --log LOG, or --pool-gib with the model's dimensions (--layers and --kv-lora-rank/"
            "--rope-dim or --kv-heads/--head-dim)"
        )
    if not pool > 0 or not math.isfinite(pool):
        raise InputError(
            f"the KV pool is {pool} GiB ({'--pool-gib' if pool_gib is not None else 'from the log'}),"
            " which no GPU has; check the value"
        )
    if kv_rec is not None and not 0 < float(kv_rec.fields.get("tokens") or 1) < 1e15:
        raise InputError(
            f"{log.path} line {kv_rec.line}: #tokens {kv_rec.fields.get('tokens')} is not a token count a"
            " GPU can hold; the line is damaged"
        )
    return pool, log_pool


def _concurrency(
    context: int, tokens_dp: int, per_dp: list[tuple[int, float]] | None, n_dp: int, n_dcp: int
) -> tuple[int, int]:
    """(requests of ``context`` tokens a DP group holds at once, the instance holds at once): by each DP group's
    own tokens when the log gave them all."""
    if context < 1:
        raise OptionError("--context must be at least 1 token")
    return tokens_dp // context, (
        sum(t * n_dcp // context for t, _ in per_dp) if per_dp is not None else (tokens_dp // context) * n_dp
    )


def _from_log(log: SglangLog | None, rank: str | None, pool_gib: float | None):
    """(summary entries, server args, the rank's KV allocation record, warnings) of a launch log."""
    if log is None:
        return {}, {}, None, []
    warnings: list[str] = []
    rk = resolve_rank(log, rank)
    led = rank_ledger(log, rk)
    kv_rec = next((r for r in rank_view(log, rk) if r.kind == "kv_alloc"), None)
    sargs = global_record(log, "server_args", rk)
    args = sargs.fields.get("args", {}) if sargs else {}
    summ = global_record(log, "summary", rk)
    info: dict[str, Any] = {"log_rank": rank_label(rk)}
    if summ is not None:
        info.update(
            {
                k: summ.fields[k]
                for k in ("max_total_num_tokens", "max_running_requests", "context_len")
                if k in summ.fields
            }
        )
    if kv_rec is None and pool_gib is None:
        raise MissingDataError(
            f"{log.path} has no 'KV Cache is allocated' line for {rank_label(rk)}; pass "
            "--pool-gib with the model's dimensions instead"
        )
    if not led.complete:
        warnings.append(f"{log.path}: the launch is incomplete ({led.incomplete_reason})")
    return info, args, kv_rec, warnings


def _pool_of(rec) -> float | None:
    """The KV pool (GiB) a ``KV Cache is allocated`` record gives: KV size, or K size + V size."""
    f = rec.fields
    if "kv_gib" in f:
        return f["kv_gib"]
    return f["k_gib"] + f["v_gib"] if "k_gib" in f and "v_gib" in f else None


def _dp_readings(log: SglangLog, n_ranks: int, n_dp: int) -> tuple[list[tuple[int, float]] | None, list[str]]:
    """When the ranks of the log disagree on the target KV pool: (each DP group's (tokens, pool) when every DP group
    of the instance logged one, else None; a warning naming the ranks and their values). A rank's DP group is
    sglang's ``tp_rank // (tp_size // dp_size)`` (its DP tag when it has no TP tag); a DP group's ranks share their
    tokens (sglang keeps the smallest), so each group counts with its smallest reading."""
    readings = []
    for rk in log.ranks_present():
        if not rk:
            continue
        rec = next((r for r in rank_view(log, rk) if r.kind == "kv_alloc"), None)
        if rec is not None and isinstance(rec.fields.get("tokens"), int) and _pool_of(rec) is not None:
            readings.append((rk, rec.fields["tokens"], _pool_of(rec), rec.line))
    if len({(t, p) for _, t, p, _ in readings}) < 2:
        return None, []
    shown = "; ".join(f"{rank_label(rk)}: {t:,} tokens, {p:g} GiB (line {ln})" for rk, t, p, ln in readings[:8])
    shown += f"; and {len(readings) - 8} more" if len(readings) > 8 else ""
    groups: dict[int, list[tuple[int, float]]] = {}
    for rk, t, p, _ in readings:
        dp_group = rk["TP"] // max(1, n_ranks // n_dp) if "TP" in rk else rk.get("DP", 0)
        groups.setdefault(dp_group, []).append((t, p))
    if n_dp > 1 and sorted(groups) == list(range(n_dp)):
        per_dp = [min(groups[d]) for d in range(n_dp)]
        return per_dp, [
            f"{log.path}: the ranks disagree on the KV pool ({shown}); the per-instance tokens and pool"
            " add each DP group's own reading"
        ]
    lo, hi = min(t for _, t, _, _ in readings), max(t for _, t, _, _ in readings)
    return None, [
        f"{log.path}: the ranks disagree on the KV pool ({shown}); the log holds the KV line of"
        f" {len(groups)} of {n_dp} DP group(s), so the per-instance tokens and pool are the chosen rank's"
        f" × {n_dp} and may be off by the spread ({lo:,}–{hi:,} tokens per rank)"
    ]


def _kv_dtype(kv_dtype, kv_rec, log, args, sa_names) -> str:
    """The option, else the KV line's dtype, else the log's kv dtype line or server arg, else bf16."""
    name = kv_dtype
    if name is None and kv_rec is not None and "dtype" in kv_rec.fields:
        name = kv_rec.fields["dtype"]
    if name is None and log is not None:
        kd = next((r for r in log.records if r.kind == "kv_dtype"), None)
        name = kd.fields.get("dtype") if kd else server_arg(args, sa_names.get("kv_dtype", ()))
        if name == "auto":
            name = None
    return name or "bf16"


def _token_bytes(dims: ModelDims, kv_rec, log_pool, dtype_name: str, g):
    """(bytes per token, where it came from, bytes per element or None)."""
    if dims.given():
        nbytes = dtype_bytes(dtype_name, g)
        bpt, layout = bytes_per_token(dims, nbytes)
        return bpt, f"{layout} formula", nbytes
    if kv_rec is not None and kv_rec.fields.get("tokens") and log_pool is not None:
        bpt = round(log_pool * GIB / kv_rec.fields["tokens"])
        try:
            nbytes = dtype_bytes(dtype_name, g)
        except OptionError:
            nbytes = None
        return bpt, "log: KV size ÷ #tokens (sizes are printed to 0.01 GiB)", nbytes
    raise OptionError(
        "pass the model's dimensions (--layers and --kv-lora-rank/--rope-dim or --kv-heads/"
        "--head-dim) to turn --pool-gib into tokens"
    )


def _parallelism(args, sa_names, ranks, dp, dcp) -> tuple[int, int, int]:
    """(ranks, dp, dcp): the options, else the server args, else 1 rank, dp = ranks ÷ dcp."""
    n_dcp = dcp if dcp is not None else int(server_arg(args, sa_names.get("dcp", ())) or 1)
    if ranks is not None:
        n_ranks = ranks
    elif args:
        n_ranks = int(server_arg(args, sa_names.get("tp", ())) or 1) * int(
            server_arg(args, sa_names.get("pp", ())) or 1
        )
    else:
        n_ranks = 1
    if dp is not None:
        n_dp = dp
    elif args and server_arg(args, sa_names.get("dp", ())) is not None:
        n_dp = int(server_arg(args, sa_names.get("dp", ())))
    else:
        n_dp = max(1, n_ranks // n_dcp)
    for name, v in (("--ranks", n_ranks), ("--dp", n_dp), ("--dcp", n_dcp)):
        if v < 1:
            raise OptionError(f"{name} must be at least 1")
    if n_ranks % (n_dp * n_dcp):
        raise OptionError(
            f"{n_ranks} ranks do not divide into dp {n_dp} × dcp {n_dcp} groups; check --ranks, --dp and --dcp"
        )
    return n_ranks, n_dp, n_dcp
