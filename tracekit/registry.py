"""The one list of commands: each CLI command and the Python function it calls (the same options by name).

Plain data, importable without pandas or typer: the CLI builds its commands against it (``tracekit/cli/``) and the
package's public names are generated from it (``tracekit/__init__.py``: ``tracekit.<command>``, spaces as ``_``, and
``tracekit.<function name>`` are the function). ``tests/integration/test_parity.py`` checks that the CLI has exactly
these commands and that the CLI and the function give the same JSON; ``tests/test_public_names.py`` that every
public name is its function.
"""

from __future__ import annotations

# command (sub-commands as "group sub") -> "module:function" under tracekit
COMMANDS: dict[str, str] = {
    "info": "analyses.time.info:trace_info",
    "kernels": "analyses.hardware.kernel_stats:kernel_stats",
    "steps": "analyses.steps.resolve:step_windows",
    "wall": "analyses.time.decompose:decompose",
    "temporal": "analyses.time.decompose:temporal",
    "overlap": "analyses.time.overlap:overlap",
    "allgather": "analyses.comm.allgather:allgathers",
    "exposure": "analyses.comm.exposure:exposure",
    "comm": "analyses.comm.communication:communication",
    "blocks": "analyses.structure.blocks:block_stats",
    "stats": "analyses.structure.blocks:kernel_selection_stats",
    "report": "analyses.report.trace_report:report",
    "roofline": "analyses.hardware.roofline:roofline",
    "hbm": "analyses.hardware.hbm:hbm_bytes",
    "replay": "analyses.hardware.replay:replay_summary",
    "hw": "gpu_specs:hw_profiles",
    "waves trace": "analyses.hardware.waves:kernel_waves",
    "waves calc": "analyses.hardware.waves:waves_calc",
    "log": "analyses.memory.launch_log:log_records",
    "ledger": "analyses.memory.launch_log:ledger",
    "capacity": "analyses.memory.capacity:capacity",
    "export": "exporters.parquet:export_parquet",
    "annotate": "exporters.perfetto:annotate_trace",
    "analyze": "fan_out:analyze",
    "compare": "fan_out:compare_deployments",
    "bench": "fan_out:benchmark_table",
    "ranks": "analyses.fleet.rank_map:rank_map",
    "imbalance": "fan_out:imbalance",
    "cache info": "cache.admin:cache_info",
    "cache clear": "cache.admin:cache_clear",
    "layers": "analyses.structure.layers:layers",
    "suggest": "analyses.structure.suggest:suggested_annotation",
    "findings": "analyses.findings.trace_findings:findings",
    "whatif": "analyses.memory.whatif:whatif",
    "annotations": "analyses.structure.fit:annotation_fit",
    "plot decomposition": "analyses.fleet.plot_data:decomposition_points",
    "plot blocks": "analyses.fleet.plot_data:blocks_points",
    "plot exposure": "analyses.fleet.plot_data:exposure_points",
    "plot timeline": "render.plots:timeline_figure",
    "plot ledger": "render.plots:ledger_figure",
}


def public_name(command: str) -> str:
    """The name of a command's function in the package: ``tracekit.wall``, ``tracekit.waves_trace``."""
    return command.replace(" ", "_")


def public_functions() -> dict[str, str]:
    """Every public name the registry gives -> ``"module:function"``: each command's name and its function's own
    name (``wall`` and ``decompose`` are the same function)."""
    out: dict[str, str] = {}
    for command, target in COMMANDS.items():
        for name in (public_name(command), target.partition(":")[2]):
            if out.setdefault(name, target) != target:
                raise RuntimeError(
                    f"tracekit/registry.py: the public name {name!r} would be two functions"
                    f" ({out[name]} and {target}); rename one"
                )
    return out


def api_function(command: str):
    """The function behind a command."""
    from importlib import import_module

    module, _, name = COMMANDS[command].partition(":")
    return getattr(import_module(f"tracekit.{module}"), name)
