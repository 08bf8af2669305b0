"""Commands over deployments and runs: analyze (a sweep), compare (two deployments), bench, ranks (the rank map),
imbalance (the ranks of one run)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..data import DEFAULT_ACCEPT_LEN, DEFAULT_POINT_PATTERN
from .common import AgSizeOpt, AnnotationOpt, GroupOpt, ag_opts, app, show_progress
from .common import Fmt
from .options import NO_CACHE, OUTPUT, PRINTED, RANK_STEP_FLAGS, STEP_FLAGS, CacheFlags, Output, StepFlags
from .options import WorldSizeOpt

RankOpt = Annotated[
    Optional[str],
    typer.Option(
        "--rank", help="Which rank's file to use where a run has several (sglang tags, e.g. TP-0, DP-1-TP-9)."
    ),
]
JobsOpt = Annotated[
    Optional[int], typer.Option("--jobs", "-j", min=1, help="Worker processes (default: min(cores, traces)).")
]
DaskOpt = Annotated[Optional[str], typer.Option("--dask", help="Run the per-trace work on this Dask scheduler.")]
DaskTimeoutOpt = Annotated[
    Optional[float],
    typer.Option("--dask-timeout", min=0.001, help="Seconds to wait for the --dask scheduler to answer (default 10)."),
]


def _graph_bs(text: Optional[str]) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(x) for x in text.strip("[]").replace(" ", ",").split(",") if x)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a list of batch sizes like 1,2,4,8,16,24") from None


@app.command(name="analyze")
def analyze_cmd(
    directory: Annotated[
        Path,
        typer.Argument(help="A trace directory (one subdirectory or file per operating point, e.g. d_bs16_100k/)."),
    ],
    annotation: AnnotationOpt = None,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Write every table (parquet and JSON) and a manifest to this directory."),
    ] = None,
    rank: RankOpt = "TP-0",
    point_pattern: Annotated[
        str, typer.Option("--point-pattern", help="Regex with groups bs and ctx.")
    ] = DEFAULT_POINT_PATTERN,
    step_flags: StepFlags = STEP_FLAGS,
    group_size: GroupOpt = None,
    ag_size: AgSizeOpt = None,
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    dask_timeout: DaskTimeoutOpt = None,
    cache: CacheFlags = NO_CACHE,
    output: Output = PRINTED,
) -> None:
    """A sweep: the analyses at every point of a directory.

    Per operating point (batch size, context): step walls, decomposition, block types, exposure and AllGather
    bytes."""
    from ..ingest.discover import discover
    from ..render.files import check_dir_target
    from ..render.outdir import write_outputs
    from ..fan_out import analyze, default_jobs

    if out is not None:
        check_dir_target(out, "analyze output")  # before the work
    n = len(discover(directory, point_pattern=point_pattern, rank=rank))
    kwargs = dict(
        annotation=annotation,
        rank=rank,
        point_pattern=point_pattern,
        jobs=jobs or default_jobs(n),
        dask=dask,
        dask_timeout=dask_timeout,
        cache=cache.cache,
        ag=ag_opts(group_size, ag_size, None),
        steps=step_flags.options(annotation),
    )
    if show_progress() and n > 1:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress(
            "analyzing",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task("traces", total=n)
            res = analyze(directory, progress=lambda done, total: bar.update(task, completed=done), **kwargs)
    else:
        res = analyze(directory, **kwargs)
    if out is not None:
        typer.echo(f"wrote {write_outputs(res, out)}", err=True)
        if output.format is Fmt.html:  # the page beside the tables, whose JSON the manifest lists
            dataclasses.replace(output, out=out / "analyze.html").write(res)
            return
    output.write(res)


@app.command(name="compare")
def compare_cmd(
    a: Annotated[Path, typer.Argument(help="Deployment A: an analyze output (-o dir) or a trace directory.")],
    b: Annotated[Path, typer.Argument(help="Deployment B, likewise.")],
    dp_a: Annotated[
        Optional[int],
        typer.Option(
            "--dp-a", min=1, help="DP size of A (instance concurrency = bs × dp; default: the log's dp_size, else 1)."
        ),
    ] = None,
    dp_b: Annotated[Optional[int], typer.Option("--dp-b", min=1, help="DP size of B.")] = None,
    annotation_a: Annotated[
        Optional[str],
        typer.Option(
            "--annotation-a",
            help="Annotation of A (a file or a shipped name), used where A's traces"
            " are analysed now (a trace directory) and for the findings.",
        ),
    ] = None,
    annotation_b: Annotated[Optional[str], typer.Option("--annotation-b", help="Annotation of B, likewise.")] = None,
    accept_len: Annotated[
        Optional[float],
        typer.Option(
            "--accept-len",
            min=0.0,
            help="Accepted tokens per request per step, for both (default: each side's from its --log: the logged accept len, else 3.5 with speculative decoding, else 1).",
        ),
    ] = None,
    cuda_graph_bs_a: Annotated[
        Optional[str], typer.Option("--cuda-graph-bs-a", help="Captured batch sizes of A, e.g. 1,2,4,8,16,24.")
    ] = None,
    cuda_graph_bs_b: Annotated[
        Optional[str], typer.Option("--cuda-graph-bs-b", help="Captured batch sizes of B, likewise.")
    ] = None,
    bench: Annotated[Optional[list[Path]], typer.Option("--bench", help="Benchmark result files (repeatable).")] = None,
    config_a: Annotated[Optional[Path], typer.Option("--config-a", help="Launch script or log of A.")] = None,
    config_b: Annotated[Optional[Path], typer.Option("--config-b", help="Launch script or log of B.")] = None,
    log_a: Annotated[
        Optional[Path],
        typer.Option("--log-a", help="sglang launch log of A: ledger, server args, dp and captured graph sizes."),
    ] = None,
    log_b: Annotated[Optional[Path], typer.Option("--log-b", help="sglang launch log of B.")] = None,
    rank: RankOpt = "TP-0",
    jobs: JobsOpt = None,
    output: Output = OUTPUT,
) -> None:
    """Two deployments compared: B against A, and where they differ.

    Step time and estimated throughput (est_throughput) per instance concurrency.

    With --log-a/--log-b the launch logs also give the memory ledger difference, the server-argument difference,
    and (unless given) dp and the captured CUDA-graph batch sizes."""
    from ..fan_out import compare_deployments

    _graph_bs(cuda_graph_bs_a), _graph_bs(cuda_graph_bs_b)  # usage errors name the option
    res = compare_deployments(
        a,
        b,
        dp_a=dp_a,
        dp_b=dp_b,
        annotation_a=annotation_a,
        annotation_b=annotation_b,
        accept_len=accept_len,
        cuda_graph_bs_a=cuda_graph_bs_a,
        cuda_graph_bs_b=cuda_graph_bs_b,
        bench=bench,
        config_a=config_a,
        config_b=config_b,
        log_a=log_a,
        log_b=log_b,
        rank=rank,
        jobs=jobs,
    )
    output.write(res)


@app.command(name="bench")
def bench_cmd(
    files: Annotated[list[Path], typer.Argument(help="Benchmark result files: CSV, JSON or JSONL.")],
    accept_len: Annotated[
        float,
        typer.Option(
            "--accept-len",
            min=0.0,
            help="Accepted tokens per request per step, for the estimated throughput"
            " (the default assumes speculative decoding; pass 1 without it).",
        ),
    ] = DEFAULT_ACCEPT_LEN,
    output: Output = OUTPUT,
) -> None:
    """Benchmark result files as one performance table.

    Reads tracekit's own columns, sglang bench_serving and bench_one_batch_server results, and adds the estimated
    throughput."""
    from ..fan_out import benchmark_table

    output.write(benchmark_table(files, accept_len=accept_len))


@app.command(name="ranks")
def ranks_cmd(
    tp: Annotated[int, typer.Option("--tp", min=1, help="TP size (all ranks of the instance).")],
    dp: Annotated[int, typer.Option("--dp", min=1, help="DP size: the number of attention DP groups.")] = 1,
    attn_cp: Annotated[int, typer.Option("--attn-cp", min=1, help="Attention context-parallel (CP) size.")] = 1,
    dp_attention: Annotated[
        bool,
        typer.Option(
            "--dp-attention/--no-dp-attention",
            help="DP attention on (the default) or off; off makes the whole TP group one attention group.",
        ),
    ] = True,
    dcp: Annotated[
        int,
        typer.Option(
            "--dcp",
            min=1,
            help="Decode context-parallel size: one attention TP group's KV cache split this many"
            " ways (the attention TP size is unchanged).",
        ),
    ] = 1,
    ep: Annotated[
        Optional[int], typer.Option("--ep", min=1, help="Expert-parallel size of the MoE (default: --tp).")
    ] = None,
    output: Output = OUTPUT,
) -> None:
    """Each GPU's attention group and rank under DP attention.

    Attention TP size, and the attention TP rank, CP rank, DP rank, DCP rank and expert-parallel rank of every TP
    rank."""
    from ..analyses.fleet.rank_map import rank_map

    output.write(rank_map(tp=tp, dp=dp, attn_cp=attn_cp, dp_attention=dp_attention, dcp=dcp, ep=ep))


@app.command(name="imbalance")
def imbalance_cmd(
    directory: Annotated[
        list[Path],
        typer.Argument(
            help="The ranks of one run: a directory (rank files, per-rank folders, sglang's per-stage"
            " files) or the files."
        ),
    ],
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    dask_timeout: DaskTimeoutOpt = None,
    gpus_per_node: Annotated[
        Optional[int],
        typer.Option(
            "--gpus-per-node",
            min=1,
            help="Ranks per node (one clock per node; default: the hosts in the file names, else 8).",
        ),
    ] = None,
    world_size: WorldSizeOpt = None,
    step_flags: StepFlags = RANK_STEP_FLAGS,
    cache: CacheFlags = NO_CACHE,
    output: Output = OUTPUT,
) -> None:
    """Who waits for whom across the ranks of one run.

    Every rank on the reference rank's clock (offsets from the ends of blocking collectives), each collective
    (DeepEP dispatch/combine, NCCL all-reduce, all-gather, …) matched across the ranks: per step the waits, the
    imbalance (last − median arrival) and the straggler with its batch and the work it did before arriving."""
    from ..fan_out import imbalance

    root = directory[0] if len(directory) == 1 else directory
    kwargs = dict(
        jobs=jobs,
        dask=dask,
        dask_timeout=dask_timeout,
        gpus_per_node=gpus_per_node,
        world_size=world_size,
        cache=cache.cache,
        steps=step_flags.of_ranks(),
    )
    if show_progress():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress(
            "reading ranks",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task("ranks", total=None)
            res = imbalance(root, progress=lambda done, total: bar.update(task, completed=done, total=total), **kwargs)
    else:
        res = imbalance(root, **kwargs)
    output.write(res)
