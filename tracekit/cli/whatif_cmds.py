"""The memory what-if command: replay a launch log's ledger with changed launch parameters (docs/whatif.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import Fmt, FormatOpt, OutOpt, TableOpt, _output, app
from .log_cmds import LaunchOpt, LogArg, PatternsOpt, RankOpt

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
    format: FormatOpt = Fmt.table,
    out: OutOpt = None,
    table: TableOpt = None,
) -> None:
    """What changed launch settings would do to memory.

    Replays a launch log's memory ledger with the --set values: what moves into the KV pool, and the margin
    left."""
    from ..analyses.memory.whatif import whatif
    from ..ingest.sglang_log import read_log

    res = whatif(read_log(log, patterns=patterns or ()), settings=settings, rank=rank, launch=launch, dims=dims or None)
    _output(res, format, out, table)
