"""Commands that use hardware profiles: roofline, waves and waves calc (wave quantization), hbm, hw.

``tracekit waves TRACE`` and ``tracekit waves calc ...`` share one name: ``waves`` is a group whose
default sub-command (``trace``) is used whenever the first argument is not a sub-command's name.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from ..data import MAX_SPLIT, SPLIT_RULES
from ..errors import InputError
from .common import AnnotationOpt, TraceArg, annotation_for, app
from .groups import App
from .options import CACHE, OUTPUT, REPLAY, STEP_FLAGS, CacheFlags, Output, ReplayFlags, StepFlags, gbps_or_bus

HwOpt = Annotated[
    Optional[str],
    typer.Option(
        "--hw",
        help="Hardware profile: a shipped name (b200, h100, mi300x, …; `tracekit hw` lists them) or a JSON file."
        " Default: detected from the trace's devices (deviceProperties, TARGET_INFO_GPU, rocprofv3 agents).",
    ),
]
HbmOpt = Annotated[
    Optional[str],
    typer.Option(
        "--hbm-gbps",
        callback=gbps_or_bus,
        help="HBM peak to use instead of the profile's: GB/s, or 'bus' for the bus-derived figure.",
    ),
]
BsOpt = Annotated[
    Optional[float],
    typer.Option(
        "--bs", min=0, help="Requests per rank per step (default: from the step marker, else the annotation)."
    ),
]
QlenOpt = Annotated[
    Optional[float],
    typer.Option(
        "--qlen", min=0, help="Tokens per request per step (default: the annotation's q_len constant, else 1)."
    ),
]
VarOpt = Annotated[
    Optional[list[str]],
    typer.Option("--var", help="A formula variable, NAME=NUMBER (repeatable), e.g. context=200000."),
]


def _hw(hw: Optional[str], hbm: Optional[str], meta: dict, what: str):
    from ..gpu_specs import resolve_profile, with_hbm

    return with_hbm(resolve_profile(hw, meta, what=what), hbm)


def _shape_analysis(
    fn,
    what,
    trace,
    annotation,
    hw,
    hbm_gbps,
    bs,
    qlen,
    var,
    step_flags: StepFlags,
    output: Output,
    cache: CacheFlags,
    replay: ReplayFlags = ReplayFlags(),
) -> None:
    """roofline and hbm: one trace, the shapes it records (or an annotation's op shapes), a hardware profile."""
    from ..analyses.hardware.roofline import parse_vars

    ann = annotation_for(trace, annotation)  # None: the shapes the trace recorded (record_shapes=True)
    t = cache.load(trace)
    from ..analyses.hardware.replay_attribution import use_replay_sources

    use_replay_sources(t, **replay.keywords(), cache=cache.cache, cache_dir=cache.cache_dir)
    res = fn(
        t,
        ann,
        _hw(hw, hbm_gbps, t.meta, what),
        bs=bs,
        q_len=qlen,
        variables=parse_vars(var),
        steps=step_flags.options(ann),
        **replay.keywords(),
    )
    output.write(res)


@app.command(name="roofline")
def roofline_cmd(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    hw: HwOpt = None,
    hbm_gbps: HbmOpt = None,
    bs: BsOpt = None,
    qlen: QlenOpt = None,
    var: VarOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    replay: ReplayFlags = REPLAY,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """How close each op runs to the GPU's memory and compute peaks.

    Per kernel, from the shapes the trace records (Input Dims of the op that launched it) or an annotation's op
    shapes: bytes, FLOPs, achieved TB/s and TFLOP/s, MBU, MFU, and whether it is memory or compute bound."""
    from ..analyses.hardware.roofline import roofline

    _shape_analysis(
        roofline,
        "roofline",
        trace,
        annotation,
        hw,
        hbm_gbps,
        bs,
        qlen,
        var,
        step_flags,
        output,
        cache,
        replay,
    )


@app.command(name="hbm")
def hbm_cmd(
    trace: TraceArg = None,
    annotation: AnnotationOpt = None,
    hw: HwOpt = None,
    hbm_gbps: HbmOpt = None,
    bs: BsOpt = None,
    qlen: QlenOpt = None,
    var: VarOpt = None,
    step_flags: StepFlags = STEP_FLAGS,
    replay: ReplayFlags = REPLAY,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """HBM bytes per GPU per step: state, KV, weights, experts.

    One row per entry of the annotation's hbm table; without an annotation, bytes per step by op family from the
    shapes the trace records."""
    from ..analyses.hardware.hbm import hbm_bytes

    _shape_analysis(
        hbm_bytes,
        "hbm",
        trace,
        annotation,
        hw,
        hbm_gbps,
        bs,
        qlen,
        var,
        step_flags,
        output,
        cache,
        replay,
    )


@app.command(name="replay")
def replay_cmd(
    trace: TraceArg = None,
    replay: ReplayFlags = REPLAY,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """Which op each graph-replayed kernel came from.

    The kernels a graph launch replayed, attributed to the ops of the graph's capture trace (capture_traces/ beside
    the trace, or --capture): how many and what share of their time, by which source, from which capture files,
    and what was not attributed and why (docs/replay.md)."""
    from ..analyses.hardware.replay import replay_summary
    from ..analyses.hardware.replay_attribution import use_replay_sources

    t = cache.load(trace)
    use_replay_sources(t, **replay.keywords(), cache=cache.cache, cache_dir=cache.cache_dir)
    output.write(replay_summary(t, **replay.keywords()))


@app.command(name="hw")
def hw_cmd(
    name: Annotated[Optional[str], typer.Argument(help="A profile name or JSON file (default: list all).")] = None,
    output: Output = OUTPUT,
) -> None:
    """The hardware profiles tracekit knows, or one of them.

    SMs, HBM, dense peaks per dtype, link bandwidth, and where each figure comes from."""
    from ..gpu_specs import hw_profiles

    output.write(hw_profiles(name))


class _DefaultTraceGroup(TyperGroup):
    """`waves ARGS` runs `waves trace ARGS` unless ARGS starts with a sub-command name or asks for help."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:  # ctx: typer's (vendored) click Context
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["trace", *args]
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        """The group's help, then each sub-command's, so that one page (and docs/cli.md) shows both forms."""
        super().format_help(ctx, formatter)
        for name, title in (
            ("trace", "`tracekit waves [TRACE] ...` is `tracekit waves trace [TRACE] ...`:"),
            ("calc", "`tracekit waves calc ...`:"),
        ):
            cmd = self.commands.get(name)
            if cmd is None:
                continue
            info = ctx.info_name if name == "trace" else f"{ctx.info_name} calc"
            with type(ctx)(cmd, info_name=info, parent=ctx.parent) as sub:
                formatter.write(f"\n{title}\n\n{cmd.get_help(sub)}\n")


waves_app = App(
    cls=_DefaultTraceGroup,
    add_completion=False,
    rich_markup_mode=None,
    help="Time kernels lose to a partly filled last wave. `tracekit waves [TRACE]` ranks the kernels of a trace by"
    " the time lost to their tail wave (wave quantization; the `trace` sub-command, the"
    " default); `tracekit waves calc` works out the waves of one launch grid and the best"
    " KV split.",
)
app.add_typer(waves_app, name="waves")


def _grid(text: Optional[str]) -> Optional[tuple[int, int, int]]:
    if text is None:
        return None
    try:
        parts = tuple(int(x) for x in text.replace("(", "").replace(")", "").split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 1:
        raise typer.BadParameter(f"takes three positive integers X,Y,Z, not {text!r}", param_hint="--grid")
    return parts  # type: ignore[return-value]


SmsOpt = Annotated[
    Optional[int], typer.Option("--sms", min=1, help="SM (CU) count; default: the trace's, else --hw's.")
]
CtasPerSmOpt = Annotated[
    Optional[int],
    typer.Option(
        "--ctas-per-sm",
        min=1,
        help="CTAs resident per SM for every kernel (default: each kernel's own, from its"
        " threads, registers and shared memory against the SM's limits; the annotation's"
        " ctas_per_sm rules come first).",
    ),
]


@waves_app.command(name="trace")
def waves_trace(
    trace: TraceArg = None,
    sms: SmsOpt = None,
    hw: HwOpt = None,
    annotation: AnnotationOpt = None,
    ctas_per_sm: CtasPerSmOpt = None,
    min_waves: Annotated[
        int,
        typer.Option(
            "--min-waves",
            min=1,
            help="Only kernels with at least this many waves (2: tail waves of multi-wave kernels only).",
        ),
    ] = 1,
    top: Annotated[Optional[int], typer.Option("--top", min=1, help="Show only the N kernels that lose most.")] = None,
    step_flags: StepFlags = STEP_FLAGS,
    output: Output = OUTPUT,
    cache: CacheFlags = CACHE,
) -> None:
    """Kernels of a trace ranked by time lost to the tail wave (default).

    Every kernel with a launch grid: CTAs, waves, wave efficiency and the time lost to the tail wave."""
    from ..analyses.hardware.waves import kernel_waves
    from ..gpu_specs import load_profile

    t = cache.load(trace)
    profile = load_profile(hw) if hw else None
    ann = annotation_for(trace, annotation)
    res = kernel_waves(
        t,
        sms=sms,
        hw=profile,
        ann=ann,
        ctas_per_sm=ctas_per_sm,
        min_waves=min_waves,
        top=top,
        steps=step_flags.options(ann),
    )
    output.write(res)


@waves_app.command(name="calc")
def waves_calc_cmd(
    grid: Annotated[Optional[str], typer.Option("--grid", help="Launch grid X,Y,Z.")] = None,
    sms: Annotated[Optional[int], typer.Option("--sms", min=1, help="SM (CU) count.")] = None,
    hw: Annotated[
        Optional[str], typer.Option("--hw", help="Take the SM count from this hardware profile (name or JSON file).")
    ] = None,
    ctas_per_sm: Annotated[
        Optional[int], typer.Option("--ctas-per-sm", min=1, help="CTAs resident per SM (default 1).")
    ] = None,
    time_us: Annotated[
        Optional[float], typer.Option("--time-us", min=0, help="Measured kernel time of this grid, µs.")
    ] = None,
    batch: Annotated[
        Optional[int], typer.Option("--batch", min=1, help="Requests B: the grid is (2, B×qlen, split).")
    ] = None,
    qlen: Annotated[Optional[int], typer.Option("--qlen", min=1, help="Tokens per request per step.")] = None,
    layers: Annotated[
        Optional[int],
        typer.Option("--layers", min=1, help="Layers running this kernel per step (for the saving per step)."),
    ] = None,
    split: Annotated[
        str, typer.Option("--split", help=f"Split rule for the grid from --batch/--qlen: {' or '.join(SPLIT_RULES)}.")
    ] = "mla-simplified",
    max_split: Annotated[int, typer.Option("--max-split", min=1, help="Largest KV split considered.")] = MAX_SPLIT,
    output: Output = OUTPUT,
) -> None:
    """Waves of one launch grid, and what full waves would save.

    CTAs, waves and wave efficiency of a grid (--grid, or from --batch and --qlen); with --time-us the estimated
    time with full waves, and with --layers the saving per step."""
    from ..analyses.hardware.waves import waves_calc
    from ..gpu_specs import load_profile

    parsed = _grid(grid)
    n_sms = sms
    if n_sms is None:
        if hw is None:
            raise InputError("waves calc needs the SM count: pass --sms N or --hw NAME")
        n_sms = load_profile(hw).sms
    res = waves_calc(
        sms=n_sms,
        grid=parsed,
        batch=batch,
        q_len=qlen,
        split=split,
        ctas_per_sm=ctas_per_sm or 1,
        time_ns=None if time_us is None else int(round(time_us * 1000)),
        layers=layers,
        max_split=max_split,
    )
    output.write(res)
