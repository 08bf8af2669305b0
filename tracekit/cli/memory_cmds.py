"""Commands over sglang launch logs: log (the records), ledger (memory), capacity (KV tokens) and whatif (the ledger
replayed with changed launch settings, docs/whatif.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from .common import app
from .options import OUTPUT, Output

LogArg = Annotated[
    Path,
    typer.Argument(
        help="sglang launch log (plain, .gz or .zst; several ranks interleaved is fine).", show_default=False
    ),
]
RankOpt = Annotated[
    str | None,
    typer.Option(
        "--rank", help="Rank tags, e.g. 'DP0 TP0' or TP1 (all given tags must match; default: the lowest present)."
    ),
]
LaunchOpt = Annotated[
    int | None,
    typer.Option(
        "--launch", min=1, help="Which launch of a log a restart appended to (1-based; default: the last complete one)."
    ),
]
PatternsOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--patterns",
        help="Extra pattern file or folder (repeatable), tried before the built-in sets; see docs/ledger.md.",
    ),
]


@app.command(name="log")
def log_cmd(
    log: LogArg,
    rank: Annotated[
        str | None,
        typer.Option(
            "--rank",
            help="Keep only this rank's records, e.g. 'DP0 TP0' (all given tags must match; default: every rank).",
        ),
    ] = None,
    kind: Annotated[list[str] | None, typer.Option("--kind", help="Keep records of this kind (repeatable).")] = None,
    patterns: PatternsOpt = None,
    output: Output = OUTPUT,
) -> None:
    """The records tracekit recognises in an sglang launch log.

    Each record with its line and rank tags; also the memory lines that no pattern knows."""
    from ..analyses.memory.launch_log import log_records
    from ..ingest.sglang_log import read_log

    output.write(log_records(read_log(log, patterns=patterns or ()), rank=rank, kinds=kind))


@app.command(name="ledger")
def ledger_cmd(
    log: LogArg,
    log2: Annotated[
        Path | None,
        typer.Argument(help="A second launch log, shown side by side (diff = LOG2 − LOG).", show_default=False),
    ] = None,
    rank: RankOpt = None,
    patterns: PatternsOpt = None,
    launch: LaunchOpt = None,
    output: Output = OUTPUT,
) -> None:
    """Where each GPU's memory goes, from a launch log (GiB).

    Free memory at each stage of the launch, the logged allocations, the memory no log line explains, and the
    ledger's rows: weights, CUDA graphs, NCCL, workspace, margin and the state pools (docs/ledger.md)."""
    from ..analyses.memory.launch_log import ledger
    from ..ingest.sglang_log import read_log

    a = read_log(log, patterns=patterns or ())
    b = read_log(log2, patterns=patterns or ()) if log2 is not None else None
    output.write(ledger(a, b, rank=rank, launch=launch, launch_b=launch))


def _count(text: str | None, name: str) -> int | None:
    """``100000``, ``100k``, ``1M``, ``1_000`` → int."""
    from ..analyses.memory.launch_log import OptionError

    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d[\d_,]*(?:\.\d+)?)\s*([kKmM]?)\s*", text)
    if not m:
        raise OptionError(f"{name} {text!r} is not a token count; write e.g. 100000, 100k or 1M")
    value = float(m.group(1).replace("_", "").replace(",", "")) * {"": 1, "k": 1e3, "m": 1e6}[m.group(2).lower()]
    return int(value)


@app.command(name="capacity")
def capacity_cmd(
    log: Annotated[
        Path | None,
        typer.Option("--log", help="Launch log: the KV line's #tokens and size, and tp/pp/dp/dcp from server_args."),
    ] = None,
    rank: RankOpt = None,
    layers: Annotated[int | None, typer.Option("--layers", min=1, help="Layers with a KV cache on a rank.")] = None,
    kv_lora_rank: Annotated[int | None, typer.Option("--kv-lora-rank", min=0, help="MLA latent width.")] = None,
    rope_dim: Annotated[int | None, typer.Option("--rope-dim", min=0, help="MLA rope head dim.")] = None,
    kv_heads: Annotated[int | None, typer.Option("--kv-heads", min=1, help="MHA/GQA KV heads per rank.")] = None,
    head_dim: Annotated[int | None, typer.Option("--head-dim", min=1, help="MHA/GQA head dim.")] = None,
    kv_dtype: Annotated[
        str | None, typer.Option("--kv-dtype", help="KV dtype: fp8, bf16, fp16, fp32 (default: the log's, else bf16).")
    ] = None,
    pool_gib: Annotated[
        float | None, typer.Option("--pool-gib", min=0.0, help="KV pool per rank, GiB (overrides the log's).")
    ] = None,
    ranks: Annotated[
        int | None, typer.Option("--ranks", min=1, help="GPUs in the instance (default: the log's tp × pp, else 1).")
    ] = None,
    dp: Annotated[
        int | None, typer.Option("--dp", min=1, help="DP groups (default: the log's dp_size, else ranks ÷ dcp).")
    ] = None,
    dcp: Annotated[
        int | None, typer.Option("--dcp", min=1, help="Decode context parallel size (default: the log's, else 1).")
    ] = None,
    context: Annotated[
        str | None,
        typer.Option("--context", help="Tokens per request for the maximum concurrency, e.g. 100000 or 100k."),
    ] = None,
    patterns: PatternsOpt = None,
    launch: LaunchOpt = None,
    output: Output = OUTPUT,
) -> None:
    """How many KV-cache tokens fit, and how many requests at once.

    KV bytes per token; tokens per rank, per DP group (× dcp) and per instance; with --context, the maximum
    concurrency."""
    from ..analyses.memory.capacity import ModelDims, capacity
    from ..ingest.sglang_log import read_log

    parsed = read_log(log, patterns=patterns or ()) if log is not None else None
    dims = ModelDims(layers=layers, kv_lora_rank=kv_lora_rank, rope_dim=rope_dim, kv_heads=kv_heads, head_dim=head_dim)
    res = capacity(
        log=parsed,
        rank=rank,
        dims=dims,
        kv_dtype=kv_dtype,
        pool_gib=pool_gib,
        ranks=ranks,
        dp=dp,
        dcp=dcp,
        context=_count(context, "--context"),
        launch=launch,
    )
    output.write(res)


SetOpt = Annotated[
    list[str],
    typer.Option(
        "--set",
        help="NAME=VALUE, repeatable (the API's `settings`): max_running_requests, "
        "disaggregation_decode_extra_slots, mem_fraction_static, cuda_graph_bs (1,2,4 or [1, 2, 4]), "
        "cuda_graph_max_bs, deepep_max_dispatch_tokens (= SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK), "
        "speculative_num_draft_tokens; dashes or underscores, a leading -- is fine.",
    ),
]
DimOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--dim",
        help="NAME=N, repeatable (the API's `dims`): hidden_size, num_experts, num_max_dispatch_tokens_per_rank "
        "— DeepEP's layout formula when the log has no DeepEP buffer line.",
    ),
]


@app.command(name="whatif")
def whatif_cmd(
    log: LogArg,
    settings: SetOpt,
    rank: RankOpt = None,
    patterns: PatternsOpt = None,
    launch: LaunchOpt = None,
    dims: DimOpt = None,
    output: Output = OUTPUT,
) -> None:
    """What changed launch settings would do to memory.

    Replays a launch log's memory ledger with the --set values: what moves into the KV pool, and the margin
    left."""
    from ..analyses.memory.whatif import whatif
    from ..ingest.sglang_log import read_log

    res = whatif(read_log(log, patterns=patterns or ()), settings=settings, rank=rank, launch=launch, dims=dims or None)
    output.write(res)
